package server

import (
	"hash/maphash"
	"sync/atomic"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// respCache holds the StreamSessionResponse encodings of recently
// delivered records (encodeRecord), so that a record delivered to many
// StreamSession streams is encoded once, not once per stream
// (docs/benchmarks.md "Fan-out"). The runtime hands every follower of a
// session the same record, envelope pointer included, so an entry is
// keyed by that pointer and the record's sequence number. Lock-free and
// fixed-size: a slot keeps the last record that hashed to it, a miss
// encodes again. Only encodings of at most respCacheMaxEntry bytes are
// kept (at least gRPC's pooling threshold each), so the cache holds at most
// respCacheSlots * respCacheMaxEntry (32 MiB) besides the stream windows;
// a larger envelope is encoded per stream, charged to its window.
type respCache struct {
	seed  maphash.Seed
	slots [respCacheSlots]atomic.Pointer[respEntry]
}

const (
	respCacheSlots    = 2048
	respCacheMaxEntry = 16 << 10
)

type respEntry struct {
	env *macpv1.Envelope
	seq uint64
	b   []byte
}

// records is the process's cache: entries are keyed by envelope pointers,
// which no two live records share, so every Service may use it.
var records = &respCache{seed: maphash.MakeSeed()}

// encoded returns the encoded StreamSessionResponse carrying env (record
// seq), from the cache when another stream encoded it recently. The bytes
// are shared: never modify them.
func (c *respCache) encoded(seq uint64, env *macpv1.Envelope) ([]byte, error) {
	slot := &c.slots[(maphash.Comparable(c.seed, env)^seq)%respCacheSlots]
	if e := slot.Load(); e != nil && e.env == env && e.seq == seq {
		return e.b, nil
	}
	b, err := encodeRecord(env)
	if err != nil {
		return nil, err
	}
	if cap(b) <= respCacheMaxEntry {
		slot.Store(&respEntry{env: env, seq: seq, b: b})
	}
	return b, nil
}
