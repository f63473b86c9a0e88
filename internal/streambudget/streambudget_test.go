package streambudget

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
)

// docs/security.md "Stream buffers": the per-stream bound (one record is
// always allowed when nothing is pending), the global budget, the stall
// limit (only while holding something) and exact accounting. The stall
// limit runs on a fake clock the test advances.
func TestStreamWindowBounds(t *testing.T) {
	clk := clocktest.New()
	b := New(Options{PerStream: 100, Total: 1000, StallTimeout: 50 * time.Millisecond}, clk)
	w1, w2, w3 := b.NewWindow(), b.NewWindow(), b.NewWindow()
	if !w1.TryAcquire(400) {
		t.Fatal("an empty window must take one record larger than the bound")
	}
	if w1.TryAcquire(1) {
		t.Fatal("per-stream bound not enforced")
	}
	w1.Sent(400) // in the transport: w1 may take one more pending record
	if !w1.TryAcquire(10) {
		t.Fatal("sent bytes must not block the next record by the per-stream rule")
	}
	if w2.TryAcquire(600) {
		t.Fatalf("global budget not enforced: used %d", b.Stats().Used)
	}
	ctx := context.Background()
	// w3 holds nothing: waiting for the global budget is not a stall.
	done := make(chan error, 1)
	go func() { done <- w3.Acquire(ctx, 600) }()
	eventually(t, 10*time.Second, "w3 to wait", func() bool { return b.Stats().Waits == 1 })
	clk.Advance(150 * time.Millisecond) // well past the stall limit
	nothingFor(t, done, 20*time.Millisecond, "w3's Acquire (it holds nothing: not stalled)")
	w1.ReleaseSent(400)
	if err := <-done; err != nil {
		t.Fatalf("Acquire after a release: %v", err)
	}
	w2.Close()
	big := New(Options{PerStream: 100, Total: 150, StallTimeout: 50 * time.Millisecond}, clk)
	w := big.NewWindow()
	if !w.TryAcquire(100) {
		t.Fatal("first record")
	}
	stalled := make(chan error, 1)
	go func() { stalled <- w.Acquire(ctx, 60) }()
	eventually(t, 10*time.Second, "the stall timer", func() bool {
		return big.Stats().Waits == 1 && slices.ContainsFunc(clk.Deadlines(), clk.Now().Add(50*time.Millisecond).Equal)
	})
	clk.Advance(49 * time.Millisecond)
	if len(stalled) != 0 {
		t.Fatal("stalled before the stall limit")
	}
	clk.Advance(time.Millisecond)
	err := recv(t, stalled, "the stalled Acquire")
	var ce *coord.Error
	if !errors.As(err, &ce) || ce.Code != coord.CodeRateLimited {
		t.Fatalf("stalled window: %v, want RATE_LIMITED", err)
	}
	if big.Stats().Stalled != 1 {
		t.Fatalf("stalled count %d", big.Stats().Stalled)
	}
	w.Close()
	if u := big.Stats().Used; u != 0 {
		t.Fatalf("after Close the budget holds %d", u)
	}
	w1.Close()
	w3.Close()
	if u := b.Stats().Used; u != 0 {
		t.Fatalf("after Close the budget holds %d", u)
	}
}

