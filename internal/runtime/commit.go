package runtime

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/macpd/macpd/internal/clock"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// The group committer makes the records that session owners decided
// durable, many sessions per store append, and answers each request only
// once its records are durable. Its whole interface is submit (queue a
// request), run (the loop, on its own goroutine), stop, and the durable
// hook it calls for each stored request. Contract:
//
//  1. Submit. An owner, holding its session's lock, has applied the
//     records to its in-memory session and submits them with the epoch
//     they were decided in. Requests of one session are therefore queued
//     in sequence order. A request without records is a durability
//     barrier: answered nil at once if nothing of the session is in
//     flight, else queued behind the session's in-flight records.
//  2. Group. The committer takes the first queued request and every other
//     one already queued, up to maxBatch, and appends all their records
//     in one store call: one sync for the group, whatever sessions it
//     mixes.
//  3. Doomed records are left out. A request whose session had an append
//     fail in the same epoch was decided on state that is not stored; the
//     store's sequence check would refuse it, so it is not appended
//     (other sessions in the group are not failed with it) and is
//     answered errLost.
//  4. Durable before ack. A request's done channel gets nil only after the
//     append holding its records returned nil (with a store.Pipeliner:
//     after that append's wait returned nil), and only after the durable
//     hook ran for it (the session's durable sequence, its followers'
//     tail, the per-initiator count, lifecycle events). Nothing is
//     acknowledged or published before it is durable.
//  5. Order. Groups are answered strictly in the order they were started,
//     the requests of a group in queue order, all on one completer
//     goroutine. With a store.Pipeliner the committer starts a group's
//     append (AppendAsync) and builds the next group while it syncs; the
//     completer waits for each in turn, so no answer precedes the
//     durability of its own group or of any earlier one. Groups started
//     and not yet answered are bounded: the one the completer waits for,
//     maxInFlight handed on to it, and the one being handed on
//     (maxInFlight+2); then the committer waits. A barrier is answered
//     after every earlier request of its session: nil if all of them were
//     stored, errLost if one was lost.
//  6. A failed append or sync is final. Every request of the group gets
//     the error, and its session is marked broken for its epoch: the
//     owner rebuilds the session from the store by replay on next access
//     (heal) and never acknowledges the failed records. Nothing is
//     retried as if it had succeeded. A store whose sync failed fails
//     closed (store.ErrFailed: every later append and wait fails too) and
//     is not reused until the process restarts; the committer only
//     reports what the store says.
//  7. Stop. After stop, submit answers store.ErrClosed at once (a request
//     with records marks its session broken, since the owner already
//     applied them). The append in progress finishes and the groups in
//     flight are answered; a request already queued may still be
//     appended, else it is answered store.ErrClosed (its session marked
//     broken). run returns once every request it took was answered. The
//     committer never closes the store.
type committer struct {
	st          store.Store
	pipe        store.Pipeliner // st, if it pipelines; else nil
	maxBatch    int
	maxInFlight int // Options.MaxCommitsInFlight
	log         *slog.Logger
	metrics     *Metrics    // nil: none
	clock       clock.Clock // times the appends for metrics
	// durable runs for each request whose records were stored, on the
	// completer goroutine, in commit order, before the request's answer.
	durable func(*commitReq)

	queue chan *commitReq
	// mu makes "check closed, then queue" atomic with respect to stop, so
	// no request is queued after the loop drained the queue (its caller
	// would wait forever).
	mu      sync.RWMutex
	closed  bool
	stopped chan struct{}
}

// commitReq asks the committer to make recs durable. A request without
// records is a durability barrier: it is answered, in queue order, with
// nil if every earlier record of its session (same epoch) was stored and
// errLost otherwise.
type commitReq struct {
	o      *owner
	epoch  uint64
	recs   []session.Record
	events []LifecycleEvent
	closes bool // the records end an OPEN session (per-initiator count)
	doomed bool // committer only: left out of the append (contract step 3)
	done   chan error
}

// errLost answers a durability barrier whose session lost an earlier
// record (its append failed).
var errLost = errors.New("runtime: an earlier record of the session could not be stored")

// defaultMaxInFlight is Options.MaxCommitsInFlight's default: the groups
// started but not yet answered (contract step 5: maxInFlight+2 at most).
const defaultMaxInFlight = 4

// commitQueue is how many requests may wait for the committer; submit
// blocks beyond it.
const commitQueue = 4096

func newCommitter(st store.Store, maxBatch, maxInFlight int, log *slog.Logger, metrics *Metrics, clk clock.Clock, durable func(*commitReq)) *committer {
	pipe, _ := st.(store.Pipeliner)
	return &committer{
		st: st, pipe: pipe, maxBatch: maxBatch, maxInFlight: max(maxInFlight, 1), log: log, metrics: metrics, clock: clock.OrReal(clk), durable: durable,
		queue: make(chan *commitReq, commitQueue), stopped: make(chan struct{}),
	}
}

