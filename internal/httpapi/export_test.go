package httpapi

// BypassEncodeCache makes every feed encode its own copy of each envelope
// (true) or share the cached one (false, the product's behaviour).
func BypassEncodeCache(on bool) { encCacheBypass.Store(on) }

// WSPeakOutstanding is the most macp/send requests one WebSocket
// connection has had outstanding at once in this process.
func WSPeakOutstanding() int64 { return wsPeakOutstanding.Load() }