// docs/security.md "Stream buffers" (issue 26 item 1): the per-identity
// and per-session shares bound what one identity's (one session's)
// windows hold together, an identity that holds nothing may always take
// one record, and the headroom lets a window that holds nothing take one
// record however full the rest of the budget is.
func TestStreamWindowShares(t *testing.T) {
	b := New(Options{PerStream: 100, Total: 1000, PerIdentity: 250, PerSession: 400, Headroom: 200}, clocktest.New())
	var mal []*Window
	for i := range 10 {
		w := b.NewWindow()
		w.Bind("mallory", "s-mal")
		if w.TryAcquire(100) != (i < 2) {
			t.Fatalf("mallory's window %d: acquire = %v; identity holds %d", i, !(i < 2), b.Stats().Used)
		}
		mal = append(mal, w)
	}
	if id, _ := b.Held("mallory", "s-mal"); id != 200 {
		t.Fatalf("mallory holds %d, want 200 (her share is 250)", id)
	}
	// Another identity of the same session: the session's share (400).
	o1, o2 := b.NewWindow(), b.NewWindow()
	o1.Bind("oscar", "s-mal")
	o2.Bind("oscar2", "s-mal")
	if !o1.TryAcquire(100) || !o2.TryAcquire(100) {
		t.Fatal("the session's share allows 400")
	}
	o3 := b.NewWindow()
	o3.Bind("oscar3", "s-mal")
	if o3.TryAcquire(100) {
		t.Fatal("the session's share not enforced")
	}
	// An unrelated identity and session: not held up.
	bob := b.NewWindow()
	bob.Bind("bob", "s-bob")
	if !bob.TryAcquire(100) {
		t.Fatal("an unrelated session was refused")
	}
	// Fill the ordinary part of the budget (Total - Headroom = 800) with
	// other identities' windows that hold something already.
	var fill []*Window
	for i := range 3 {
		w := b.NewWindow()
		w.Bind(fmt.Sprint("f", i), fmt.Sprint("sf", i))
		if !w.TryAcquire(100) {
			t.Fatalf("filler %d", i)
		}
		w.Sent(100)
		fill = append(fill, w)
	}
	if u := b.Stats().Used; u != 800 {
		t.Fatalf("used %d, want 800", u)
	}
	if fill[0].TryAcquire(50) {
		t.Fatal("a window that holds something took from the headroom")
	}
	carol := b.NewWindow()
	carol.Bind("carol", "s-carol")
	if !carol.TryAcquire(150) {
		t.Fatal("a window that holds nothing could not use the headroom")
	}
	// Closing returns the shares at once.
	for _, w := range mal {
		w.Close()
	}
	if id, sess := b.Held("mallory", "s-mal"); id != 0 || sess != 200 {
		t.Fatalf("after Close mallory holds %d, her session %d", id, sess)
	}
	if st := b.Stats(); st.Throttled != 0 {
		t.Fatalf("TryAcquire counted as throttled: %+v", st)
	}
	ids, sess := b.TopHolders(2)
	if len(ids) != 2 || len(sess) != 2 || sess[0].Name != "s-mal" || sess[0].Bytes != 200 {
		t.Fatalf("top holders %+v %+v", ids, sess)
	}
	for _, w := range append(fill, o1, o2, o3, bob, carol) {
		w.Close()
	}
	if u := b.Stats().Used; u != 0 {
		t.Fatalf("after Close the budget holds %d", u)
	}
	if ids, sess := b.TopHolders(5); len(ids)+len(sess) != 0 {
		t.Fatalf("holders left: %+v %+v", ids, sess)
	}
}

// Fair wake-up: waiters for the global budget are granted in the order
// they started waiting (a later, smaller one does not overtake), while one
// that waits on its own identity's share does not hold up the others.
func TestStreamWindowFairWakeUp(t *testing.T) {
	b := New(Options{PerStream: 1000, Total: 1000, PerIdentity: 600, PerSession: 1000, Headroom: 1}, clocktest.New())
	ctx := context.Background()
	take := func(who, sess string, n int64) *Window {
		w := b.NewWindow()
		w.Bind(who, sess)
		if !w.TryAcquire(n) {
			t.Fatalf("%s: %d refused (used %d)", who, n, b.Stats().Used)
		}
		w.Sent(n)
		return w
	}
	big, small := take("big", "s2", 10), take("small", "s3", 10) // both hold something
	hog, hog2 := take("hog", "s0", 300), take("hog2", "s00", 200)
	mw := take("mallory", "s1", 450) // used 970 of the 999 a holding window may use
	// mallory waits on her share (she holds 450 of 600).
	mw2 := b.NewWindow()
	mw2.Bind("mallory", "s1")
	mDone := make(chan error, 1)
	go func() { mDone <- mw2.Acquire(ctx, 200) }()
	eventually(t, 10*time.Second, "mallory to wait", func() bool { return b.Stats().Waits == 1 })
	if b.Stats().Throttled != 1 {
		t.Fatalf("mallory's wait not counted as throttled: %+v", b.Stats())
	}
	bigDone, smallDone := make(chan error, 1), make(chan error, 1)
	go func() { bigDone <- big.Acquire(ctx, 300) }()
	eventually(t, 10*time.Second, "big to wait", func() bool { return b.Stats().Waits == 2 })
	go func() { smallDone <- small.Acquire(ctx, 10) }()
	eventually(t, 10*time.Second, "small to wait", func() bool { return b.Stats().Waits == 3 })
	hog2.ReleaseSent(200) // 770 used: small (10) would fit, big (300) not
	nothingFor(t, smallDone, 20*time.Millisecond, "small's Acquire (it came after big)")
	hog.ReleaseSent(300) // 470 used: big, then small
	if err := recv(t, bigDone, "big's Acquire"); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, smallDone, "small's Acquire"); err != nil {
		t.Fatal(err)
	}
	nothingFor(t, mDone, 20*time.Millisecond, "mallory's Acquire (her share is full)")
	mw.ReleaseSent(450)
	if err := recv(t, mDone, "mallory's Acquire"); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	for name, h := range b.identities {
		if h.waiting != 0 {
			t.Errorf("identity %s still counts %d waiters", name, h.waiting)
		}
	}
	if len(b.queue) != 0 {
		t.Errorf("%d waiters left in the queue", len(b.queue))
	}
	b.mu.Unlock()
	for _, w := range []*Window{hog, hog2, mw, mw2, big, small} {
		w.Close()
	}
	if u := b.Stats().Used; u != 0 {
		t.Fatalf("used %d", u)
	}
}

