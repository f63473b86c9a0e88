package runtime

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// Several nodes, one set of sessions (a shared store: natsstore;
// docs/cluster.md "How acceptance is established" and "Ownership"). Every
// node decides on its copy of a session as one node does and appends; the
// store refuses an append that does not continue the stored history
// (store.ErrConflict), and the loser decides again on the rebuilt copy
// (retryShared, heal), so dedup, the single resolution and the expiry are
// decided by what the store holds. The cluster feed hands every stored
// record to ApplyStored, which keeps resident copies current, wakes their
// followers and adopts sessions started elsewhere; with a Forwarder
// (partitioned ownership, forward.go) only the owner adopts them.

// maxSharedRetries bounds how often one call is decided again after
// losing to another node.
const maxSharedRetries = 16

// EnableSharedStore tells the runtime that other nodes append to its
// store: a call that loses a conflict is decided again instead of failing.
// Call it before Start.
func (r *Runtime) EnableSharedStore() { r.shared.Store(true) }

// sharedRetry reports whether a failed commit may be decided again: with
// a shared store, a conflict or a request doomed by one wrote nothing.
func (r *Runtime) sharedRetry(err error) bool {
	return r.shared.Load() && (errors.Is(err, store.ErrConflict) || errors.Is(err, errLost))
}

// retryShared runs once until it does not ask for a retry (at most
// maxSharedRetries times, with a short random pause).
func (r *Runtime) retryShared(ctx context.Context, once func() (*macpv1.Ack, bool)) *macpv1.Ack {
	for attempt := 0; ; attempt++ {
		ack, retry := once()
		if !retry {
			return ack
		}
		if attempt+1 >= maxSharedRetries || ctx.Err() != nil {
			// Ask the caller to retry: its envelope was not stored.
			return &macpv1.Ack{Ok: false, Error: &macpv1.MACPError{Code: "INTERNAL_ERROR", Message: "the session is contended by other nodes; retry"}}
		}
		pause := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 5)))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
	}
}

// ApplyStored takes records of one session, in order, that a node stored
// (the cluster feed); records the copy already has are skipped.
func (r *Runtime) ApplyStored(recs []session.Record) {
	if len(recs) == 0 || r.closing.Load() {
		return
	}
	id := recs[0].SessionID
	o := r.lookup(id)
	if o == nil {
		if recs[0].Seq != 1 || !r.owns(id) {
			return // not resident: loaded from the store when asked for
		}
		s, err := replay.Records(recs, r.replayOptions(0))
		if err != nil {
			r.log.Warn("session stored by another node does not replay here; loaded on demand", "session_id", id, "err", err)
			return
		}
		// The events are built before adopt shares the session.
		now := r.nowMs()
		events := []LifecycleEvent{{Type: macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED, Session: s.Metadata(), ObservedMs: now}}
		if s.Status.Terminal() {
			events = append(events, r.terminalEvent(s, now))
		}
		o = r.adopt(s)
		o.mu.Lock()
		mine := o.sess == s
		o.mu.Unlock()
		if mine {
			for _, ev := range events {
				r.Lifecycle.Publish(ev)
			}
			return
		}
	}
	if !r.applyToOwner(o, recs) {
		r.catchUpLater(o)
	}
}

// applyToOwner applies recs continuing o's idle copy; false: catch o up.
func (r *Runtime) applyToOwner(o *owner, recs []session.Record) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sess == nil {
		return true // forgotten meanwhile
	}
	o.durableMu.Lock()
	busy, durable := o.pending > 0, o.durableSeq
	o.durableMu.Unlock()
	i := 0
	for i < len(recs) && recs[i].Seq <= durable {
		i++
	}
	if i == len(recs) {
		return true // this copy has them (its own appends, or already applied)
	}
	// Beyond the durable end: decided once o's appends in flight are answered.
	if busy || o.broken.Load() == o.epoch+1 || recs[i].Seq != o.sess.Seq+1 {
		return false
	}
	return r.applyLocked(o, recs[i:])
}

// applyLocked applies stored records continuing o's copy (o.mu held, no
// request in flight), then publishes what a local commit would.
func (r *Runtime) applyLocked(o *owner, recs []session.Record) bool {
	before := o.sess.Status
	for _, rec := range recs {
		if err := o.sess.Apply(rec, r.opts.Limits); err != nil {
			r.log.Warn("stored record does not apply to this node's copy; rebuilding", "session_id", o.id, "seq", rec.Seq, "err", err)
			o.broken.CompareAndSwap(0, o.epoch+1)
			return false
		}
	}
	o.storedElsewhere(recs)
	if before != o.sess.Status { // ended, suspended or resumed on another node
		if !before.Terminal() && o.sess.Status.Terminal() {
			r.closedOpen(o)
		}
		r.Lifecycle.Publish(r.terminalEvent(o.sess, r.nowMs()))
	}
	r.armExpiry(o.sess) // a moved deadline or a pending implicit action
	return true
}

