package sim

import (
	"context"
	"sync"
	"time"

	"github.com/macpd/macpd/internal/clock"
	"github.com/macpd/macpd/internal/clock/clocktest"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// In-step interleavings chosen by the seed (docs/simulation.md "Which
// interleavings are explored"): the driver parks a runtime goroutine at a
// known point, does something there, and lets it go on. The points are
// seams the runtime already has (FollowOptions callbacks, the store
// interface) plus FollowOptions.OnRegistered, a test seam.

// parkPoint is one place a follower is parked: reached is closed when it
// gets there, and it goes on when resume is closed.
type parkPoint struct {
	where   string // "snapshot", "registered" or "storepass"
	reached chan struct{}
	resume  chan struct{}
	once    sync.Once
}

func newParkPoint(where string) *parkPoint {
	return &parkPoint{where: where, reached: make(chan struct{}), resume: make(chan struct{})}
}

// wait parks the calling goroutine (once).
func (p *parkPoint) wait() {
	first := false
	p.once.Do(func() { first = true })
	if !first {
		return
	}
	close(p.reached)
	<-p.resume
}

// parkStore is the store the runtime sees: Pebble, whose Read parks the
// caller once when armed for a session and a starting record (the first
// store read of a follower's catch-up). Embedding keeps every other
// method, AppendAsync (store.Pipeliner) included.
type parkStore struct {
	*pebblestore.Store
	mu      sync.Mutex
	session string
	from    uint64
	p       *parkPoint
}

func (s *parkStore) arm(sessionID string, from uint64, p *parkPoint) {
	s.mu.Lock()
	s.session, s.from, s.p = sessionID, from, p
	s.mu.Unlock()
}

func (s *parkStore) Read(ctx context.Context, sessionID string, from uint64, fn func(session.Record) error) error {
	s.mu.Lock()
	p := s.p
	if p != nil && (sessionID != s.session || from != s.from) {
		p = nil
	}
	if p != nil {
		s.p = nil
	}
	s.mu.Unlock()
	if p == nil {
		return s.Store.Read(ctx, sessionID, from, fn)
	}
	// Parked inside the read: a first record is read (the pass has
	// started and taken its limit), then the driver commits.
	parked := false
	return s.Store.Read(ctx, sessionID, from, func(rec session.Record) error {
		if !parked {
			parked = true
			p.wait()
		}
		return fn(rec)
	})
}

// actFollowRace subscribes an observer to an open session and, at a point
// inside Follow drawn by the seed, commits one message of that session:
//
//   - snapshot: after Follow read the durable end (OnStartAfter) and
//     before it registered for the live tail: the record is in neither
//     the snapshot nor the tail, and must come from the store pass;
//   - registered: after it registered and before its store pass read
//     durableSeq (OnRegistered): the record is both in the tail and at or
//     below the pass's limit (the store/tail overlap), and must be
//     delivered once;
//   - storepass: inside the store pass, after its first record (the
//     pass's limit is taken): the record is only in the tail.
//
// Then the follower goes on, and the step's checks (awaitStart, settle's
// catch-up) require every record once, in order.
func (w *world) actFollowRace() {
	s := w.openSession()
	if s == nil {
		return
	}
	stored, ok := w.rt.LastSeq(s.id)
	if !ok {
		return
	}
	after := stored
	if stored > 0 && w.chance(60) {
		after = uint64(w.pick(int(stored))) // something to catch up on from the store
	}
	where := []string{"snapshot", "registered", "storepass"}[w.pick(3)]
	if where == "storepass" && after >= stored {
		where = "registered" // no store read to park in
	}
	p := newParkPoint(where)
	if where == "storepass" {
		w.pst.arm(s.id, after+1, p)
	}
	w.park = p
	f := w.follow(s, observer, after, true)
	w.park = nil
	select {
	case <-p.reached:
	case <-f.done:
		w.pst.arm("", 0, nil)
		w.fail("follower f%d of %s ended before reaching %s: %v", f.n, s.id, where, f.err)
	case <-waitCh():
		w.fail("follower f%d of %s never reached %s", f.n, s.id, where)
	}
	w.logf("follower f%d of %s parked at %s", f.n, s.id, where)
	if s.mode == decision.ModeID {
		// A participant's Decision message: accepted, so a record is
		// committed while the follower is parked.
		w.send(s, s.parts[w.pick(len(s.parts))], w.messageEnv(s), "parked-follow message")
	} else {
		// Other modes' messages are mostly refused: the initiator suspends
		// the session instead (a Suspend record).
		ack, cerr := w.rt.Suspend(w.ctx, s.initiator, s.id, "sim")
		code := "ok"
		switch {
		case cerr != nil:
			code = string(cerr.Code)
		case ack != nil && !ack.Ok && ack.Error != nil:
			code = ack.Error.Code
		}
		w.logf("parked-follow suspend %s by %s -> %s %s", s.id, s.initiator.Sender, code, ack.GetSessionState())
	}
	close(p.resume)
	if !w.awaitStart(f) {
		w.fail("follower f%d of %s, parked at %s, was refused: %s", f.n, s.id, where, coord.CodeOf(f.err))
	}
}

// gateClock is the clock the runtime sees: the world's fake clock, whose
// timers (in the simulation only the runtime's timer loop arms one: no
// commit-wait bound, no eviction, no shared store, followers without
// windows) deliver their fires through a gate the driver can close. While
// it is closed a deadline that passes does not wake the timer loop, so a
// client's envelope to that session is decided first; opening it lets the
// loop run its (now redundant) expiry.
type gateClock struct {
	*clocktest.Fake
	mu     sync.Mutex
	closed bool
	opened chan struct{} // closed and replaced when the gate opens
	quit   chan struct{} // ends the forwarders (the runtime is gone)
}

func newGateClock(f *clocktest.Fake) *gateClock {
	return &gateClock{Fake: f, opened: make(chan struct{}), quit: make(chan struct{})}
}

func (c *gateClock) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

func (c *gateClock) open() {
	c.mu.Lock()
	if c.closed {
		c.closed = false
		close(c.opened)
		c.opened = make(chan struct{})
	}
	c.mu.Unlock()
}

// stop opens the gate and ends the forwarders.
func (c *gateClock) stop() {
	c.open()
	close(c.quit)
}

// wait blocks while the gate is closed; false if the clock was stopped.
func (c *gateClock) wait() bool {
	for {
		c.mu.Lock()
		closed, opened := c.closed, c.opened
		c.mu.Unlock()
		if !closed {
			return true
		}
		select {
		case <-opened:
		case <-c.quit:
			return false
		}
	}
}

func (c *gateClock) NewTimer(d time.Duration) clock.Timer {
	t := &gatedTimer{Timer: c.Fake.NewTimer(d), out: make(chan time.Time, 1)}
	go func() {
		for {
			var v time.Time
			select {
			case v = <-t.Timer.C():
			case <-c.quit:
				return
			}
			if !c.wait() {
				return
			}
			select {
			case t.out <- v:
			default: // a fire is pending already, as with a real timer
			}
		}
	}()
	return t
}

type gatedTimer struct {
	clock.Timer
	out chan time.Time
}

func (t *gatedTimer) C() <-chan time.Time { return t.out }

// actExpiryRace moves the clock past an OPEN session's deadline and sends
// it a message, in an order the seed draws: the timer first (its expiry
// is stored, then the envelope finds the session EXPIRED), or the envelope
// first (the timer loop is held at the gate: the envelope's own admission
// finds the deadline passed and stores the Expire record; the timer's
// expiry then finds nothing to do). Either way the envelope is not
// accepted (SESSION_NOT_OPEN, unless its shape or mode refused it first)
// and the history has one Expire record, not dated before the deadline.
func (w *world) actExpiryRace() {
	var open []*simSession
	now := w.clk.NowMs()
	for _, s := range w.sessions {
		if s.started && !s.terminal && s.status == session.Open && s.inspected && s.expiry > now {
			open = append(open, s)
		}
	}
	if len(open) == 0 {
		return
	}
	s := open[w.pick(len(open))]
	envelopeFirst := w.chance(50)
	past := time.Duration(w.pick(2000)) * time.Millisecond
	d := time.UnixMilli(s.expiry).Add(past).Sub(w.clk.Now())
	first := "timer"
	if envelopeFirst {
		first = "envelope"
		w.gclk.close()
	}
	w.clk.Advance(d)
	w.logf("expiry race on %s: advance %s, %s past its deadline; %s first", s.id, d, past, first)
	if !envelopeFirst {
		if !wait(func() bool { st, _, _ := w.inspect(s); return st.Terminal() }) {
			w.fail("%s: deadline passed but the timer did not expire it", s.id)
		}
	}
	ack := w.send(s, s.parts[w.pick(len(s.parts))], w.messageEnv(s), "expiry-race message")
	if envelopeFirst && ack.Error != nil && ack.Error.Code == string(coord.CodeSessionNotOpen) {
		// The timer loop is still held: the Expire record is the
		// envelope's own admission's (an envelope refused before the
		// deadline check, for its shape or mode, expires nothing).
		if !wait(func() bool { st, _, _ := w.inspect(s); return st.Terminal() }) {
			w.fail("%s: an envelope decided after the deadline did not expire the session", s.id)
		}
	}
	w.gclk.open()
	if ack.Ok && !ack.Duplicate {
		w.fail("%s: an envelope decided %s after the deadline was accepted", s.id, past)
	}
}
