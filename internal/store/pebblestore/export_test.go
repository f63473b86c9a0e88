package pebblestore

// Key encodings for tests that edit a store's Pebble directly.
var (
	HistKey  = histKey
	IndexKey = indexKey
)
