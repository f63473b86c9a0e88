package runtime

import (
	"sync/atomic"
	"time"

	"github.com/macpd/macpd/internal/clock"
)

// deadlines hands out channels that are closed a little after d: a channel
// taken at time t closes between t+d and about t+d+2d/deadlineSteps. It bounds
// the commit waits (Options.CommitTimeout) with one shared ticker instead
// of a timer per call: a timer per Send was ~1.4% of the server's CPU
// under load, and the bound needs no precision.
type deadlines struct {
	d     time.Duration
	clock clock.Clock
	cur   atomic.Pointer[chan struct{}]
}

// deadlineSteps is how many channels are open at once: one is handed
// out, the others wait out their d.
const deadlineSteps = 8

func newDeadlines(d time.Duration, clk clock.Clock) *deadlines {
	x := &deadlines{d: d, clock: clk}
	c := make(chan struct{})
	x.cur.Store(&c)
	return x
}

// after returns the channel that closes after about d (see deadlines).
func (x *deadlines) after() <-chan struct{} { return *x.cur.Load() }

// run hands out a new channel every d/deadlineSteps and closes each one
// once d has passed since it stopped being handed out (checked at each
// step), until stop. The channels still open at stop are left open (the
// waits they bound are answered by the runtime's shutdown).
func (x *deadlines) run(stop <-chan struct{}) {
	step := max(x.d/deadlineSteps, time.Millisecond)
	t := x.clock.NewTicker(step)
	defer t.Stop()
	type retired struct {
		ch chan struct{}
		at time.Time // when it stopped being handed out
	}
	var ring []retired
	for {
		select {
		case <-t.C():
		case <-stop:
			return
		}
		now := x.clock.Now()
		for len(ring) > 0 && now.Sub(ring[0].at) >= x.d {
			close(ring[0].ch)
			ring = ring[1:]
		}
		c := make(chan struct{})
		old := x.cur.Swap(&c)
		// Taken after the swap: no waiter took old later. (The closes
		// come first, so a new channel handed out means this step's
		// closes are done.)
		ring = append(ring, retired{*old, x.clock.Now()})
	}
}
