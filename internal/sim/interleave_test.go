package sim

import (
	"context"
	"sync"

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
