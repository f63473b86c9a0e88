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

// Several nodes, one set of sessions (a shared store: natsstore; see
// docs/cluster.md and internal/cluster).
//
// Mechanism: optimistic concurrency, no session ownership. Every node
// decides on its in-memory copy of a session exactly as a single node
// does, and appends; the shared store refuses an append that does not
// continue the session's stored history (store.ErrConflict: another node
// stored first). The failed append marks the owner broken as any failed
// append does, the caller's envelope is decided again (retryShared): the
// session is rebuilt from the store by replay (heal) and admission runs
// on the stored history, so dedup by message_id, the at-most-once
// resolution and the TTL expiry are all decided by what the store holds.
// A request that was queued behind the refused one (errLost) is retried
// the same way. Nothing is acknowledged before the store acknowledged it.
//
// Keeping copies current: the cluster watcher (internal/cluster) feeds
// every record stored by any node to ApplyStored, which applies records
// that continue a resident session's copy, publishes its lifecycle
// events, wakes its followers, and adopts sessions started elsewhere (so
// every node knows every OPEN session and arms its deadline; the first
// node to store the expiry wins, the others' expiry appends conflict).
// A copy that cannot take the records (it has appends in flight, or it
// missed some) is caught up a moment later from the store.
//
// Cost of a hot session written through several nodes: every conflict is
// one refused append plus a replay of the session's whole history on the
// losing node, and the losing envelope's latency doubles or worse; under
// sustained contention throughput falls below that of one node
// (docs/benchmarks.md). Route a session's writers to one node where
// possible.

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

// retryShared runs once until it does not ask for a retry, at most
// maxSharedRetries times, with a short random pause between attempts (two
// nodes racing on one session would otherwise collide again).
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

// ApplyStored takes records of one session, in order, that a node (this
// one or another) stored: the cluster watcher's feed. Records the
// session's copy already has are skipped.
func (r *Runtime) ApplyStored(recs []session.Record) {
	if len(recs) == 0 || r.closing.Load() {
		return
	}
	id := recs[0].SessionID
	o := r.lookup(id)
	if o == nil {
		if recs[0].Seq != 1 {
			return // not resident: loaded from the store when asked for
		}
		s, err := replay.Records(recs, r.replayOptions(0))
		if err != nil {
			r.log.Warn("session stored by another node does not replay here; loaded on demand", "session_id", id, "err", err)
			return
		}
		// The events are built before the session is shared (adopt makes
		// it visible to callers that step it).
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

// applyToOwner applies recs to o's copy if they continue it and nothing of
// o is in flight; false: o must be caught up from the store.
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
	// Beyond the durable end: this node's own appends in flight, or
	// another node's that will refuse them; decided once they are answered.
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

// storedElsewhere advances o's durable sequence to records another node
// stored and hands them to o's followers (answeredWith without a request).
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

// catchUpLater brings o's copy up to the store once its requests in flight
// are answered (catchUp), on its own goroutine: the feed never waits for a
// session. A catch-up that fails (the store unreachable for a moment) is
// tried again until it succeeds or the runtime stops, so a copy never
// stays behind waiting for the session's next record. The goroutine is
// tracked on the runtime's WaitGroup (Close waits for it) and its pauses
// are timers of Options.Clock, ended early by Close.
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
// in flight are answered: rebuilt by replay if it is broken (it lost a
// conflict), else extended with the stored records it lacks; followers
// get those records through the tail (or, after a rebuild, the store).
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
		// A record did not apply: applyLocked marked the copy broken.
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

// followShared runs before a follower starts (Follow): with a shared
// store, a client may resume after a sequence number this node's copy has
// not reached yet (it received records through another node, and this
// node's feed lags). Follow decides where to start from the copy's last
// durable record, so the copy is first caught up with the store; else a
// resume after 26 on a copy that ends at 12 would start after 12 and hand
// the client 13..26 a second time. Without a shared store, or when the
// copy already reaches after, it costs nothing.
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
// nothing (a rejection, a duplicate) was decided on a copy of the session
// (at record seen) that another node's appends have overtaken; the copy,
// unless the feed caught it up meanwhile, is then marked for rebuilding,
// and the caller decides again. Accepted envelopes need no
// such check: their append is refused unless it continues the stored
// history. It costs one store request per rejection.
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
// the rebuilt copy may end with records other nodes stored, which never
// went through this node's tail, so durableSeq is past the tail's end.
// The tail restarts there, holding nothing (restartAt), and the followers
// are woken: one whose next record is at or below the new end finds no
// slot for it and reads the store up to durableSeq, then waits for the
// next record, which continues the restarted tail. Nothing is read here,
// so a rebuild can never leave followers waiting behind durableSeq.
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

// restartAt empties the ring and moves its end to seq (at or beyond the
// old end) without holding any record; the next append, seq+1, continues
// it. Followers are poked. Called with owner.durableMu held, like append.
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
