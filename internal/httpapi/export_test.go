package httpapi

// BypassEncodeCache makes every feed encode its own copy of each envelope
// (true) or share the cached one (false, the product's behaviour).
func BypassEncodeCache(on bool) { encCacheBypass.Store(on) }
