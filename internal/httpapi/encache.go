package httpapi

import (
	"hash/maphash"
	"sync/atomic"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// encCache holds recently encoded envelope JSON, so that a record
// delivered to many feeds of one session (SSE, WebSocket) is encoded once,
// not once per follower. Lock-free and fixed-size: a slot keeps the last
// envelope that hashed to it; a miss just encodes again. Entries are keyed
// by the envelope's identity (the runtime hands every follower the same
// record), its sequence number and the view. Only encodings of at most
// encCacheMaxEntry bytes are kept, so the cache holds at most
// encCacheSlots * encCacheMaxEntry (64 MiB) besides the stream windows:
// a large envelope is encoded per feed, its bytes charged to that feed's
// window (feedwindow.go).
type encCache struct {
	seed  maphash.Seed
	slots [encCacheSlots]atomic.Pointer[encEntry]
}

const (
	encCacheSlots    = 4096
	encCacheMaxEntry = 16 << 10
)

type encEntry struct {
	env  *macpv1.Envelope
	seq  uint64
	view bool
	b    []byte
}

// encCacheBypass, set only by a benchmark (export_test.go), makes every
// feed encode its own copy, as before the cache: the baseline of
// BenchmarkFeedFanoutEncodeOnce.
var encCacheBypass atomic.Bool

func newEncCache() *encCache { return &encCache{seed: maphash.MakeSeed()} }

// encode returns the feed JSON of env (encodeEnvelope), from the cache
// when another feed encoded it recently. The returned bytes are shared:
// never modify them.
func (c *encCache) encode(seq uint64, env *macpv1.Envelope, view bool) ([]byte, error) {
	if encCacheBypass.Load() {
		return encodeEnvelope(env, view)
	}
	h := maphash.Comparable(c.seed, env) ^ seq
	slot := &c.slots[h%encCacheSlots]
	if e := slot.Load(); e != nil && e.env == env && e.seq == seq && e.view == view {
		return e.b, nil
	}
	b, err := encodeEnvelope(env, view)
	if err != nil {
		return nil, err
	}
	if len(b) <= encCacheMaxEntry {
		slot.Store(&encEntry{env: env, seq: seq, view: view, b: b})
	}
	return b, nil
}
