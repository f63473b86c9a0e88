package enccache_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/enccache"
)

// counting encodes env's message id (with the variant) and counts calls.
type counting struct{ n atomic.Int64 }

func (c *counting) encode(env *macpv1.Envelope, variant bool) ([]byte, error) {
	c.n.Add(1)
	return fmt.Appendf(nil, "%s/%v", env.GetMessageId(), variant), nil
}

// A record encoded once is served to every other follower; another
// sequence number, variant or envelope is encoded anew.
func TestEncodedOncePerRecordAndVariant(t *testing.T) {
	c := enccache.New(64, 1<<10)
	var enc counting
	env := &macpv1.Envelope{MessageId: "m1"}
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := c.Encoded(7, env, false, enc.encode)
			if err != nil || string(b) != "m1/false" {
				t.Errorf("Encoded = %q, %v", b, err)
			}
		}()
	}
	wg.Wait()
	// Concurrent first callers may each encode; after that, hits.
	first := enc.n.Load()
	for range 10 {
		if _, err := c.Encoded(7, env, false, enc.encode); err != nil {
			t.Fatal(err)
		}
	}
	if enc.n.Load() != first {
		t.Fatalf("cached record encoded again: %d encodings, then %d", first, enc.n.Load())
	}
	if b, _ := c.Encoded(7, env, true, enc.encode); string(b) != "m1/true" {
		t.Fatalf("other variant: %q", b)
	}
	if b, _ := c.Encoded(8, env, false, enc.encode); string(b) != "m1/false" || enc.n.Load() != first+2 {
		t.Fatalf("other sequence number: %q after %d encodings", b, enc.n.Load())
	}
	other := &macpv1.Envelope{MessageId: "m1"} // equal, but another record's
	before := enc.n.Load()
	if _, err := c.Encoded(8, other, false, enc.encode); err != nil || enc.n.Load() != before+1 {
		t.Fatalf("another envelope with the same content was served from the cache")
	}
}

// Encodings larger than the entry bound are not kept; errors are returned
// and not kept.
func TestLargeAndFailedEncodingsAreNotKept(t *testing.T) {
	c := enccache.New(8, 16)
	env := &macpv1.Envelope{MessageId: "m"}
	var n int
	big := func(*macpv1.Envelope, bool) ([]byte, error) { n++; return bytes.Repeat([]byte{'x'}, 17), nil }
	for range 3 {
		if _, err := c.Encoded(1, env, false, big); err != nil {
			t.Fatal(err)
		}
	}
	if n != 3 {
		t.Fatalf("an encoding over the bound was kept: %d encodings for 3 calls", n)
	}
	boom := errors.New("boom")
	fail := func(*macpv1.Envelope, bool) ([]byte, error) { n++; return nil, boom }
	for range 2 {
		if _, err := c.Encoded(2, env, false, fail); !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
	}
	if n != 5 {
		t.Fatalf("a failed encoding was kept")
	}
}
