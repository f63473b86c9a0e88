package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	goruntime "runtime"

	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/streambudget"
)

// The stream-budget simulation (docs/simulation.md "Stream budget"):
// package streambudget driven directly by simulated streams, every
// choice drawn from the seed. Each simulated stream is a window bound to
// an identity and a session, a follower that charges records (Acquire,
// TryAcquire) and a consumer that hands them to its transport (Sent),
// whose client takes them (ReleaseSent) or never does, drops some
// (Release) and closes. Acquire calls that wait run on their own
// goroutine; after every step the driver waits until each of them has
// either returned or is queued, and until what the budget says it holds
// equals what the streams were granted, so the grants of a step are a
// function of the seed. Time is a clocktest.Fake moved only by advance
// steps, each of which passes at most one stall deadline (so the order in
// which two stalled waiters leave the queue never decides anything).

// budgetOpts are the bounds of the simulated budget: small, so that the
// shares, the headroom and the one-record rule are reached in every seed.
var budgetOpts = streambudget.Options{
	PerStream:    6000,
	Total:        24000,
	PerIdentity:  9000,
	PerSession:   12000,
	Headroom:     3000,
	StallTimeout: 10 * time.Second,
}

const (
	budgetIdentities = 4 // identities agent://b0..b3
	budgetSessions   = 3 // sessions bs0..bs2
	budgetMaxStreams = 8 // open at once
)

// bstream is one simulated stream.
type bstream struct {
	name        string
	ident, sess string
	win         *streambudget.Window
	reads       bool // its client takes what it is sent (else only now and then)
	open        bool
	// What the stream really holds for its client: records charged and
	// not yet handed to the transport (pending), and handed to the
	// transport but not yet taken by the client (sent).
	pending, sent []int64
	// What the budget was told (the calls made): its view of the window.
	apiPending, apiSent int64
	lastProgress        time.Time // last Sent or ReleaseSent
	wait                *bwait    // its Acquire that has not returned
}

// bwait is one Acquire call on its own goroutine.
type bwait struct {
	n        int64
	start    time.Time
	queued   bool // it waits (the budget counted it)
	cancel   context.CancelFunc
	done     chan error
	returned bool
	err      error
	expect   string // "" (a grant or still waiting), "closed", "cancelled", "stalled"
}

func (s *bstream) realHeld() (n int64) {
	for _, c := range s.pending {
		n += c
	}
	for _, c := range s.sent {
		n += c
	}
	return n
}

func (s *bstream) apiHeld() int64 { return s.apiPending + s.apiSent }

type bworld struct {
	cfg    config
	rng    *rand.Rand
	clk    *clocktest.Fake
	b      *streambudget.Budget
	step   int
	trace  []string
	all    []*bstream
	open   []*bstream // open streams, in opening order
	queue  []*bstream // streams whose Acquire waits, in the order they started waiting
	waits  int64      // Stats().Waits seen so far
	grants int        // Acquire grants, for the summary
	stalls int
}

func newBWorld(cfg config) *bworld {
	clk := clocktest.NewAt(epoch)
	return &bworld{
		cfg: cfg,
		rng: rand.New(rand.NewPCG(cfg.seed, 0x5eed_b0d9)),
		clk: clk,
		b:   streambudget.New(budgetOpts, clk),
	}
}

func (w *bworld) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%04d t=%-9d ", w.step, w.clk.NowMs()-epoch.UnixMilli())+fmt.Sprintf(format, args...))
}

func (w *bworld) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.logf("INVARIANT VIOLATED: %s", msg)
	panic(failure{msg})
}

