package clocktest

import (
	"testing"
	"time"
)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-c:
		return at, true
	default:
		return time.Time{}, false
	}
}

// Contract 2, 3: a timer fires at the first Advance that reaches its
// deadline, with the deadline, once; Stop and Reset discard an untaken
// tick; Reset re-arms from the current instant; d <= 0 fires at once.
func TestFakeTimer(t *testing.T) {
	f := NewAt(time.UnixMilli(1_000))
	tm := f.NewTimer(30 * time.Millisecond)
	if f.Armed() != 1 {
		t.Fatalf("armed %d", f.Armed())
	}
	f.Advance(29 * time.Millisecond)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("fired before its deadline")
	}
	f.Advance(5 * time.Millisecond)
	at, ok := fired(tm.C())
	if !ok || at.UnixMilli() != 1_030 || f.Now().UnixMilli() != 1_034 {
		t.Fatalf("fired=%v at %v, now %v", ok, at.UnixMilli(), f.Now().UnixMilli())
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok || f.Armed() != 0 {
		t.Fatal("a timer fired twice")
	}
	if tm.Reset(10 * time.Millisecond) {
		t.Fatal("Reset of a fired timer reported it armed")
	}
	f.Advance(10 * time.Millisecond)
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported it armed")
	}
	if _, ok := fired(tm.C()); ok {
		t.Fatal("Stop left a tick behind")
	}
	tm.Reset(0)
	if _, ok := fired(tm.C()); !ok {
		t.Fatal("Reset(0) did not fire at once")
	}
}

// Contract 2, 4: a ticker sends every period, drops ticks not taken and
// stops; timers fire in deadline order within one Advance.
func TestFakeTickerAndOrder(t *testing.T) {
	f := NewAt(time.UnixMilli(0))
	tk := f.NewTicker(10 * time.Millisecond)
	f.Advance(35 * time.Millisecond) // ticks at 10, 20, 30: only one is kept
	at, ok := fired(tk.C())
	if !ok || at.UnixMilli() != 10 {
		t.Fatalf("first tick %v %v", ok, at.UnixMilli())
	}
	if _, ok := fired(tk.C()); ok {
		t.Fatal("ticks were queued")
	}
	f.Advance(5 * time.Millisecond) // the next tick is at 40
	if at, ok := fired(tk.C()); !ok || at.UnixMilli() != 40 {
		t.Fatalf("tick after re-arming: %v %v", ok, at.UnixMilli())
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := fired(tk.C()); ok || f.Armed() != 0 {
		t.Fatal("a stopped ticker ticked")
	}

	late, early := f.NewTimer(20*time.Millisecond), f.NewTimer(10*time.Millisecond)
	if d := f.Deadlines(); len(d) != 2 || !d[0].Before(d[1]) {
		t.Fatalf("deadlines %v", d)
	}
	f.Advance(time.Second)
	a, _ := fired(early.C())
	b, _ := fired(late.C())
	if !a.Before(b) {
		t.Fatalf("early fired at %v, late at %v", a, b)
	}
}

// Contract 4: WaitArmed returns once enough timers are armed, and reports
// false when they are not within the bound.
func TestFakeWaitArmed(t *testing.T) {
	f := New()
	if f.WaitArmed(1, time.Millisecond) {
		t.Fatal("WaitArmed true with nothing armed")
	}
	go f.NewTimer(time.Minute)
	if !f.WaitArmed(1, 5*time.Second) {
		t.Fatal("WaitArmed missed the timer")
	}
}
