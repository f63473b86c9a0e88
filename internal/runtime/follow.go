package runtime

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/streambudget"
)

// Following a session (RFC-MACP-0006 §3.2 passive subscribe, and the
// output side of an active StreamSession): a follower receives the
// session's records with Seq > after, in order, with no gap and no
// duplicate, only once they are durable, first from the store (catch-up)
// and then live from the session's shared tail, and ends after the
// terminal record (ErrFollowEnded), when its ctx ends or when the runtime
// stops.
//
// Shared tail: while a session has followers, its owner keeps a ring of
// its most recent durable records (owner.tail, followTail; bounded in
// records and in bytes, see followTailMin/Max and followTailMaxBytes).
// The completer, in answeredWith (under owner.durableMu, right after
// advancing durableSeq), stores each answered request's records in the
// ring, publishes the new end and pokes the tail's relay goroutine with a
// non-blocking send; the relay wakes every waiting follower at once by
// closing a channel and replacing it. That is all the committer does for
// followers: O(records) per request whatever the number of followers, no
// per-follower state, and it never waits for a follower. Each follower
// keeps its own cursor (next) and reads the ring itself, lock-free
// (atomic loads), on its own goroutine.
//
// Hand-over contract: a follower registers (owner.followers, under
// durableMu) before its first store read. Every record answered after that
// goes into the ring; every record answered before is at or below
// durableSeq from then on. A store pass reads from next up to o.durable()
// taken when the pass starts; then the follower reads the ring from next
// on. A slot holds record s only if the record's Seq is s. If the slot for
// next holds another record or none (overwritten: the follower is a whole
// ring behind; trimmed by the byte budget; or never written: the ring
// restarted after a rebuild), the follower reads the store again, up to
// the new durableSeq, and returns to the ring. So every record with Seq >=
// next comes from the store or the ring, a record already delivered is
// skipped by sequence number, and a gap is an error, never a silent skip.
// Store reads stop at durableSeq: the store can be ahead of it (a batch
// being synced is already readable in Pebble; a synced one is not yet
// answered), and nothing is delivered before it is durable.
//
// The ring holds only durable records: answeredWith runs only for
// requests whose append succeeded. After a failed append the owner is
// rebuilt from the store (heal, a new epoch): the records that failed were
// never in the ring, the rebuilt session continues from the last durable
// record, and a durable sequence number names one record only, so a slot
// filled before the rebuild is still right. (Should a rebuild ever find
// more records stored than were answered, durableSeq moves past the ring's
// end without an append; followers there read those records from the
// store when the next record is appended, which restarts the ring.)
//
// Slow followers: a follower's speed never affects the committer or the
// other followers. Memory per session is the ring (at most followTailMax
// pointers and followTailMaxBytes of records) whatever the number of
// followers. A follower that fell out of the ring catches up from the
// store, in chunks read with no iterator open while it delivers. What a
// follower and its consumer hold beyond the ring is bounded by its
// streambudget.Window (FollowOptions.Window, streambudget.go): a record is
// charged before it is read or handed on, so a consumer that does not
// read makes its follower wait, not queue; a stalled one is ended with
// RATE_LIMITED.

// The tail's ring starts with followTailMin slots and doubles, up to
// followTailMax, when a follower finds itself more than half a ring behind
// (or fell out of it): sessions whose followers keep up stay small, and a
// burst that followers absorb late is served from memory instead of the
// store. Powers of two (slot = Seq & (len-1)).
const (
	followTailMin = 1024
	followTailMax = 16384
)

// followTailMaxBytes bounds the records in a session's shared tail by
// size: followTailOverhead per record plus its payload. Large envelopes
// shorten the window instead of pinning up to followTailMax of them. The
// newest request's records always stay.
const (
	followTailMaxBytes = 8 << 20
	followTailOverhead = 256
)

// followTail is a session's ring of recent durable records, shared by its
// followers (see the contract above).
type followTail struct {
	// Set while active (the session has followers); written by the
	// completer, read by followers without locks.
	ring     atomic.Pointer[tailRing]
	end      atomic.Uint64                 // Seq of the newest record; 0: none yet
	wake     atomic.Pointer[chan struct{}] // closed and replaced by the relay
	wantGrow atomic.Bool                   // a follower is more than half a ring behind

	// Completer only (under owner.durableMu).
	start  uint64        // Seq of the oldest record held, if end >= start
	bytes  int           // recordCost of the records held
	notify chan struct{} // pokes the relay (buffered, never blocks)
	quit   chan struct{} // ends the relay (last follower gone)
}

// tailRing holds record s in slots[s&mask]. A slot whose record has
// another Seq (or none) does not hold s.
type tailRing struct {
	slots []atomic.Pointer[session.Record]
	mask  uint64
}

