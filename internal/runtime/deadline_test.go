package runtime

import (
	"testing"
	"time"

	"github.com/macpd/macpd/internal/clock/clocktest"
)

// A channel from deadlines closes exactly at the first step at least d
// after it stopped being handed out: never before d after it was taken,
// at most d plus a step after; stopping leaves the rest open. The clock
// is a fake moved one step at a time, and the test waits for the loop to
// hand out the step's new channel (which it does after the step's closes)
// before it looks, so every check is exact and nothing sleeps.
func TestDeadlines(t *testing.T) {
	const d = 80 * time.Millisecond
	const step = d / deadlineSteps
	clk := clocktest.New()
	x := newDeadlines(d, clk)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); x.run(stop) }()
	if !clk.WaitArmed(1, 10*time.Second) {
		t.Fatal("the loop did not start its ticker")
	}

	type taken struct {
		at, retired time.Time // retired: when the loop stopped handing it out
		ch          <-chan struct{}
	}
	var all []*taken
	var handedOut []*taken // taken since the last step
	take := func() {
		tk := &taken{at: clk.Now(), ch: x.after()}
		all = append(all, tk)
		handedOut = append(handedOut, tk)
	}
	// tick moves the clock to the next step and waits for its new channel.
	tick := func(by time.Duration) {
		prev := x.after()
		clk.Advance(by)
		eventually(t, 10*time.Second, "the step's new channel", func() bool { return x.after() != prev })
		for _, tk := range handedOut {
			tk.retired = clk.Now()
		}
		handedOut = nil
	}
	check := func() {
		now := clk.Now()
		for i, tk := range all {
			if tk.retired.IsZero() {
				continue
			}
			want := now.Sub(tk.retired) >= d
			if got := closed(tk.ch); got != want {
				t.Fatalf("at +%v channel %d (taken at +%v, retired at +%v): closed=%v, want %v",
					now.Sub(all[0].at), i, tk.at.Sub(all[0].at), tk.retired.Sub(all[0].at), got, want)
			}
			if got := closed(tk.ch); got && now.Sub(tk.at) < d {
				t.Fatalf("channel %d closed %v after it was taken, before %v", i, now.Sub(tk.at), d)
			}
		}
	}
	for range 30 {
		take()
		clk.Advance(step / 2)
		take() // mid-step: the same channel, held longer
		tick(step / 2)
		check()
	}
	for range deadlineSteps + 1 {
		tick(step)
		check()
	}
	for i, tk := range all {
		if !closed(tk.ch) {
			t.Fatalf("channel %d still open %v after it was taken", i, clk.Now().Sub(tk.at))
		}
	}
	close(stop)
	<-done
	c := x.after()
	clk.Advance(10 * d)
	if closed(c) {
		t.Fatal("the channel handed out at stop was closed")
	}
}