// A window closed while its Acquire waits ends the Acquire, and a
// cancelled Acquire leaves the queue: neither blocks later waiters.
func TestStreamWindowWaiterLeaves(t *testing.T) {
	b := New(Options{PerStream: 1000, Total: 100, Headroom: 1}, clocktest.New())
	hog := b.NewWindow()
	if !hog.TryAcquire(100) {
		t.Fatal("hog")
	}
	w1 := b.NewWindow()
	d1 := make(chan error, 1)
	go func() { d1 <- w1.Acquire(context.Background(), 50) }()
	ctx, cancel := context.WithCancel(context.Background())
	w2 := b.NewWindow()
	d2 := make(chan error, 1)
	go func() { d2 <- w2.Acquire(ctx, 50) }()
	eventually(t, 10*time.Second, "both to wait", func() bool { return b.Stats().Waits == 2 })
	w1.Close()
	if err := recv(t, d1, "closed window's Acquire"); !errors.Is(err, context.Canceled) {
		t.Fatalf("closed window's Acquire: %v", err)
	}
	cancel()
	if err := recv(t, d2, "cancelled Acquire"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	hog.Close()
	w3 := b.NewWindow()
	if !w3.TryAcquire(100) {
		t.Fatal("a waiter that left still holds up others")
	}
	w3.Close()
	w2.Close()
	if u := b.Stats().Used; u != 0 {
		t.Fatalf("used %d", u)
	}
}

// Issue 26 item 7: a throttled identity and a stalled stream each leave a
// log line, at most one per interval however often they happen.
func TestStreamBudgetLogsAbuse(t *testing.T) {
	var buf bytes.Buffer
	clk := clocktest.New()
	b := New(Options{PerStream: 100, Total: 1000, PerIdentity: 100, StallTimeout: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))}, clk)
	w1 := b.NewWindow()
	w1.Bind("mallory", "s")
	if !w1.TryAcquire(100) {
		t.Fatal("first record")
	}
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 3 {
		w := b.NewWindow()
		w.Bind("mallory", "s")
		done := make(chan error, 1)
		go func() { done <- w.Acquire(ctx, 10) }()
		eventually(t, 10*time.Second, "a throttled wait", func() bool { return b.Stats().Throttled == int64(i+1) })
		defer w.Close()
	}
	cancel()
	if n := strings.Count(buf.String(), "holds its share"); n != 1 {
		t.Fatalf("%d throttle lines:\n%s", n, buf.String())
	}
	for range 2 {
		w1.Stalled()
	}
	if n := strings.Count(buf.String(), "stream was ended"); n != 1 {
		t.Fatalf("%d stall lines:\n%s", n, buf.String())
	}
	w1.Close()
}

// A grant that races with the end of its Acquire's context and the close
// of its window is returned once: the budget never goes negative.
func TestStreamWindowGrantRacingCloseCountsOnce(t *testing.T) {
	b := New(Options{PerStream: 1000, Total: 100, Headroom: 1}, clocktest.New())
	for range 200 {
		hog := b.NewWindow()
		if !hog.TryAcquire(100) {
			t.Fatal("hog")
		}
		w := b.NewWindow()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Acquire(ctx, 50) }()
		for {
			b.mu.Lock()
			queued := w.queued != nil
			b.mu.Unlock()
			if queued {
				break
			}
			time.Sleep(time.Millisecond)
		}
		// Grant, cancel and close at once, in the worst order.
		b.mu.Lock()
		hog.pending = 0
		hog.chargeLocked(-100) // grants w
		cancel()
		b.mu.Unlock()
		w.Close()
		<-done
		hog.Close()
		if u := b.Stats().Used; u != 0 {
			t.Fatalf("used %d after everything closed", u)
		}
	}
}

// A window closed while it holds something and its own Acquire waits
// (found by the stream-budget simulation, internal/sim): the release of
// what it held must not grant that Acquire, whose charge nothing would
// return; the Acquire ends (context.Canceled) and the budget is empty.
func TestStreamWindowCloseWithOwnWaiterReturnsAll(t *testing.T) {
	b := New(Options{PerStream: 100, Total: 1000}, clocktest.New())
	w := b.NewWindow()
	w.Bind("agent://a", "s1")
	if !w.TryAcquire(80) {
		t.Fatal("first record")
	}
	done := make(chan error, 1)
	go func() { done <- w.Acquire(context.Background(), 50) }() // waits on its own bound
	eventually(t, 5*time.Second, "the Acquire to wait", func() bool { return b.Stats().Waits == 1 })
	w.Close()
	if err := recv(t, done, "the Acquire to end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire on a window closed while it waited: %v, want context.Canceled", err)
	}
	if u := b.Stats().Used; u != 0 {
		t.Fatalf("used %d after the only window closed", u)
	}
}
