// Package clocktest provides Fake, a clock.Clock that moves only when a
// test advances it, so tests of TTL expiry, deadlines, stalls and stream
// rules need no sleeping.
//
// Contract (besides clock.Clock's):
//  1. Now returns the fake instant; it changes only by Advance.
//  2. Advance(d) moves the instant forward by d, then fires, in deadline
//     order, every armed timer and ticker whose deadline is at or before
//     the new instant: each sends its deadline on its channel (buffer of
//     one, never blocking; a ticker drops the ticks its reader has not
//     taken and is re-armed one period after the last tick it sent).
//  3. A timer armed (NewTimer, Reset) at fake instant t with duration d
//     fires at the first Advance that reaches t+d. Stop and Reset discard
//     a tick not yet taken (as time.Timer does since Go 1.23).
//  4. Armed and WaitArmed tell a test how many timers and tickers are
//     armed, so it can advance only once the code under test is waiting;
//     WaitArmed waits on a notification, not by polling.
package clocktest

import (
	"slices"
	"sync"
	"time"

	"github.com/macpd/macpd/internal/clock"
)

// Fake is a manually advanced clock.Clock; safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer  // every timer and ticker made, armed or not
	changed chan struct{} // closed and replaced when a timer is armed or disarmed
}

var _ clock.Clock = (*Fake)(nil)

// New returns a fake clock at the current wall-clock millisecond (so
// envelope timestamps taken from it pass the runtime's skew check).
func New() *Fake { return NewAt(time.UnixMilli(time.Now().UnixMilli())) }

// NewAt returns a fake clock at t.
func NewAt(t time.Time) *Fake { return &Fake{now: t, changed: make(chan struct{})} }

// Now returns the fake instant.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NowMs returns the fake instant in Unix milliseconds.
func (f *Fake) NowMs() int64 { return f.Now().UnixMilli() }

// Advance moves the clock forward by d and fires what became due.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		panic("clocktest: Advance with a negative duration")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for {
		var next *fakeTimer
		for _, t := range f.timers {
			if t.armed && !t.at.After(f.now) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			return
		}
		select {
		case next.c <- next.at:
		default: // a tick not taken yet: this one is dropped
		}
		if next.period > 0 {
			for !next.at.After(f.now) {
				next.at = next.at.Add(next.period)
			}
		} else {
			next.armed = false
			f.notifyLocked()
		}
	}
}

// Armed returns how many timers and tickers are armed.
func (f *Fake) Armed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.armedLocked()
}

func (f *Fake) armedLocked() int {
	n := 0
	for _, t := range f.timers {
		if t.armed {
			n++
		}
	}
	return n
}

// WaitArmed waits until at least n timers and tickers are armed, or for
// at most within; it reports whether they were.
func (f *Fake) WaitArmed(n int, within time.Duration) bool {
	limit := time.NewTimer(within)
	defer limit.Stop()
	for {
		f.mu.Lock()
		armed, ch := f.armedLocked(), f.changed
		f.mu.Unlock()
		if armed >= n {
			return true
		}
		select {
		case <-ch:
		case <-limit.C:
			return false
		}
	}
}

// Deadlines returns the deadlines of the armed timers and tickers, in
// order (for diagnostics and assertions).
func (f *Fake) Deadlines() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for _, t := range f.timers {
		if t.armed {
			out = append(out, t.at)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// NewTimer returns a timer that fires once the clock reaches now+d.
func (f *Fake) NewTimer(d time.Duration) clock.Timer { return f.arm(d, 0) }

// NewTicker returns a ticker that fires every d.
func (f *Fake) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("clocktest: NewTicker with a non-positive period")
	}
	return fakeTicker{f.arm(d, d)}
}

type fakeTicker struct{ t *fakeTimer }

func (t fakeTicker) C() <-chan time.Time { return t.t.c }
func (t fakeTicker) Stop()               { t.t.Stop() }

func (f *Fake) arm(d, period time.Duration) *fakeTimer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), period: period}
	f.timers = append(f.timers, t)
	t.setLocked(d)
	return t
}

// setLocked arms t for d from now; with d <= 0 a timer fires at once (as
// time.Timer does). The caller holds f.mu.
func (t *fakeTimer) setLocked(d time.Duration) {
	t.at = t.f.now.Add(d)
	if d <= 0 && t.period == 0 {
		t.c <- t.at // disarmed and drained: the buffer is free
		return
	}
	t.armed = true
	t.f.notifyLocked()
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	at     time.Time
	period time.Duration // > 0: a ticker
	armed  bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.armed
	t.disarmLocked()
	return was
}

func (t *fakeTimer) disarmLocked() {
	if t.armed {
		t.armed = false
		t.f.notifyLocked()
	}
	select {
	case <-t.c:
	default:
	}
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.armed
	t.disarmLocked()
	t.setLocked(d)
	return was
}
