package httpapi_test

import (
	"net"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

// Issue 26 "Done when", docs/security.md "Stream buffers": the probe's
// 200 stalled SSE readers, under the default shares. 200 raw SSE feeds
// of one identity from sequence 0 on its own session with about 100 MB
// of history never read. At every sample:
//   - what that identity holds in the budget is at most its share
//     (MACP_STREAM_BUFFER_IDENTITY_BYTES, default 1/8 of the budget) plus
//     the one record an identity may always take;
//   - the live heap grows by at most that share plus storeReadAllowance
//     (the store reads in progress and the connections themselves; the
//     HTTP figure of the global bound has its own test,
//     TestNeverReadingHTTPFollowersStayWithinTheStreamBudget).
//
// When the clients disconnect, every window is closed and every charge
// returned with garbage collection off: the release is the connection's
// end, not a finalizer.
func TestStalledSSEReadersStayWithinTheIdentityShare(t *testing.T) {
	if raceEnabled {
		t.Skip("heap bound measured without -race; .ci/run runs it (scripts/test-extra.sh: go test -run '^TestNeverReading|^TestStalledSSE' ./internal/httpapi)")
	}
	if testing.Short() {
		t.Skip("writes 100 MB of history; run without -short")
	}
	cfg := testConfig()
	cfg.MemoryOnly = false
	cfg.DataDir = t.TempDir()
	cfg.Limits.MaxConnectionsPerAddr = 1024 // every client is 127.0.0.1
	cfg.Limits.StreamStallTimeout = 0       // the readers wait for their share however long the test looks
	e := startApp(t, cfg)
	rt := e.a.Runtime()
	opts := rt.StreamBudget().Options()
	share := opts.PerIdentity
	if share <= 0 || share != opts.Total/8 {
		t.Fatalf("identity share %d, want the default 1/8 of the budget %d", share, opts.Total)
	}
	const records, size, readers = 100, 1000 << 10, 200
	sid := bigHistory(t, e, records, size)
	// A record costs twice its envelope plus 512 bytes (docs/security.md).
	oneRecord := int64(2*(size+1024) + 512)
	// Outside the budget: the store reads in progress (a few records per
	// reading follower), the 200 connections' buffers and goroutines.
	allowance := int64(storeReadAllowance)

	base := liveHeap()
	conns := make([]net.Conn, readers)
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialStalledSSE(e, "alice", sid)
			conns[i] = c
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("opening a reader: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			for _, c := range conns {
				c.Close()
			}
		}
	})

	// Sample while the readers fill the share and wait for it.
	var worstHeap, worstHeld int64
	throttledAt := int64(-1)
	for i := 0; i < 200; i++ {
		grown := int64(liveHeap()) - int64(base)
		held, _ := rt.StreamBudget().Held("alice", sid)
		st := rt.StreamBudget().Stats()
		worstHeap, worstHeld = max(worstHeap, grown), max(worstHeld, held)
		if held > share+oneRecord {
			t.Fatalf("sample %d: alice's streams hold %d MiB, over her share of %d MiB and one record; %+v", i, held>>20, share>>20, st)
		}
		if grown > share+allowance {
			t.Fatalf("sample %d: live heap grew by %d MiB, over alice's share (%d MiB) and the allowance (%d MiB); %+v", i, grown>>20, share>>20, allowance>>20, st)
		}
		// Look until the readers have waited on the share for 5 s.
		if st.Throttled >= readers/2 && throttledAt < 0 {
			throttledAt = int64(i)
		}
		if throttledAt >= 0 && int64(i)-throttledAt >= 25 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := rt.StreamBudget().Stats()
	if throttledAt < 0 {
		t.Fatalf("the readers never waited on alice's share: %+v", st)
	}
	if st.Windows < readers {
		t.Fatalf("%d windows open, want the %d readers'", st.Windows, readers)
	}
	t.Logf("%d stalled SSE readers on %d MiB of history: alice holds at most %d MiB (share %d MiB), live heap at most %+d MiB; %d deliveries throttled",
		readers, records*size>>20, worstHeld>>20, share>>20, worstHeap>>20, st.Throttled)

	// The clients leave: every charge is returned without a collection.
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	closed = true
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, "every reader's window closed and its charge returned", func() bool {
		st := rt.StreamBudget().Stats()
		return st.Windows == 0 && st.Used == 0
	})
	if held, _ := rt.StreamBudget().Held("alice", sid); held != 0 {
		t.Fatalf("alice still holds %d bytes after her clients left", held)
	}
}
