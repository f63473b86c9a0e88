package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/store/memstore"
)

// A copy the cluster feed cannot extend (a record is missing) is caught
// up from the store by a worker that waits on the runtime's clock, not
// the wall clock, and that Close ends (issue 29: catchUpLater is tracked
// and uses Options.Clock).
func TestCatchUpLaterRunsOnTheRuntimeClock(t *testing.T) {
	st := memstore.New()
	a := newSharedRT(t, st)
	clk := clocktest.New()
	b := New(st, testModes(), policy.DefaultOnly{}, Options{Clock: clk})
	b.EnableSharedStore()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	sid := newSID()
	mustOK(t, a, initID, startEnv(sid, "m0", 60_000))
	mustOK(t, a, aliceID, proposalEnv(sid, "m1"))
	mustOK(t, a, aliceID, proposalEnv(sid, "m2"))
	feed(t, b, st, sid, 1, 1) // b adopts the session at record 1
	if n, _ := b.LastSeq(sid); n != 1 {
		t.Fatalf("b's copy ends at %d", n)
	}
	feed(t, b, st, sid, 3, 3) // record 2 is missing: caught up later
	time.Sleep(50 * time.Millisecond)
	if n, _ := b.LastSeq(sid); n != 1 {
		t.Fatalf("b's copy moved to %d before its clock did", n)
	}
	eventually(t, 10*time.Second, "b's copy to catch up on its clock", func() bool {
		clk.Advance(5 * time.Millisecond)
		n, _ := b.LastSeq(sid)
		return n == 3
	})

	// A worker still waiting on the clock ends with Close.
	mustOK(t, a, aliceID, proposalEnv(sid, "m3"))
	mustOK(t, a, aliceID, proposalEnv(sid, "m4"))
	feed(t, b, st, sid, 5, 5)
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	recv(t, done, "Close while a catch-up worker waits")
}
