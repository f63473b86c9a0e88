package httpapi

import (
	"sync/atomic"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/enccache"
)

// encCache holds recently encoded envelope JSON, so that a record
// delivered to many feeds of one session (SSE, WebSocket, protocol mode)
// is encoded once, not once per follower (internal/enccache): entries are
// keyed by the envelope's identity (the runtime hands every follower the
// same record), its sequence number and the view; at most encCacheSlots
// encodings of at most encCacheMaxEntry bytes (64 MiB) besides the stream
// windows; a large envelope is encoded per feed, its bytes charged to that
// feed's window (feedwindow.go).
type encCache struct{ c *enccache.Cache }

const (
	encCacheSlots    = 4096
	encCacheMaxEntry = 16 << 10
)

// encCacheBypass, set only by a benchmark (export_test.go), makes every
// feed encode its own copy, as before the cache: the baseline of
// BenchmarkFeedFanoutEncodeOnce.
var encCacheBypass atomic.Bool

func newEncCache() *encCache { return &encCache{enccache.New(encCacheSlots, encCacheMaxEntry)} }

// encode returns the feed JSON of env (encodeEnvelope), from the cache
// when another feed encoded it recently. The returned bytes are shared:
// never modify them.
func (c *encCache) encode(seq uint64, env *macpv1.Envelope, view bool) ([]byte, error) {
	if encCacheBypass.Load() {
		return encodeEnvelope(env, view)
	}
	return c.c.Encoded(seq, env, view, encodeEnvelope)
}
