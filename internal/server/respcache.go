package server

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/enccache"
)

// records holds the StreamSessionResponse encodings of recently delivered
// records (encodeRecord), so that a record delivered to many StreamSession
// streams is encoded once, not once per stream (docs/benchmarks.md
// "Fan-out"; internal/enccache). Entries are keyed by envelope pointers,
// which no two live records share, so one cache serves every Service: at
// most 2048 encodings of at most 16 KiB (32 MiB) besides the stream
// windows; a larger envelope is encoded per stream, charged to its window.
var records = recordCache{enccache.New(2048, 16<<10)}

type recordCache struct{ c *enccache.Cache }

// encoded returns the encoded StreamSessionResponse carrying env (record
// seq). The bytes are shared: never modify them.
func (r recordCache) encoded(seq uint64, env *macpv1.Envelope) ([]byte, error) {
	return r.c.Encoded(seq, env, false, encodeRecordOf)
}

func encodeRecordOf(env *macpv1.Envelope, _ bool) ([]byte, error) { return encodeRecord(env) }