// cost draws a record's cost: mostly small, now and then larger than a
// stream's bound, a share or the whole budget (the one-record rule).
func (w *bworld) cost() int64 {
	switch r := w.rng.IntN(100); {
	case r < 70:
		return 600 + w.rng.Int64N(1400)
	case r < 95:
		return 2000 + w.rng.Int64N(4000)
	default:
		return 6000 + w.rng.Int64N(22000)
	}
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func (w *bworld) filter(f func(*bstream) bool) []*bstream {
	var out []*bstream
	for _, s := range w.open {
		if f(s) {
			out = append(out, s)
		}
	}
	return out
}

// runBudget simulates one seed of the stream budget.
func runBudget(cfg config) (trace []string, failed string, simulated time.Duration) {
	w := newBWorld(cfg)
	defer func() { simulated = w.clk.Now().Sub(epoch) }()
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(failure)
			if !ok {
				panic(p)
			}
			trace, failed = w.trace, f.msg
			w.abandon()
		}
	}()
	w.logf("budget seed %d, %d steps, mutation %q, bounds stream %d identity %d session %d total %d headroom %d stall %v",
		cfg.seed, cfg.steps, cfg.mutate, budgetOpts.PerStream, budgetOpts.PerIdentity, budgetOpts.PerSession,
		budgetOpts.Total, budgetOpts.Headroom, budgetOpts.StallTimeout)
	for w.step = 1; w.step <= cfg.steps; w.step++ {
		w.act()
		w.settle()
	}
	w.step = cfg.steps + 1
	for len(w.open) > 0 {
		w.closeStream(w.open[0])
		w.settle()
	}
	if st := w.b.Stats(); st.Used != 0 || st.Windows != 0 {
		w.fail("every window closed, yet the budget holds %d bytes in %d windows", st.Used, st.Windows)
	}
	w.logf("end: %d streams, %d grants, %d stalls, budget empty", len(w.all), w.grants, w.stalls)
	return w.trace, "", 0
}

// abandon ends every Acquire still waiting (after a failure).
func (w *bworld) abandon() {
	for _, s := range w.all {
		if s.wait != nil {
			s.wait.cancel()
		}
		s.win.Close()
	}
}

// act draws and runs one step.
func (w *bworld) act() {
	idle := w.filter(func(s *bstream) bool { return s.wait == nil })
	withPending := w.filter(func(s *bstream) bool { return len(s.pending) > 0 })
	withSent := w.filter(func(s *bstream) bool { return len(s.sent) > 0 })
	waiting := w.filter(func(s *bstream) bool { return s.wait != nil })
	for {
		switch r := w.rng.IntN(100); {
		case r < 8:
			if len(w.open) >= budgetMaxStreams {
				continue
			}
			w.openStream()
		case r < 38:
			if len(idle) == 0 {
				continue
			}
			w.acquire(pick(w.rng, idle), w.rng.IntN(4) == 0)
		case r < 58:
			if len(withPending) == 0 {
				continue
			}
			w.send(pick(w.rng, withPending))
		case r < 78:
			if len(withSent) == 0 {
				continue
			}
			s := pick(w.rng, withSent)
			if !s.reads && w.rng.IntN(4) != 0 {
				continue // a client that does not read
			}
			w.take(s)
		case r < 81:
			if len(withPending) == 0 {
				continue
			}
			w.skip(pick(w.rng, withPending))
		case r < 87:
			if len(w.open) == 0 {
				continue
			}
			w.closeStream(pick(w.rng, w.open))
		case r < 90:
			if len(waiting) == 0 {
				continue
			}
			w.cancelWait(pick(w.rng, waiting))
		default:
			w.advance()
		}
		return
	}
}

func (w *bworld) openStream() {
	s := &bstream{
		name:  fmt.Sprintf("w%d", len(w.all)),
		ident: fmt.Sprintf("agent://b%d", w.rng.IntN(budgetIdentities)),
		sess:  fmt.Sprintf("bs%d", w.rng.IntN(budgetSessions)),
		reads: w.rng.IntN(3) != 0,
		open:  true,
	}
	s.win = w.b.NewWindow()
	s.win.Bind(s.ident, s.sess)
	s.lastProgress = w.clk.Now()
	w.all = append(w.all, s)
	w.open = append(w.open, s)
	reader := "reading"
	if !s.reads {
		reader = "slow"
	}
	w.logf("open %s by %s on %s (%s client)", s.name, s.ident, s.sess, reader)
}