func newTailRing(size int) *tailRing {
	return &tailRing{slots: make([]atomic.Pointer[session.Record], size), mask: uint64(size - 1)}
}

// get returns record seq if the ring holds it.
func (r *tailRing) get(seq uint64) *session.Record {
	if p := r.slots[seq&r.mask].Load(); p != nil && p.Seq == seq {
		return p
	}
	return nil
}

// recordCost is what a record counts against followTailMaxBytes.
func recordCost(rec *session.Record) int {
	return followTailOverhead + len(rec.Envelope.GetPayload())
}

// activate starts an empty tail and its relay (first follower); the
// caller holds owner.durableMu.
func (t *followTail) activate(stop <-chan struct{}) {
	t.reset()
	go t.relay(t.notify, t.quit, stop)
}

// reset empties the tail for a new activation (the relay not started).
func (t *followTail) reset() {
	t.ring.Store(newTailRing(followTailMin))
	t.end.Store(0)
	t.wantGrow.Store(false)
	t.start, t.bytes = 1, 0
	w := make(chan struct{})
	t.wake.Store(&w)
	t.notify, t.quit = make(chan struct{}, 1), make(chan struct{})
}

// deactivate drops the tail (last follower gone), so it pins no records;
// the caller holds owner.durableMu.
func (t *followTail) deactivate() {
	close(t.quit)
	t.ring.Store(nil)
	t.notify, t.quit = nil, nil
	t.bytes = 0
}

// relay wakes the followers when the completer pokes it, so the cost of
// waking many goroutines is never the committer's; pokes that arrive
// while it is busy are coalesced. On runtime stop it wakes them a last
// time (they see the stop) and ends.
func (t *followTail) relay(notify, quit, stop <-chan struct{}) {
	for {
		select {
		case <-notify:
			t.broadcast()
		case <-quit:
			return
		case <-stop:
			t.broadcast()
			return
		}
	}
}

// broadcast wakes every follower waiting on the tail.
func (t *followTail) broadcast() {
	w := make(chan struct{})
	close(*t.wake.Swap(&w))
}

// append adds durable records (consecutive sequence numbers) and pokes the
// relay. Called only by the completer (so in commit order) with
// owner.durableMu held; O(len(recs)) whatever the number of followers
// (plus, at most log2(followTailMax/followTailMin) times per activation,
// copying the window into a larger ring).
func (t *followTail) append(recs []session.Record) {
	ring := t.ring.Load()
	if ring == nil {
		return
	}
	if t.wantGrow.Load() {
		ring = t.grow(ring)
	}
	recs = slices.Clone(recs) // the ring's own copy, never modified
	for i := range recs {
		rec := &recs[i]
		switch end := t.end.Load(); {
		case end == 0 || rec.Seq != end+1:
			// The first record, or not the next one (the session was
			// rebuilt from the store): start over. Followers that need
			// the records in between do not find them and use the store.
			t.trim(ring, end+1)
			t.start = rec.Seq
		case rec.Seq-t.start >= uint64(len(ring.slots)):
			t.trim(ring, t.start+1) // the ring is full: the oldest goes
		}
		ring.slots[rec.Seq&ring.mask].Store(rec)
		t.bytes += recordCost(rec)
		t.end.Store(rec.Seq)
	}
	// Over the byte budget: drop the oldest, but keep this request's
	// records (a follower at the head needs them).
	for t.bytes > followTailMaxBytes && t.start < recs[0].Seq {
		t.trim(ring, t.start+1)
	}
	select {
	case t.notify <- struct{}{}:
	default: // a poke is pending: the relay will see these records too
	}
}

// grow doubles the ring (up to followTailMax) with the same records. The
// new ring is published before any record is written to it only, so a
// follower that loads the ring after end finds every record up to end
// that is still held.
func (t *followTail) grow(ring *tailRing) *tailRing {
	t.wantGrow.Store(false)
	if len(ring.slots) >= followTailMax {
		return ring
	}
	bigger := newTailRing(2 * len(ring.slots))
	for s, end := t.start, t.end.Load(); s <= end; s++ {
		bigger.slots[s&bigger.mask].Store(ring.get(s))
	}
	t.ring.Store(bigger)
	return bigger
}

// trim forgets the records before seq, clearing their slots so they are
// not pinned (a follower that finds a slot empty uses the store).
func (t *followTail) trim(ring *tailRing, seq uint64) {
	for end := t.end.Load(); t.start < seq && t.start <= end; t.start++ {
		if p := ring.get(t.start); p != nil {
			t.bytes -= recordCost(p)
			ring.slots[t.start&ring.mask].Store(nil)
		}
	}
	t.start = max(t.start, seq)
}

