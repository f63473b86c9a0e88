package pebblestore_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// Pebble reserves its memtables' memory from the block cache: with the
// cache sized for blocks alone, the memtables took all of it and every
// point lookup read its tables' index and filter blocks again. Once the
// memtables have grown to their full size, lookups must be served from
// the cache.
func TestBlockCacheNotStarvedByMemtables(t *testing.T) {
	s := mustOpen(t, "db", pebblestore.Options{FS: vfs.NewMem(), CacheSize: 1 << 20, MemTableSize: 4 << 20})
	defer s.Close()
	pad := bytes.Repeat([]byte("x"), 1000)
	const sessions, perSession = 300, 100 // about 30 MB: several full memtables
	for i := 0; i < sessions; i++ {
		id := fmt.Sprintf("s-%04d", i)
		recs := make([]session.Record, 0, perSession)
		for seq := uint64(1); seq <= perSession; seq++ {
			r := rec(id, seq, 0)
			r.Envelope.Payload = pad
			recs = append(recs, r)
		}
		if err := s.Append(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	lookups := func() {
		for i := 0; i < sessions; i++ {
			if _, err := s.Info(ctx, fmt.Sprintf("s-%04d", i)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Info(ctx, fmt.Sprintf("absent-%04d", i)); err == nil {
				t.Fatal("absent session found")
			}
		}
	}
	lookups() // warm
	before := pebblestore.PebbleMetrics(s).BlockCache
	lookups()
	after := pebblestore.PebbleMetrics(s).BlockCache
	hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
	if after.Size == 0 || hits == 0 || misses > hits {
		t.Fatalf("second pass of lookups: %d cache hits, %d misses, %d bytes cached; want mostly hits", hits, misses, after.Size)
	}
}
