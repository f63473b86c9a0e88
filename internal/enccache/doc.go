// Package enccache holds recently encoded envelopes, so that a record
// delivered to many followers of its session is encoded once, not once
// per follower: StreamSession streams (internal/server, protobuf) and SSE,
// WebSocket and protocol-mode feeds (internal/httpapi, JSON) each keep
// one Cache.
//
// The runtime hands every follower of a session the same record, envelope
// pointer included, so an entry is keyed by that pointer, the record's
// sequence number and a variant flag (the caller's: which encoding). A
// Cache is lock-free and fixed-size: a slot keeps the last entry that
// hashed to it, and a miss encodes again. Only encodings of at most
// maxEntry bytes of capacity are kept, so a Cache holds at most slots *
// maxEntry bytes; a larger envelope is encoded per follower. Returned
// bytes are shared by every caller: never modify them.
package enccache