// answeredWith is answered for a request whose records became durable:
// durableSeq advances and, while the session has followers, the records
// join the shared tail and the followers are woken.
func (o *owner) answeredWith(recs []session.Record) {
	o.durableMu.Lock()
	o.durableSeq = recs[len(recs)-1].Seq
	o.pending--
	close(o.durableCh)
	o.durableCh = make(chan struct{})
	if o.followers > 0 {
		o.tail.append(recs)
	}
	o.durableMu.Unlock()
}

// addFollower registers a follower: from now on every record made durable
// joins the tail.
func (o *owner) addFollower(stop <-chan struct{}) {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	if o.followers == 0 {
		o.tail.activate(stop)
	}
	o.followers++
}

func (o *owner) removeFollower() {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	o.followers--
	if o.followers == 0 {
		o.tail.deactivate()
	}
}

// followTail delivers records from the shared tail from next on until
// next has left it (nil: catch up from the store), the session ends, ctx
// ends (done is closed), the runtime stops, or deliver fails.
func (r *Runtime) followTail(ctx context.Context, o *owner, cursor func() uint64, done <-chan struct{}, deliver func(session.Record) error) error {
	t := &o.tail
	for {
		// wake, then end, then ring: a record appended after this load
		// of end closes this wake (the relay swaps it after the append),
		// and so does a runtime stop seen after it; the ring is at least
		// as new as the one every record up to end was written to.
		wake := t.wake.Load()
		end := t.end.Load()
		ring := t.ring.Load()
		if next := cursor(); next <= end && end-next >= uint64(len(ring.slots)/2) && !t.wantGrow.Load() {
			t.wantGrow.Store(true) // more than half a ring behind
		}
		for next := cursor(); next <= end; next = cursor() {
			p := ring.get(next)
			if p == nil {
				// Overwritten, trimmed or never there: use the store.
				t.wantGrow.Store(true)
				return nil
			}
			if err := deliver(*p); err != nil {
				return err
			}
		}
		if closed(done) {
			return ctx.Err()
		}
		if closed(r.stop) {
			return coord.Errorf(coord.CodeInternalError, "runtime is shutting down")
		}
		select {
		case <-*wake:
		case <-done:
			return ctx.Err()
		}
	}
}