// storedElsewhere is answeredWith for records another node stored.
func (o *owner) storedElsewhere(recs []session.Record) {
	o.durableMu.Lock()
	o.durableSeq = recs[len(recs)-1].Seq
	close(o.durableCh)
	o.durableCh = make(chan struct{})
	if o.followers > 0 {
		o.tail.append(recs)
	}
	o.durableMu.Unlock()
}

// catchUpLater runs catchUp on its own goroutine (tracked by r.wg, its
// pauses on Options.Clock), retried until it succeeds or the runtime stops.
func (r *Runtime) catchUpLater(o *owner) {
	if r.closing.Load() {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for pause := 5 * time.Millisecond; ; pause = min(2*pause, time.Second) {
			t := r.opts.Clock.NewTimer(pause)
			select {
			case <-t.C():
			case <-r.stop:
				t.Stop()
				return
			}
			if r.closing.Load() {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			o.mu.Lock()
			err := r.catchUp(ctx, o)
			o.mu.Unlock()
			cancel()
			if err == nil {
				return
			}
			r.log.Warn("catching up with the shared store failed; retrying", "session_id", o.id, "err", err)
		}
	}()
}

// catchUp brings o's copy up to the store (o.mu held) once its requests
// in flight are answered: extended with the records it lacks, or rebuilt
// by replay if it is broken.
func (r *Runtime) catchUp(ctx context.Context, o *owner) error {
	if o.sess == nil {
		return nil // forgotten meanwhile
	}
	if err := o.waitIdle(ctx); err != nil {
		return err
	}
	if o.broken.Load() != o.epoch+1 {
		var recs []session.Record
		err := r.store.Read(ctx, o.id, o.sess.Seq+1, func(rec session.Record) error {
			recs = append(recs, rec)
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if len(recs) == 0 || r.applyLocked(o, recs) {
			return nil
		}
	}
	before := o.sess.Status
	if err := r.heal(ctx, o); err != nil {
		return err
	}
	if !before.Terminal() && o.sess.Status.Terminal() {
		r.closedOpen(o)
		r.Lifecycle.Publish(r.terminalEvent(o.sess, r.nowMs()))
	}
	return nil
}

// followShared catches o's copy up with the store before a follower that
// resumes after a sequence number the copy has not reached (it received
// records through another node): else it would get them a second time.
func (r *Runtime) followShared(ctx context.Context, o *owner, after uint64) *coord.Error {
	if !r.shared.Load() || o.durable() >= after {
		return nil
	}
	o.mu.Lock()
	err := r.catchUp(ctx, o)
	o.mu.Unlock()
	if err != nil {
		r.log.Warn("catching up with the shared store before following failed", "session_id", o.id, "err", err)
		return coord.Errorf(coord.CodeInternalError, "session %s is unavailable", o.id)
	}
	return nil
}

// staleCopy reports, with a shared store, whether an answer that wrote
// nothing was decided on a copy (at record seen) that other nodes' appends
// overtook; the copy is then marked for rebuilding and the caller decides
// again (one store request per rejection).
func (r *Runtime) staleCopy(ctx context.Context, o *owner, seen uint64) bool {
	if !r.shared.Load() {
		return false
	}
	last, err := r.store.LastSeq(ctx, o.id)
	if err != nil || last <= seen {
		return false
	}
	o.mu.Lock()
	if o.sess != nil && o.sess.Seq < last {
		o.broken.CompareAndSwap(0, o.epoch+1)
	}
	o.mu.Unlock()
	return true
}

// healedShared runs after heal rebuilt o from a shared store (o.mu held):
// the tail restarts at durableSeq, holding nothing, and followers behind it
// read the missing records from the store.
func (r *Runtime) healedShared(_ context.Context, o *owner) {
	if !r.shared.Load() {
		return
	}
	o.durableMu.Lock()
	if o.followers > 0 && o.durableSeq > o.tail.end.Load() {
		o.tail.restartAt(o.durableSeq)
	}
	close(o.durableCh)
	o.durableCh = make(chan struct{})
	o.durableMu.Unlock()
}

// restartAt empties the ring and moves its end to seq; followers are
// poked. Called with owner.durableMu held.
func (t *followTail) restartAt(seq uint64) {
	ring := t.ring.Load()
	if ring == nil {
		return
	}
	t.trim(ring, t.end.Load()+1)
	t.start = seq + 1
	t.end.Store(seq)
	select {
	case t.notify <- struct{}{}:
	default:
	}
}
