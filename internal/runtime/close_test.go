package runtime

import (
	"context"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
)

// Close waits for the append in progress; that append's sender gets its
// real outcome, requests queued behind it are answered truthfully (never
// left hanging), and later calls fail fast.
func TestCloseDuringStalledAppend(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	ctx := context.Background()
	sid := openSession(t, r, 0)

	stall := st.block(sid, false)
	first := sendAsync(r, ctx, aliceID, proposalEnv(sid, "m2"))
	waitEntered(t, stall)
	queued := sendAsync(r, ctx, bobID, proposalEnv(sid, "m3"))
	eventually(t, 2*time.Second, "m3 queued", func() bool { return len(r.commit.queue) == 1 })

	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	nothingFor(t, closed, 50*time.Millisecond, "Close while an append is in progress")
	stall.release()
	recv(t, closed, "Close")

	if ack := recv(t, first, "m2 ack"); !ack.Ok {
		t.Fatalf("the append in progress completed, its ack must say so: %v", ack)
	}
	// The queued request may still be written or be refused; either way
	// its ack tells the truth.
	want := []string{"m0", "m1", "m2"}
	if ack := recv(t, queued, "m3 ack"); ack.Ok {
		want = append(want, "m3")
	} else {
		wantCode(t, ack, coord.CodeInternalError)
	}
	wantCode(t, r.Send(ctx, aliceID, proposalEnv(sid, "m4")), coord.CodeInternalError)
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, want) {
		t.Fatalf("stored %v, want %v", ids, want)
	}
	r.Close() // idempotent
}

// No goroutine outlives Close: not the committer, the timer loop, expiry
// workers, nor the background completions of abandoned calls.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	base := goruntime.NumGoroutine()
	st := newFaultStore()
	clk := clocktest.New()
	r := New(st, testModes(), defaultPolicies, Options{Clock: clk})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Traffic, expiries, a failed expiry being retried, an abandoned call.
	for range 5 {
		openSession(t, r, 0)
	}
	short := newSID()
	mustOK(t, r, initID, startAt(clk, short, "m0", 20))
	retried := newSID()
	mustOK(t, r, initID, startAt(clk, retried, "m0", 30)) // not in short's append: it fails
	st.failNext(retried, -1)
	sid := openSession(t, r, 0)
	stall := st.block(sid, false)
	ctx, cancel := context.WithCancel(context.Background())
	ch := sendAsync(r, ctx, aliceID, proposalEnv(sid, "m2"))
	waitEntered(t, stall)
	cancel()
	recv(t, ch, "abandoned ack")
	stall.release()
	// The deadlines pass: short expires, retried fails and is retried.
	clk.Advance(20 * time.Millisecond)
	eventually(t, 10*time.Second, "the short session to expire", func() bool { return len(stored(t, st, short)) == 2 })
	clk.Advance(10 * time.Millisecond)
	retryAt := clk.NowMs() + expiryRetry.Milliseconds()
	eventually(t, 10*time.Second, "the failed expiry's retry", func() bool { return heapHas(r, retried, retryAt) })
	calls := st.calls.Load()
	clk.Advance(expiryRetry)
	eventually(t, 10*time.Second, "the retry to fail again", func() bool { return st.calls.Load() > calls })

	r.Close()
	st.clear()
	eventually(t, 2*time.Second, "goroutines to return to the baseline", func() bool {
		return goruntime.NumGoroutine() <= base
	})
}