// closed reports whether ch is closed (single-case: no channel lock).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
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
	// ReplayWindow, if > 0, is the most missed records a follower catches
	// up on: when more than ReplayWindow records lie between the effective
	// after and the session's last durable record, none of them is
	// delivered and the follower starts after the last durable record
	// instead (session/resume's replay window, docs/resume.md). OnStart
	// and OnStartAfter report that after; OnReplayCut, if set, is called
	// before them with the after it replaced.
	ReplayWindow uint64
	OnReplayCut  func(after uint64)
	// Window, if set, bounds what this follower and its consumer hold
	// (streambudget.go): every record is charged streambudget.Cost(rec) to it
	// before it is read from the store or handed to fn, waiting while the
	// stream's or the global bound does not allow it; fn's consumer calls
	// Window.Release(streambudget.Cost(rec)) once its client has really taken
	// the record, and Window.Close when the stream ends. A stalled window
	// ends Follow with RATE_LIMITED. Without a Window, Follow is still
	// paced by fn (it waits while fn does), reading the store in one pass.
	Window *streambudget.Window
	// OnRegistered, if set, is called once the follower is registered for
	// the session's live tail and before its first store pass reads
	// durableSeq. A test seam (the simulation, internal/sim, commits a
	// record from inside it to make the store pass and the tail overlap);
	// transports leave it nil.
	OnRegistered func()
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
	if err := r.followShared(ctx, o, after); err != nil { // cluster.go
		return err
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
	if w := opts.ReplayWindow; w > 0 && last > after && last-after > w {
		if opts.OnReplayCut != nil {
			opts.OnReplayCut(after)
		}
		after = last // outside the replay window: nothing missed is replayed
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
	w := opts.Window
	if w != nil {
		w.Bind(id.Sender, sessionID) // the identity's and session's shares (streambudget.go)
	}
	// deliver hands rec to fn. charged: the window was charged for rec
	// already (store chunks); otherwise it is charged here (tail records,
	// which are in memory anyway), waiting while the bounds say so.
	deliver := func(rec session.Record, charged bool) error {
		if rec.Seq < next {
			if charged {
				w.Release(streambudget.Cost(rec))
			}
			return nil // already delivered (store and tail overlap)
		}
		if rec.Seq > next {
			if charged {
				w.Release(streambudget.Cost(rec))
			}
			return coord.Errorf(coord.CodeInternalError, "session %s: follower expected record %d, got %d", sessionID, next, rec.Seq)
		}
		if !charged && w != nil {
			if err := w.Acquire(ctx, streambudget.Cost(rec)); err != nil {
				return err
			}
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
	// Registered before the first store read: every record made durable
	// from now on joins the tail; every earlier one is at or below the
	// limit of the store pass below.
	o.addFollower(r.stop)
	defer o.removeFollower()
	if opts.OnRegistered != nil {
		opts.OnRegistered()
	}
	r.followers.Add(1)
	defer r.followers.Add(-1)
	// done is this follower's own: waiting on ctx.Done(), possibly shared
	// by many followers, would make them contend for its lock.
	done := make(chan struct{})
	defer context.AfterFunc(ctx, func() { close(done) })()
	cursor := func() uint64 { return next }
	// prepaid is what the window was charged for the record at next when
	// a chunk stopped because the bounds did not allow it (see below).
	var prepaid int64
	chunkRecords := followChunkFirst // grows to followChunkRecords
	defer func() {
		if prepaid > 0 {
			w.Release(prepaid)
		}
	}()
	for {
		// Catch up from the store, but only with durable records: a store
		// may show a batch before its sync completed (Pebble makes a
		// batch visible before its WAL sync returns), and a record that
		// is not yet durable must not reach anyone. Later records come
		// from the tail, or from the next pass.
		//
		// The store is read in chunks (followChunkBytes or
		// followChunkRecords, at least one record), each charged to the
		// window record by record before it is kept, and delivered with
		// no store iterator open: a consumer that does not read makes the
		// follower wait between chunks, holding at most what its window
		// allows. When the window does not allow the next record, the
		// chunk ends there; the follower waits until it does (Acquire,
		// which also ends a stalled stream), keeps that charge (prepaid)
		// and reads on from that record.
		limit := o.durable()
		for next <= limit {
			if w == nil {
				// No window (in-process consumers): one pass, each record
				// handed to fn from within the read, paced by fn.
				err := r.store.Read(ctx, sessionID, next, func(rec session.Record) error {
					if rec.Seq > limit {
						return errStopRead
					}
					return deliver(rec, false)
				})
				switch {
				case err == nil, errors.Is(err, store.ErrNotFound), errors.Is(err, errStopRead):
				default:
					return err
				}
				break
			}
			var (
				chunk []session.Record
				size  int
				want  int64
			)
			err := r.store.Read(ctx, sessionID, next, func(rec session.Record) error {
				if rec.Seq > limit {
					return errStopRead
				}
				if w != nil {
					c := streambudget.Cost(rec)
					switch {
					case len(chunk) == 0 && prepaid == c:
						prepaid = 0 // charged while waiting for it
					case !w.TryAcquire(c):
						want = c
						return errStopRead
					}
				}
				chunk = append(chunk, rec)
				size += recordCost(&rec)
				if size >= followChunkBytes || len(chunk) >= chunkRecords {
					return errStopRead
				}
				return nil
			})
			switch {
			case err == nil, errors.Is(err, store.ErrNotFound), errors.Is(err, errStopRead):
			default:
				releaseAll(w, chunk)
				return err
			}
			chunkRecords = min(2*chunkRecords, followChunkRecords)
			for i := range chunk {
				if err := deliver(chunk[i], w != nil); err != nil {
					releaseAll(w, chunk[i+1:])
					return err
				}
				chunk[i] = session.Record{} // delivered: not pinned by the chunk
			}
			if want > 0 {
				if prepaid > 0 {
					w.Release(prepaid)
					prepaid = 0
				}
				if err := w.Acquire(ctx, want); err != nil {
					return err
				}
				prepaid = want
				continue
			}
			if len(chunk) == 0 {
				break // nothing (more) stored up to limit
			}
		}
		if prepaid > 0 {
			w.Release(prepaid)
			prepaid = 0
		}
		if next <= limit {
			// Durable records are stored; never spin on a store that
			// lost them (or a session purged meanwhile).
			return coord.Errorf(coord.CodeInternalError, "session %s: durable record %d is not in the store", sessionID, next)
		}
		// Live from the shared tail, until the follower falls out of it.
		if err := r.followTail(ctx, o, cursor, done, func(rec session.Record) error { return deliver(rec, false) }); err != nil {
			return err
		}
	}
}

// Store chunks of a follower's catch-up (see Follow): the first holds at
// most followChunkFirst records (a consumer that stops early, such as a
// client that resumes and leaves, pays for little more than it takes),
// each next one twice as many, up to followChunkRecords; each at most
// followChunkBytes (at least one record).
const (
	followChunkBytes   = 256 << 10
	followChunkFirst   = 16
	followChunkRecords = 256
)

var errStopRead = errors.New("stop")
