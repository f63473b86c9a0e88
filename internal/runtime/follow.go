package runtime

import (
	"context"
	"errors"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// Following a session (RFC-MACP-0006 §3.2 passive subscribe, and the
// output side of an active StreamSession): a follower receives the
// session's records with Seq > after, in order, with no gap and no
// duplicate, first from the store (catch-up) and then live from the
// committer, and ends after the terminal record.
//
// Hand-over contract: the committer publishes durable records to
// followers under owner.durableMu right after advancing durableSeq. A
// follower reads the store until it has everything up to some point, then,
// under durableMu, registers only if durableSeq < next (nothing durable is
// missing); otherwise it reads the store again. So every record with
// Seq >= next is either read from the store or published after
// registration, and records it already has are skipped by sequence
// number. Catch-up reads stop at durableSeq: the store can be ahead of it
// (a batch being synced is already readable in Pebble; a synced one is
// not yet answered), and nothing is delivered before it is durable.
//
// Slow followers: a follower's live queue is bounded. When it is full the
// committer drops the follower from the live list instead of blocking;
// the follower then catches up from the store and registers again. No
// record is ever skipped, and the committer never waits for a consumer.

// followerQueue bounds a follower's live queue.
const followerQueue = 256

type follower struct {
	c       chan session.Record
	dropped chan struct{} // closed when the committer dropped the follower
}

// answeredWith is answered for a request whose records became durable:
// durableSeq advances and the records are published to live followers.
func (o *owner) answeredWith(recs []session.Record) {
	o.durableMu.Lock()
	o.durableSeq = recs[len(recs)-1].Seq
	o.pending--
	close(o.durableCh)
	o.durableCh = make(chan struct{})
	if len(o.followers) > 0 {
		kept := o.followers[:0]
		for _, f := range o.followers {
			if offerAll(f.c, recs) {
				kept = append(kept, f)
			} else {
				close(f.dropped)
			}
		}
		clear(o.followers[len(kept):])
		o.followers = kept
	}
	o.durableMu.Unlock()
}

// offerAll queues recs without blocking; false if the queue filled up.
func offerAll(c chan session.Record, recs []session.Record) bool {
	for _, rec := range recs {
		select {
		case c <- rec:
		default:
			return false
		}
	}
	return true
}

// register adds f as a live follower if every durable record before next
// has been delivered; otherwise it reports false (read the store again).
func (o *owner) register(f *follower, next uint64) bool {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	if o.durableSeq >= next {
		return false
	}
	o.followers = append(o.followers, f)
	return true
}

func (o *owner) unregister(f *follower) {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	for i, g := range o.followers {
		if g == f {
			o.followers = append(o.followers[:i], o.followers[i+1:]...)
			return
		}
	}
}

// FollowOptions tune Follow.
type FollowOptions struct {
	// LiveSinceMs: when after is beyond the session's last durable record,
	// the follower is live from this instant instead: records accepted at
	// or after it are delivered too. Transports pass the time the stream
	// was opened, so a record accepted between opening the stream and
	// subscribing is not lost (docs/resume.md). 0 means "from now": after
	// the last durable record.
	LiveSinceMs int64
	// OnStart is called once with the session's last durable sequence
	// number when following begins (before any record is delivered).
	OnStart func(lastSeq uint64)
	// OnStartAfter is called with OnStart and also reports the effective
	// after: records with Seq > after are delivered. It differs from the
	// requested after only when that was beyond the end (LiveSinceMs), so
	// transports can tell clients where counting starts.
	OnStartAfter func(lastSeq, after uint64)
}

// ErrFollowEnded is returned by Follow when the session reached a
// terminal state and every record was delivered.
var ErrFollowEnded = errors.New("runtime: session ended")

// Follow delivers the session's records with Seq > after to fn, in order,
// then live records as they become durable, until the session ends
// (ErrFollowEnded, after the terminal record was delivered, or at once if
// the session is terminal and after is at or beyond its last record), ctx
// ends, or fn fails. Records without an envelope (TTL expiry) are
// delivered too so the caller sees the end; transports skip them. Only the initiator,
// declared participants and observers may follow (FORBIDDEN); an unknown
// session is SESSION_NOT_FOUND.
func (r *Runtime) Follow(ctx context.Context, id coord.Identity, sessionID string, after uint64, opts FollowOptions, fn func(session.Record) error) error {
	o, cerr := r.sessionOwner(ctx, sessionID)
	if cerr != nil {
		return cerr
	}
	// last and terminal are read together, while everything decided is
	// durable: a terminal session's last record is its terminal record.
	var (
		allowed, terminal bool
		last              uint64
	)
	if err := r.readDurable(ctx, o, func(s *session.Session) {
		allowed, terminal, last = visible(id, s), s.Status.Terminal(), s.Seq
	}); err != nil {
		return err
	}
	if !allowed {
		return coord.Errorf(coord.CodeForbidden, "%s may not follow session %s", id.Sender, sessionID)
	}
	if after > last && opts.LiveSinceMs == 0 {
		after = last // live from now
	}
	if after > last {
		since := opts.LiveSinceMs
		// Live from `since`: resume after the last record accepted before
		// it. Records accepted in the same millisecond are included.
		after = 0
		err := r.store.Read(ctx, sessionID, 1, func(rec session.Record) error {
			if rec.Seq > last || rec.AcceptedAtMs >= since {
				return errStopRead
			}
			after = rec.Seq
			return nil
		})
		if err != nil && !errors.Is(err, errStopRead) {
			return err
		}
	}
	if opts.OnStart != nil {
		opts.OnStart(last)
	}
	if opts.OnStartAfter != nil {
		opts.OnStartAfter(last, after)
	}
	if terminal && after >= last {
		// Nothing is left and nothing will come: the terminal record was
		// at or before after.
		return ErrFollowEnded
	}
	next := after + 1
	deliver := func(rec session.Record) error {
		if rec.Seq < next {
			return nil // already delivered (store and live overlap)
		}
		if rec.Seq > next {
			return coord.Errorf(coord.CodeInternalError, "session %s: follower expected record %d, got %d", sessionID, next, rec.Seq)
		}
		next++
		if err := fn(rec); err != nil {
			return err
		}
		if rec.Status.Terminal() {
			return ErrFollowEnded
		}
		return nil
	}
	for {
		// Catch up from the store, but only with durable records: a store
		// may show a batch before its sync completed (Pebble makes a
		// batch visible before its WAL sync returns), and a record that
		// is not yet durable must not reach anyone. Later records come
		// live, or from the next pass.
		limit := o.durable()
		err := r.store.Read(ctx, sessionID, next, func(rec session.Record) error {
			if rec.Seq > limit {
				return errStopRead
			}
			return deliver(rec)
		})
		switch {
		case err == nil, errors.Is(err, store.ErrNotFound), errors.Is(err, errStopRead):
		default:
			return err
		}
		// Go live if nothing durable is missing.
		f := &follower{c: make(chan session.Record, followerQueue), dropped: make(chan struct{})}
		if !o.register(f, next) {
			continue
		}
		err = r.followLive(ctx, o, f, deliver)
		o.unregister(f)
		if err != nil {
			return err
		}
		// Dropped for falling behind: catch up from the store again.
	}
}

var errStopRead = errors.New("stop")

// followLive delivers live records until the follower is dropped (nil),
// the session ends, ctx ends or deliver fails.
func (r *Runtime) followLive(ctx context.Context, o *owner, f *follower, deliver func(session.Record) error) error {
	for {
		select {
		case rec := <-f.c:
			if err := deliver(rec); err != nil {
				return err
			}
		case <-f.dropped:
			// Deliver what was queued before the drop, then catch up.
			for {
				select {
				case rec := <-f.c:
					if err := deliver(rec); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stop:
			return coord.Errorf(coord.CodeInternalError, "runtime is shutting down")
		}
	}
}

// LastSeq returns the sequence number of the session's last durable record.
func (r *Runtime) LastSeq(sessionID string) (uint64, bool) {
	o := r.lookup(sessionID)
	if o == nil {
		return 0, false
	}
	return o.durable(), true
}