// submit queues records for durable append (contract step 1); the caller
// holds o.mu and has already applied recs to o.sess. The answer arrives on
// the returned channel (buffered: the committer never waits for it).
func (c *committer) submit(o *owner, recs []session.Record, events []LifecycleEvent, closes bool) chan error {
	done := make(chan error, 1)
	if len(recs) == 0 && o.durable() >= o.sess.Seq {
		done <- nil
		return done
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		if len(recs) > 0 {
			// o.sess already reflects recs: rebuild it on next access.
			o.broken.CompareAndSwap(0, o.epoch+1)
		}
		done <- store.ErrClosed
		return done
	}
	o.durableMu.Lock()
	o.pending++
	o.durableMu.Unlock()
	c.queue <- &commitReq{o: o, epoch: o.epoch, recs: recs, events: events, closes: closes, done: done}
	return done
}

// stop refuses new requests and ends run (contract step 7); run's caller
// waits for it. Idempotent.
func (c *committer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.stopped)
	}
}

// run groups queued requests into store appends (steps 2, 3, 6) until
// stop, handing each started group to the completer (steps 4, 5). It
// returns once every request it took was answered.
func (c *committer) run() {
	completions := make(chan inFlight, c.maxInFlight)
	finished := make(chan struct{})
	go func() { defer close(finished); c.complete(completions) }()
	defer func() { close(completions); <-finished }()
	var recs []session.Record
	for {
		var first *commitReq
		select {
		case first = <-c.queue:
		case <-c.stopped:
			// Drain what is queued so no waiter hangs; the groups in flight
			// are answered first (the completer, in order).
			var rest []*commitReq
			for {
				select {
				case req := <-c.queue:
					rest = append(rest, req)
					continue
				default:
				}
				break
			}
			if len(rest) > 0 {
				completions <- inFlight{batch: rest, err: store.ErrClosed, closed: true}
			}
			return
		}
		batch := make([]*commitReq, 1, min(c.maxBatch, 1+len(c.queue)))
		batch[0] = first
	fill:
		for len(batch) < c.maxBatch {
			select {
			case req := <-c.queue:
				batch = append(batch, req)
			default:
				break fill
			}
		}
		recs = recs[:0]
		reqs := 0 // requests whose records are in the append
		for _, req := range batch {
			// Records decided on top of a record that failed to append are
			// doomed (the store would refuse them): leave them out, so they
			// do not fail the other sessions' records of this batch.
			req.doomed = len(req.recs) > 0 && req.o.broken.Load() == req.epoch+1
			if !req.doomed && len(req.recs) > 0 {
				recs = append(recs, req.recs...)
				reqs++
			}
		}
		f := inFlight{batch: batch, reqs: reqs, recs: len(recs)}
		if c.metrics != nil && len(recs) > 0 {
			f.start = c.clock.Now()
		}
		switch {
		case len(recs) == 0:
		case c.pipe != nil:
			f.wait, f.err = c.pipe.AppendAsync(context.Background(), recs)
		default:
			f.err = c.st.Append(context.Background(), recs)
			if c.metrics != nil {
				f.took = c.clock.Now().Sub(f.start)
			}
		}
		if f.err != nil {
			// Known now: mark the sessions broken before the next group is
			// built, so their later records are left out of it (doomed).
			for _, req := range batch {
				if len(req.recs) > 0 && !req.doomed {
					req.o.broken.CompareAndSwap(0, req.epoch+1)
				}
			}
		}
		clear(recs) // keep no references to answered records
		completions <- f
	}
}

// inFlight is a group of commit requests whose append was started.
type inFlight struct {
	batch []*commitReq
	wait  func() error // nil: the append finished (err is its result)
	err   error
	// closed: the committer stopped before these requests were appended.
	closed bool
	// For Metrics: the requests and records in the append, when it
	// started and how long it took (set only with metrics).
	reqs, recs int
	start      time.Time
	took       time.Duration
}

// complete answers started groups in the order they were started, each
// after its append is durable (or failed).
func (c *committer) complete(completions <-chan inFlight) {
	for f := range completions {
		err := f.err
		if err == nil && f.wait != nil {
			err = f.wait()
			if c.metrics != nil && f.recs > 0 {
				f.took = c.clock.Now().Sub(f.start) // to the end of the wait
			}
		}
		if err != nil && !f.closed {
			c.log.Error("store append failed", "requests", len(f.batch), "err", err)
		}
		if c.metrics != nil && f.recs > 0 && !f.closed {
			c.metrics.group(&f, err)
		}
		for _, req := range f.batch {
			rerr := err
			switch {
			case f.closed:
				if len(req.recs) > 0 {
					req.o.broken.CompareAndSwap(0, req.epoch+1)
				}
				req.o.answered(0)
			case len(req.recs) == 0: // barrier: earlier requests were answered first
				rerr = nil
				if req.o.broken.Load() == req.epoch+1 {
					rerr = errLost
				}
				req.o.answered(0)
			case req.doomed:
				rerr = errLost
				req.o.answered(0)
			case err != nil:
				req.o.broken.CompareAndSwap(0, req.epoch+1)
				req.o.answered(0)
			default:
				c.durable(req)
			}
			req.done <- rerr
		}
	}
}