// acquire charges one record: TryAcquire, or Acquire on its own goroutine,
// which the driver waits for until it returned or is queued.
func (w *bworld) acquire(s *bstream, try bool) {
	n := w.cost()
	if try {
		fits, barred := w.allowed(s, n)
		ok := s.win.TryAcquire(n)
		w.logf("try %s %d -> %v", s.name, n, ok)
		switch {
		case ok && !(fits && !barred):
			w.fail("TryAcquire %d on %s granted though %s", n, s.name, w.why(s, n))
		case !ok && fits && !barred && len(w.queue) == 0:
			w.fail("TryAcquire %d on %s refused though the bounds allow it and nothing waits", n, s.name)
		case ok:
			w.granted(s, n)
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	wt := &bwait{n: n, start: w.clk.Now(), cancel: cancel, done: make(chan error, 1)}
	s.wait = wt
	fits, barred := w.allowed(s, n)
	go func() { wt.done <- s.win.Acquire(ctx, n) }()
	w.until(func() bool {
		if !wt.returned {
			select {
			case wt.err = <-wt.done:
				wt.returned = true
			default:
			}
		}
		return wt.returned || w.b.Stats().Waits > w.waits
	}, "Acquire %d on %s to return or wait", n, s.name)
	if st := w.b.Stats(); st.Waits > w.waits {
		// The call counted itself as waiting under the budget's lock and
		// may still hold it, running a grant pass: take the lock once
		// (Held) so that every grant of the pass is in Stats().Used before
		// settle looks.
		w.b.Held("", "")
		w.waits = st.Waits
		wt.queued = true // a grant within its own call is booked by settle, in queue order
		w.queue = append(w.queue, s)
		w.logf("acquire %s %d -> waits (%s)", s.name, n, w.why(s, n))
		return
	}
	s.wait = nil
	cancel()
	if wt.err != nil {
		w.fail("Acquire %d on %s failed at once: %v", n, s.name, wt.err)
	}
	if !fits || barred {
		w.fail("Acquire %d on %s granted at once though %s", n, s.name, w.why(s, n))
	}
	w.logf("acquire %s %d -> granted", s.name, n)
	w.granted(s, n)
}

// granted books a grant of n to s, checking the bounds on what the
// streams really hold (not on what the budget was told).
func (w *bworld) granted(s *bstream, n int64) {
	if !w.realFits(s, n) {
		w.fail("%d granted to %s while its streams really hold: %s", n, s.name, w.realState(s))
	}
	s.pending = append(s.pending, n)
	s.apiPending += n
	w.grants++
}

func (w *bworld) send(s *bstream) {
	c := s.pending[0]
	s.pending = s.pending[1:]
	s.sent = append(s.sent, c)
	s.win.Sent(c)
	s.apiPending -= c
	s.apiSent += c
	s.lastProgress = w.clk.Now()
	w.logf("sent %s %d", s.name, c)
	if w.cfg.mutate == mutEarlyRelease {
		// The defect: the consumer frees the charge as soon as the
		// transport accepted the record, while the client has not taken
		// it and the transport still holds it.
		s.win.ReleaseSent(c)
		s.apiSent -= c
	}
}

func (w *bworld) take(s *bstream) {
	c := s.sent[0]
	s.sent = s.sent[1:]
	if w.cfg.mutate != mutEarlyRelease {
		s.win.ReleaseSent(c)
		s.apiSent -= c
		s.lastProgress = w.clk.Now()
	}
	w.logf("taken %s %d", s.name, c)
}

func (w *bworld) skip(s *bstream) {
	c := s.pending[0]
	s.pending = s.pending[1:]
	s.win.Release(c)
	s.apiPending -= c
	w.logf("dropped %s %d", s.name, c)
}

func (w *bworld) closeStream(s *bstream) {
	s.win.Close()
	s.open = false
	s.pending, s.sent, s.apiPending, s.apiSent = nil, nil, 0, 0
	w.open = slices.DeleteFunc(w.open, func(x *bstream) bool { return x == s })
	extra := ""
	if s.wait != nil {
		s.wait.expect = "closed"
		extra = " (its Acquire waits)"
	}
	w.logf("close %s%s", s.name, extra)
}

func (w *bworld) cancelWait(s *bstream) {
	s.wait.expect = "cancelled"
	s.wait.cancel()
	w.logf("cancel %s's Acquire", s.name)
}

// stallAt is when s's waiting Acquire stalls, if it holds something.
func (w *bworld) stallAt(s *bstream) (time.Time, bool) {
	if s.wait == nil || s.apiHeld() == 0 || s.wait.expect != "" {
		return time.Time{}, false
	}
	from := s.wait.start
	if s.lastProgress.After(from) {
		from = s.lastProgress
	}
	return from.Add(budgetOpts.StallTimeout), true
}

// advance moves the clock by 100 ms to 15 s, but past at most one stall
// deadline: a stall removes its waiter from the queue, which may let a
// waiter it held up be granted, so two stalls at once would leave the
// outcome to the Go scheduler. Waiters whose stall deadlines coincide keep
// the clock 1 ms short of them until another step (a take, a drop, a
// close, a cancel) ends one of them or makes progress.
func (w *bworld) advance() {
	d := time.Duration(100+w.rng.IntN(14900)) * time.Millisecond
	target := w.clk.Now().Add(d)
	var due []time.Time
	for _, s := range w.queue {
		if at, ok := w.stallAt(s); ok && !at.After(target) {
			due = append(due, at)
		}
	}
	slices.SortFunc(due, func(a, b time.Time) int { return a.Compare(b) })
	if len(due) > 1 {
		target = due[1].Add(-time.Millisecond)
	}
	if !target.After(w.clk.Now()) {
		// Two waiters stall at the same instant: the clock stays short
		// of it until a step ends one of them (see the comment above).
		w.logf("advance held back: two stalls due at +%dms", due[0].UnixMilli()-epoch.UnixMilli())
		return
	}
	w.clk.Advance(target.Sub(w.clk.Now()))
	stalling := ""
	for _, s := range w.queue {
		if at, ok := w.stallAt(s); ok && !at.After(w.clk.Now()) {
			s.wait.expect = "stalled"
			stalling += " " + s.name
		}
	}
	if stalling != "" {
		stalling = ", stall due:" + stalling
	}
	w.logf("advance to +%dms%s", w.clk.NowMs()-epoch.UnixMilli(), stalling)
}

var flagBudgetSteps = flag.Int("budgetsteps", 0, "steps per stream-budget seed (0: 1000, 300 under -race)")

func budgetSteps() int {
	switch {
	case *flagBudgetSteps > 0:
		return *flagBudgetSteps
	case underRace:
		return 300
	}
	return 1000
}

func gosched() { goruntime.Gosched() }

// until polls cond (the liveness bound of settle).
func (w *bworld) until(cond func() bool, format string, args ...any) {
	deadline := time.Now().Add(20 * time.Second)
	for spins := 0; !cond(); spins++ {
		if time.Now().After(deadline) {
			w.fail("stuck: waited 20s for "+format, args...)
		}
		if spins < 100 {
			gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// settle waits until every Acquire that must return (its window closed,
// its context cancelled, its stall due) returned and the budget holds
// exactly what the streams were granted, then books the step's grants in
// queue order and checks the invariants.
func (w *bworld) settle() {
	w.until(func() bool {
		var granted int64
		all := true
		for _, s := range w.queue {
			wt := s.wait
			if !wt.returned {
				select {
				case wt.err = <-wt.done:
					wt.returned = true
				default:
				}
			}
			if wt.returned && wt.err == nil {
				granted += wt.n
			}
			if wt.expect != "" && !wt.returned {
				all = false
			}
		}
		return all && w.b.Stats().Used == w.apiUsed()+granted
	}, "the budget to settle (holds %d, streams were granted %d)", w.b.Stats().Used, w.apiUsed())

	// Ended calls first: a stall, a cancel or a close takes the waiter out
	// of the queue before the grant pass it runs.
	var rest []*bstream
	for _, s := range w.queue {
		wt := s.wait
		switch {
		case wt.returned && wt.err == nil && !s.open:
			w.fail("Acquire %d on %s granted although its window was closed: the charge is never returned", wt.n, s.name)
		case wt.returned && wt.err == nil && wt.expect != "":
			w.fail("Acquire %d on %s granted although it was %s", wt.n, s.name, wt.expect)
		case wt.returned && wt.err != nil:
			w.checkFailed(s, wt)
			s.wait = nil
			wt.cancel()
		default:
			rest = append(rest, s)
		}
	}
	// The grants, as grant passes see the queue: in order, each checked
	// against what was granted before it, and a waiter whose first failing
	// bound is the global budget holds up later waiters of its class
	// (holding something, or holding nothing). One call may run more than
	// one pass (Close runs two, and a grant in the first may change a
	// waiter's first failing bound in the second), so the passes are
	// repeated while they book grants; a grant no pass allows fails.
	for progress := true; progress; {
		progress = false
		var barHeld, barEmpty bool
		for _, s := range rest {
			wt := s.wait
			if wt == nil {
				continue // booked
			}
			fits, global := w.fitsAPI(s, wt.n)
			empty := s.apiHeld() == 0
			barred := barHeld
			if empty {
				barred = barEmpty
			}
			if wt.returned && fits && !barred {
				w.logf("  %s granted %d", s.name, wt.n)
				s.wait = nil
				wt.cancel()
				w.granted(s, wt.n)
				progress = true
				continue
			}
			if !fits && global && !barred {
				if empty {
					barEmpty = true
				} else {
					barHeld = true
				}
			}
		}
	}
	// What still waits, on the final state. The budget recomputes its
	// barriers only in a grant pass, which a charge does not run: a waiter
	// that waited for the global budget and now also waits on its share
	// still holds up later ones until the next release. So a waiter left
	// waiting is a violation only when no earlier waiter of its class is
	// refused by the global budget, whatever its other bounds.
	var looseHeld, looseEmpty bool
	kept := w.queue[:0]
	for _, s := range rest {
		wt := s.wait
		if wt == nil {
			continue
		}
		if wt.returned {
			w.fail("Acquire %d on %s granted though %s, and no grant pass allows it", wt.n, s.name, w.why(s, wt.n))
		}
		fits, _ := w.fitsAPI(s, wt.n)
		empty := s.apiHeld() == 0
		loose := looseHeld
		if empty {
			loose = looseEmpty
		}
		if fits && !loose {
			w.fail("%s's Acquire %d left waiting although the bounds allow it and nothing earlier of its class waits for the budget", s.name, wt.n)
		}
		if !fits && w.globalFails(s, wt.n) {
			if empty {
				looseEmpty = true
			} else {
				looseHeld = true
			}
		}
		kept = append(kept, s)
	}
	w.queue = kept
	w.checkState()
}

// checkFailed checks an Acquire that returned an error.
func (w *bworld) checkFailed(s *bstream, wt *bwait) {
	var what string
	switch ce := coord.AsError(wt.err); {
	case ce != nil && ce.Code == coord.CodeRateLimited:
		what = "stalled"
		w.stalls++
	case errors.Is(wt.err, context.Canceled) && wt.expect == "closed":
		what = "closed"
	case errors.Is(wt.err, context.Canceled):
		what = "cancelled"
	default:
		w.fail("%s's Acquire %d failed: %v", s.name, wt.n, wt.err)
	}
	if what != wt.expect {
		w.fail("%s's Acquire %d ended as %s, expected %q", s.name, wt.n, what, wt.expect)
	}
	w.logf("  %s's Acquire %d ended: %s", s.name, wt.n, what)
}

func (w *bworld) apiUsed() (n int64) {
	for _, s := range w.open {
		n += s.apiHeld()
	}
	return n
}

// fitsAPI says whether the documented bounds allow charging n to s on
// what the budget was told (the rule the budget applies), and whether
// only the global budget stops it.
func (w *bworld) fitsAPI(s *bstream, n int64) (fits, global bool) {
	var ident, sess, total int64
	for _, x := range w.open {
		h := x.apiHeld()
		total += h
		if x.ident == s.ident {
			ident += h
		}
		if x.sess == s.sess {
			sess += h
		}
	}
	held := s.apiHeld()
	o := budgetOpts
	if s.apiPending > 0 && held+n > o.PerStream {
		return false, false
	}
	if ident > 0 && ident+n > o.PerIdentity || sess > 0 && sess+n > o.PerSession {
		return false, false
	}
	limit := o.Total - o.Headroom
	if held == 0 {
		limit = o.Total
	}
	if total > 0 && total+n > limit {
		return false, true
	}
	return true, false
}

// globalFails says whether the global budget alone does not allow
// charging n to s (on what the budget was told).
func (w *bworld) globalFails(s *bstream, n int64) bool {
	total := w.apiUsed()
	limit := budgetOpts.Total - budgetOpts.Headroom
	if s.apiHeld() == 0 {
		limit = budgetOpts.Total
	}
	return total > 0 && total+n > limit
}

// allowed is fitsAPI plus the fair order: barred is set when an earlier
// waiter of its class waits for the global budget.
func (w *bworld) allowed(s *bstream, n int64) (fits, barred bool) {
	fits, _ = w.fitsAPI(s, n)
	empty := s.apiHeld() == 0
	for _, q := range w.queue {
		if q == s || q.wait == nil || q.wait.expect != "" {
			continue
		}
		if f, g := w.fitsAPI(q, q.wait.n); !f && g && (q.apiHeld() == 0) == empty {
			barred = true
		}
	}
	return fits, barred
}

// realFits applies the bounds to what the streams really hold: what a
// correct budget guarantees whatever the consumers tell it.
func (w *bworld) realFits(s *bstream, n int64) bool {
	var ident, sess, total int64
	for _, x := range w.open {
		h := x.realHeld()
		total += h
		if x.ident == s.ident {
			ident += h
		}
		if x.sess == s.sess {
			sess += h
		}
	}
	held := s.realHeld()
	o := budgetOpts
	if len(s.pending) > 0 && held+n > o.PerStream {
		return false
	}
	if ident > 0 && ident+n > o.PerIdentity || sess > 0 && sess+n > o.PerSession {
		return false
	}
	limit := o.Total - o.Headroom
	if held == 0 {
		limit = o.Total
	}
	return total == 0 || total+n <= limit
}

func (w *bworld) realState(s *bstream) string {
	var ident, sess, total int64
	for _, x := range w.open {
		h := x.realHeld()
		total += h
		if x.ident == s.ident {
			ident += h
		}
		if x.sess == s.sess {
			sess += h
		}
	}
	return fmt.Sprintf("stream %d (%d pending records), identity %s %d, session %s %d, all streams %d",
		s.realHeld(), len(s.pending), s.ident, ident, s.sess, sess, total)
}

func (w *bworld) why(s *bstream, n int64) string {
	fits, global := w.fitsAPI(s, n)
	switch {
	case fits:
		return "the bounds allow it"
	case global:
		return fmt.Sprintf("the global budget does not allow it (%d held)", w.apiUsed())
	default:
		return "its stream, identity or session bound does not allow it"
	}
}

// checkState checks, after every step: the budget's accounting equals
// what the open windows were charged and not released (so a closed
// window returned everything), per identity and per session too; and
// what the streams really hold respects every bound, with the one-record
// rule (a bound is exceeded only by a single record).
func (w *bworld) checkState() {
	st := w.b.Stats()
	if st.Used != w.apiUsed() {
		w.fail("the budget holds %d bytes, the open windows were charged %d", st.Used, w.apiUsed())
	}
	if st.Windows != int64(len(w.open)) {
		w.fail("the budget counts %d windows, %d are open", st.Windows, len(w.open))
	}
	type agg struct {
		real, api int64
		records   int
	}
	idents, sessions := map[string]*agg{}, map[string]*agg{}
	var total agg
	add := func(m map[string]*agg, k string, s *bstream) {
		a := m[k]
		if a == nil {
			a = &agg{}
			m[k] = a
		}
		a.real += s.realHeld()
		a.api += s.apiHeld()
		a.records += len(s.pending) + len(s.sent)
	}
	o := budgetOpts
	for _, s := range w.open {
		add(idents, s.ident, s)
		add(sessions, s.sess, s)
		total.real += s.realHeld()
		total.records += len(s.pending) + len(s.sent)
		if s.realHeld() > o.PerStream && len(s.pending) > 1 {
			w.fail("%s holds %d bytes (bound %d) with %d records pending", s.name, s.realHeld(), o.PerStream, len(s.pending))
		}
	}
	for _, s := range w.open {
		byID, bySess := w.b.Held(s.ident, s.sess)
		if byID != idents[s.ident].api || bySess != sessions[s.sess].api {
			w.fail("the budget says %s holds %d and %s %d; their windows were charged %d and %d",
				s.ident, byID, s.sess, bySess, idents[s.ident].api, sessions[s.sess].api)
		}
	}
	for k, a := range idents {
		if a.real > o.PerIdentity && a.records > 1 {
			w.fail("identity %s's streams hold %d bytes in %d records, over its share %d", k, a.real, a.records, o.PerIdentity)
		}
	}
	for k, a := range sessions {
		if a.real > o.PerSession && a.records > 1 {
			w.fail("session %s's streams hold %d bytes in %d records, over its share %d", k, a.real, a.records, o.PerSession)
		}
	}
	if total.real > o.Total && total.records > 1 {
		w.fail("all streams hold %d bytes in %d records, over the budget %d", total.real, total.records, o.Total)
	}
}

func reproduceBudget(seed uint64, mutate string) string {
	cmd := fmt.Sprintf("go test ./internal/sim -run 'TestSimBudget$' -seed %d -simtrace", seed)
	if mutate != "" {
		cmd += " -mutate " + mutate
	}
	return cmd
}

// TestSimBudget runs the stream-budget simulation for each seed of the
// set (or -seed N).
func TestSimBudget(t *testing.T) {
	failedSeeds := 0
	var total time.Duration
	list := seeds(t)
	n := budgetSteps()
	for _, seed := range list {
		trace, failed, simulated := runBudget(config{seed: seed, steps: n, mutate: *flagMutate})
		total += simulated
		if *flagTrace {
			t.Logf("trace of budget seed %d:\n%s", seed, strings.Join(trace, "\n"))
		}
		if failed != "" {
			failedSeeds++
			t.Errorf("budget seed %d: %s\nlast steps:\n%s\nrerun: %s", seed, failed, tail(trace, 25), reproduceBudget(seed, *flagMutate))
			continue
		}
		t.Logf("budget seed %d: %s (trace %08x)", seed, strings.TrimSpace(trace[len(trace)-1][16:]), traceSum(trace))
	}
	t.Logf("budget: %d seeds (%d steps each), %d failed, %.1f simulated hours", len(list), n, failedSeeds, total.Hours())
}

// TestSimBudgetReproducible runs seeds twice and compares their traces.
func TestSimBudgetReproducible(t *testing.T) {
	for _, seed := range []uint64{5, 23} {
		a, fa, _ := runBudget(config{seed: seed, steps: budgetSteps()})
		b, fb, _ := runBudget(config{seed: seed, steps: budgetSteps()})
		if fa != "" || fb != "" {
			t.Fatalf("budget seed %d failed: %q / %q; rerun: %s", seed, fa, fb, reproduceBudget(seed, ""))
		}
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("budget seed %d: traces differ at line %d:\n  first:  %s\n  second: %s", seed, i+1, a[i], b[i])
			}
		}
		if len(a) != len(b) {
			t.Fatalf("budget seed %d: traces differ in length: %d and %d lines", seed, len(a), len(b))
		}
	}
}
