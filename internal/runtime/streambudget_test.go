package runtime

import (
	"context"
	"errors"
	"slices"
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
	b := NewStreamBudget(StreamBudgetOptions{PerStream: 100, Total: 1000, StallTimeout: 50 * time.Millisecond}, clk)
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
	big := NewStreamBudget(StreamBudgetOptions{PerStream: 100, Total: 150, StallTimeout: 50 * time.Millisecond}, clk)
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
