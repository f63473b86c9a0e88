// Package clock is the imperative shell's one source of time: the current
// instant and the timers and tickers that wait for it. The runtime and the
// transports read "now" and arm every timer that a protocol rule depends
// on through a Clock (session TTL expiry, the commit-wait bound, the
// stream stall limit, the "live since the stream opened" rule, recovery
// of overdue sessions), so tests replace the wall clock with
// clocktest.Fake and advance it instead of sleeping.
//
// Contract:
//  1. Now never goes backwards for one Clock.
//  2. A timer made by NewTimer(d) at instant t sends on C once, with the
//     instant it fired (at or after t+d), unless Stop or Reset came first;
//     C has a buffer of one, so firing never blocks the clock.
//  3. Reset(d) re-arms a timer for d after the clock's instant at the
//     call; the caller stops or drains the timer first, as with
//     time.Timer.
//  4. A ticker made by NewTicker(d) sends on C every d; ticks the reader
//     has not taken are dropped, never queued, as with time.Ticker.
//
// Real is the wall clock (package time); it is the default everywhere,
// and production wiring (config, app) never sets another one. The
// runtime's append timings for metrics read the same clock, so a test can
// hold an append for an exact duration; log-only measurements (how long
// recovery took) use package time.
package clock

import "time"

// Clock reads the current instant and makes timers and tickers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a one-shot timer (time.Timer's methods, with C a method).
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a periodic timer (time.Ticker's methods, with C a method).
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

// OrReal returns c, or the wall clock if c is nil.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time                   { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer   { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }
