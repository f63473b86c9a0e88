package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// Options configure a Runtime. The zero value of each field selects its
// default.
type Options struct {
	Limits session.Limits
	// MaxOpenSessionsPerInitiator caps OPEN sessions one identity may have
	// initiated (RATE_LIMITED beyond); 0 = no cap. An identity's own
	// Capabilities.MaxOpenSessions overrides it.
	MaxOpenSessionsPerInitiator int
	// Rates are the per-sender SessionStart and message rates
	// (ratelimit.go); the zero value limits nothing.
	Rates RateLimits
	// MaxCommitBatch caps how many commit requests one store append groups.
	MaxCommitBatch int
	// SubscriberBuffer bounds each watch subscriber's queue.
	SubscriberBuffer int
	// MaxWatchPending caps the distinct sessions a coalescing lifecycle
	// watcher may have pending (watch.go); beyond it the watcher is ended
	// and must re-sync. Default DefaultMaxWatchPending.
	MaxWatchPending int
	// StrictRecovery refuses to start when a stored session fails
	// integrity checks or replay, instead of quarantining it. A strict
	// boot checks the summary of every stored session (store List:
	// terminal ones too, so boot time grows with all history) and refuses
	// to start on any failure; the default boot lists only the OPEN and
	// quarantined sessions (store ListOpen) and finds damage to a
	// terminal session when the session is asked for.
	StrictRecovery bool
	// Retention purges whole terminal sessions that ended longer ago than
	// this; 0 keeps history forever (the default).
	Retention time.Duration
	// EvictAfter drops terminal sessions from memory this long after they
	// ended (they are reloaded from the store on demand); 0 keeps them.
	EvictAfter time.Duration
	// Now is the clock; defaults to time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// Metrics, if set, counts commits and exports session gauges
	// (metrics.go); nil counts nothing.
	Metrics *Metrics
	// CommitTimeout bounds how long a call waits for its records to become
	// durable (a stuck disk): after it (up to an eighth more: the waits
	// share one ticker, deadline.go) the call is answered with an error
	// and its records, if they land later, are not acknowledged. 0 leaves
	// only the caller's context. The server sets it to the unary call
	// limit, so that Send needs no per-call context of its own.
	CommitTimeout time.Duration
	// StreamBuffers bounds what streams hold for their clients
	// (streambudget.go); zero fields take DefaultStreamBudget's values.
	StreamBuffers StreamBudgetOptions
	// Registry bounds registered extension modes and policies
	// (registrylimits.go); zero fields take DefaultRegistryLimits' values.
	Registry RegistryLimits
}

func (o *Options) ensureDefaults() {
	if o.Limits == (session.Limits{}) {
		o.Limits = session.DefaultLimits()
	}
	if o.MaxCommitBatch <= 0 {
		o.MaxCommitBatch = 256
	}
	o.Registry.ensureDefaults()
	if o.SubscriberBuffer <= 0 {
		o.SubscriberBuffer = 1024
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// LifecycleEvent is a session lifecycle change (WatchSessions).
type LifecycleEvent struct {
	Type       macpv1.SessionLifecycleEvent_EventType
	Session    *macpv1.SessionMetadata
	ObservedMs int64
}

// Runtime owns all sessions. Create it with New, start it with Start, stop
// it with Close.
type Runtime struct {
	opts     Options
	store    store.Store
	modes    atomic.Pointer[mode.Registry]
	regMu    sync.Mutex            // serializes registry changes; guards retired
	retired  map[string]mode.Entry // unregistered modes that stored sessions may still need
	policies *policyRegistry       // policies.go
	// polMu serializes policy registry changes; guards retiredPolicies
	// (unregistered policies, kept so their ids stay immutable).
	polMu           sync.Mutex
	retiredPolicies map[string]registeredPolicy
	log             *slog.Logger

	mu          sync.RWMutex
	sessions    map[string]*owner
	openBy      map[string]int    // OPEN sessions per initiator (durable or in flight)
	openTotal   int               // the sum of openBy (metrics)
	quarantined map[string]string // session id -> why its history cannot be used

	commits chan *commitReq
	timers  *timerLoop
	stop    chan struct{}
	wg      sync.WaitGroup
	closing atomic.Bool
	// enqMu makes "check closing, then queue" atomic with respect to
	// Close, so no request is queued after the committer drained the queue
	// (its caller would wait forever).
	enqMu sync.RWMutex

	// Signals carries every accepted ambient Signal/Progress envelope.
	Signals *Hub[*macpv1.Envelope]
	// Lifecycle carries CREATED/RESOLVED/EXPIRED events after they are
	// durable, to Hub subscribers and coalescing watchers (watch.go).
	Lifecycle *LifecycleFeed
	// Registry carries mode-registry change hints.
	Registry *Hub[int64]
	// PolicyChanges carries policy-registry change hints (WatchPolicies).
	PolicyChanges *Hub[int64]

	rates *senderRates // per-sender rate limits (ratelimit.go)
	// streams is the budget of stream buffers (streambudget.go).
	streams *StreamBudget
	// deadlines bounds commit waits (Options.CommitTimeout; deadline.go);
	// nil without a timeout.
	deadlines *deadlines

	shared atomic.Bool // the store is shared with other nodes (cluster.go)

	metrics   *Metrics     // nil: none (metrics.go)
	followers atomic.Int64 // registered followers, all sessions (metrics)
}

// owner is the single owner of one session. mu serializes decisions; the
// committer never takes mu.
type owner struct {
	id        string
	initiator string // immutable
	mu        sync.Mutex
	sess      *session.Session // nil only while the owner is being created
	// epoch increments each time the session is rebuilt from the store
	// after a failed append; guarded by mu.
	epoch  uint64
	broken atomic.Uint64 // epoch+1 of a failed append, 0 if none

	durableMu  sync.Mutex
	durableSeq uint64
	pending    int           // commit requests queued and not yet answered
	durableCh  chan struct{} // closed and replaced when durableSeq or pending changes
	followers  int           // registered followers (follow.go); guarded by durableMu
	tail       followTail    // recent durable records, shared by the followers (follow.go)
}

// durable returns the sequence number of the session's last durable record.
func (o *owner) durable() uint64 {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	return o.durableSeq
}

// answered records that one of o's commit requests was answered; seq > 0
// is the sequence number it made durable. Waiters are woken.
func (o *owner) answered(seq uint64) {
	o.durableMu.Lock()
	if seq > 0 {
		o.durableSeq = seq
	}
	o.pending--
	close(o.durableCh)
	o.durableCh = make(chan struct{})
	o.durableMu.Unlock()
}

// waitIdle waits until none of o's commit requests is in flight. The
// caller holds o.mu, so no new request can be queued meanwhile; the
// committer never takes o.mu, so this cannot deadlock.
func (o *owner) waitIdle(ctx context.Context) error {
	for {
		o.durableMu.Lock()
		n, ch := o.pending, o.durableCh
		o.durableMu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// errLost answers a durability barrier whose session lost an earlier
// record (its append failed).
var errLost = errors.New("runtime: an earlier record of the session could not be stored")

// expiryRetry is how soon a deadline is retried when its expiry could not
// be stored (or the session could not be rebuilt to write it).
const expiryRetry = 250 * time.Millisecond

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
	doomed bool // committer only: left out of the append (see commitLoop)
	done   chan error
}

// New builds a Runtime over st with the given modes. policies are the
// built-in policies (policy.default is always one); RegisterPolicy adds
// others (policies.go).
func New(st store.Store, modes *mode.Registry, policies policy.Lookup, opts Options) *Runtime {
	opts.ensureDefaults()
	r := &Runtime{
		opts:            opts,
		store:           st,
		policies:        newPolicyRegistry(policies),
		retiredPolicies: make(map[string]registeredPolicy),
		PolicyChanges:   NewHub[int64](16),
		log:             opts.Logger,
		sessions:        make(map[string]*owner),
		quarantined:     make(map[string]string),
		retired:         make(map[string]mode.Entry),
		openBy:          make(map[string]int),
		commits:         make(chan *commitReq, 4096),
		stop:            make(chan struct{}),
		Signals:         NewBoundedHub(opts.SubscriberBuffer, signalWatchBytes, signalCost),
		Lifecycle:       NewLifecycleFeed(opts.SubscriberBuffer, opts.MaxWatchPending),
		Registry:        NewHub[int64](16),
		rates:           newSenderRates(opts),
		streams:         NewStreamBudget(opts.StreamBuffers, opts.Now),
		metrics:         opts.Metrics,
	}
	if opts.Metrics != nil {
		opts.Metrics.rt.Store(r)
	}
	r.modes.Store(modes)
	r.timers = newTimerLoop(opts.Now, r.expireByTimer)
	if opts.CommitTimeout > 0 {
		r.deadlines = newDeadlines(opts.CommitTimeout)
	}
	return r
}

// Start recovers stored sessions and starts the background loops.
func (r *Runtime) Start(ctx context.Context) error {
	if err := r.recover(ctx); err != nil {
		return err
	}
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.commitLoop() }()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.housekeeping() }()
	go func() { defer r.wg.Done(); r.timers.run(r.stop) }()
	if r.deadlines != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.deadlines.run(r.stop) }()
	}
	return nil
}

// Close stops the loops after the append in progress finishes; requests
// still queued are then answered with an error (the committer may first
// write some of them). It does not close the store.
func (r *Runtime) Close() {
	r.enqMu.Lock()
	already := r.closing.Swap(true)
	r.enqMu.Unlock()
	if already {
		return
	}
	close(r.stop)
	r.wg.Wait()
}

// Modes returns the current mode registry.
func (r *Runtime) Modes() *mode.Registry { return r.modes.Load() }

// SetModes swaps the mode registry and notifies registry watchers.
func (r *Runtime) SetModes(reg *mode.Registry) {
	r.modes.Store(reg)
	r.Registry.Publish(r.nowMs())
}

func (r *Runtime) nowMs() int64 { return r.opts.Now().UnixMilli() }

// Limits returns the admission limits.
func (r *Runtime) Limits() session.Limits { return r.opts.Limits }

func (r *Runtime) deps() session.Deps {
	return session.Deps{Modes: r.modes.Load(), Policies: r.policies, Limits: r.opts.Limits}
}

// replay folds a session's stored history through the core. records is
// the history's expected length when known (0 if not): it sizes the
// session's dedup set up front (session.Reserve).
func (r *Runtime) replay(ctx context.Context, id string, records uint64) (*session.Session, error) {
	var s *session.Session
	err := r.store.Read(ctx, id, 1, func(rec session.Record) error {
		if s == nil {
			var err error
			if s, err = session.Restore(rec, replayModes{r}); err == nil && records > 1 {
				s.Reserve(int(min(records, 1<<30)))
			}
			return err
		}
		return s.Apply(rec, r.opts.Limits)
	})
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, store.ErrNotFound
	}
	return s, nil
}

// commitLoop groups queued commit requests into store appends. With a
// store.Pipeliner it starts each append and hands it to completeLoop
// without waiting for its sync, so the next group is validated and queued
// while the previous one syncs (at most maxInFlight groups at once);
// completeLoop answers the groups strictly in order, each only after its
// sync. Otherwise each append runs to completion here.
func (r *Runtime) commitLoop() {
	completions := make(chan inFlight, maxInFlight)
	finished := make(chan struct{})
	go func() { defer close(finished); r.completeLoop(completions) }()
	defer func() { close(completions); <-finished }()
	pipe, _ := r.store.(store.Pipeliner)
	var recs []session.Record
	for {
		var first *commitReq
		select {
		case first = <-r.commits:
		case <-r.stop:
			// Drain what is queued so no waiter hangs; the groups in flight
			// are answered first (completeLoop, in order).
			var rest []*commitReq
			for {
				select {
				case req := <-r.commits:
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
		batch := make([]*commitReq, 1, min(r.opts.MaxCommitBatch, 1+len(r.commits)))
		batch[0] = first
	fill:
		for len(batch) < r.opts.MaxCommitBatch {
			select {
			case req := <-r.commits:
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
		if r.metrics != nil && len(recs) > 0 {
			f.start = time.Now()
		}
		switch {
		case len(recs) == 0:
		case pipe != nil:
			f.wait, f.err = pipe.AppendAsync(context.Background(), recs)
		default:
			f.err = r.store.Append(context.Background(), recs)
			if r.metrics != nil {
				f.took = time.Since(f.start)
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

// maxInFlight bounds the groups started but not yet answered.
const maxInFlight = 4

// inFlight is a group of commit requests whose append was started.
type inFlight struct {
	batch []*commitReq
	wait  func() error // nil: the append finished (err is its result)
	err   error
	// closed: the runtime stopped before these requests were appended.
	closed bool
	// For Metrics: the requests and records in the append, when it
	// started (set only with metrics) and, without wait, how long it took.
	reqs, recs int
	start      time.Time
	took       time.Duration
}

// completeLoop answers started groups in the order they were started,
// each after its append is durable (or failed).
func (r *Runtime) completeLoop(completions <-chan inFlight) {
	for f := range completions {
		err := f.err
		if err == nil && f.wait != nil {
			err = f.wait()
		}
		if err != nil && !f.closed {
			r.log.Error("store append failed", "requests", len(f.batch), "err", err)
		}
		if r.metrics != nil && f.recs > 0 && !f.closed {
			r.metrics.group(&f, err)
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
				r.completed(req)
			}
			req.done <- rerr
		}
	}
}

// completed runs after req's records are durable, in commit order: the
// durable sequence advances, a session that ended releases its initiator's
// slot, then lifecycle events are published.
func (r *Runtime) completed(req *commitReq) {
	req.o.answeredWith(req.recs)
	if req.closes {
		r.closedOpen(req.o)
	}
	for _, ev := range req.events {
		r.Lifecycle.Publish(ev)
	}
}

// enqueue queues records for durable append; the caller holds o.mu and has
// already applied recs to o.sess. With no records it returns a durability
// barrier if some of the session's records are still in flight, so that an
// answer decided on that state (a duplicate, a rejection, an idempotent
// cancel) is given only once the state it saw is durable.
func (r *Runtime) enqueue(o *owner, recs []session.Record, events []LifecycleEvent, closes bool) chan error {
	done := make(chan error, 1)
	if len(recs) == 0 && o.durable() >= o.sess.Seq {
		done <- nil
		return done
	}
	r.enqMu.RLock()
	defer r.enqMu.RUnlock()
	if r.closing.Load() {
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
	r.commits <- &commitReq{o: o, epoch: o.epoch, recs: recs, events: events, closes: closes, done: done}
	return done
}

// heal rebuilds o.sess from the store after a failed append; caller holds
// o.mu. It first waits for the session's in-flight requests to be
// answered: they were decided on the failed state and are refused by the
// store's sequence check, and waiting keeps their (failed) answers from
// marking the rebuilt owner broken or slipping past a barrier.
func (r *Runtime) heal(ctx context.Context, o *owner) error {
	if o.broken.Load() != o.epoch+1 {
		return nil
	}
	if err := o.waitIdle(ctx); err != nil {
		return err
	}
	s, err := r.replay(ctx, o.id, o.sess.Seq)
	if err != nil {
		return err
	}
	o.sess = s
	o.epoch++
	o.broken.Store(0)
	o.durableMu.Lock()
	o.durableSeq = s.Seq
	o.durableMu.Unlock()
	r.healedShared(ctx, o) // cluster.go: records other nodes stored reach the followers
	if s.Status == session.Open {
		// The failed append may have been the expiry itself.
		r.timers.add(o.id, s.DeadlineMs)
	}
	r.log.Warn("session rebuilt from store after a failed append", "session_id", o.id, "seq", s.Seq)
	return nil
}

// lookup returns the owner of a session, or nil.
func (r *Runtime) lookup(id string) *owner {
	r.mu.RLock()
	o := r.sessions[id]
	r.mu.RUnlock()
	return o
}

// lockSession finds and locks a session's owner, healing it if a previous
// append failed. It returns nil if the session is unknown.
func (r *Runtime) lockSession(ctx context.Context, id string) (*owner, *coord.Error) {
	o, cerr := r.sessionOwner(ctx, id)
	if cerr != nil {
		return nil, cerr
	}
	o.mu.Lock()
	if o.sess == nil {
		o.mu.Unlock()
		return nil, coord.Errorf(coord.CodeSessionNotFound, "session %s not found", id)
	}
	if err := r.heal(ctx, o); err != nil {
		o.mu.Unlock()
		r.log.Error("rebuilding session failed", "session_id", id, "err", err)
		return nil, coord.Errorf(coord.CodeInternalError, "session %s is unavailable", id)
	}
	return o, nil
}

// Send admits one envelope from an authenticated identity and returns its
// Ack (RFC-MACP-0001 §7-8). The sender is always the identity's
// (RFC-MACP-0004 §3): a different self-asserted sender is overwritten.
func (r *Runtime) Send(ctx context.Context, id coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	if env == nil {
		return nackFor(nil, coord.Errorf(coord.CodeInvalidEnvelope, "envelope is required"), 0)
	}
	env.Sender = id.Sender
	if cerr := r.admit(ctx, id, env); cerr != nil { // ratelimit.go: sender's rate, ambient relations
		return nackFor(env, cerr, 0)
	}
	if err := session.CheckEnvelope(env, r.opts.Limits); err != nil {
		return nackFor(env, err, 0)
	}
	switch env.MessageType {
	case coord.TypeSignal, coord.TypeProgress:
		return r.sendAmbient(ctx, id, env)
	case coord.TypeSessionStart:
		return r.startSession(ctx, id, env)
	}
	return r.step(ctx, env)
}

// step offers a session-scoped envelope (sender bound, structure checked) to
// its session; with a shared store it is decided again when another node
// stored first (cluster.go).
func (r *Runtime) step(ctx context.Context, env *macpv1.Envelope) *macpv1.Ack {
	return r.retryShared(ctx, func() (*macpv1.Ack, bool) { return r.stepOnce(ctx, env) })
}

func (r *Runtime) stepOnce(ctx context.Context, env *macpv1.Envelope) (*macpv1.Ack, bool) {
	o, cerr := r.lockSession(ctx, env.SessionId)
	if cerr != nil {
		return nackFor(env, cerr, 0), false
	}
	if cerr := r.authorizeStep(o.sess, env); cerr != nil { // authz.go: members only, before dedup
		o.mu.Unlock()
		return nackFor(env, cerr, 0), false
	}
	now := r.nowMs()
	before, seen := o.sess.Status, o.sess.Seq
	out := o.sess.Step(env, now, r.opts.Limits)
	state := o.sess.Status
	closes := before == session.Open && state.Terminal()
	var events []LifecycleEvent
	if closes {
		events = append(events, r.terminalEvent(o.sess, now))
	}
	done := r.enqueue(o, out.Records, events, closes)
	o.mu.Unlock()
	if err := r.await(ctx, done, nil); err != nil {
		if r.sharedRetry(err) {
			return nil, true
		}
		if len(out.Records) == 0 {
			return nackFor(env, coord.Errorf(coord.CodeInternalError, "an earlier message of the session could not be stored; retry"), 0), false
		}
		return nackFor(env, coord.Errorf(coord.CodeInternalError, "the message could not be stored"), 0), false
	}
	if len(out.Records) == 0 && r.staleCopy(ctx, o, seen) { // cluster.go
		return nil, true
	}
	switch {
	case out.Duplicate:
		return &macpv1.Ack{Ok: true, Duplicate: true, MessageId: env.MessageId, SessionId: env.SessionId, AcceptedAtUnixMs: now, SessionState: state.Proto()}, false
	case out.Err != nil:
		return nackFor(env, out.Err, state.Proto()), false
	}
	return &macpv1.Ack{Ok: true, MessageId: env.MessageId, SessionId: env.SessionId, AcceptedAtUnixMs: now, SessionState: state.Proto()}, false
}

// await waits for a commit; if ctx ends first the commit still completes in
// the background, but the caller gets an error and must not ack. then, if
// not nil, runs with the commit's outcome either way (in the background if
// ctx ended first), so follow-ups do not depend on the caller's patience.
func (r *Runtime) await(ctx context.Context, done chan error, then func(error)) error {
	var expired <-chan struct{} // nil: no bound but ctx
	if r.deadlines != nil {
		expired = r.deadlines.after()
	}
	var err error
	select {
	case err := <-done:
		if then != nil {
			then(err)
		}
		return err
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = errCommitTimeout
	}
	if then != nil {
		go func() { then(<-done) }()
	}
	return err
}

// errCommitTimeout: a commit took longer than Options.CommitTimeout.
var errCommitTimeout = fmt.Errorf("runtime: the store did not confirm the write in time: %w", context.DeadlineExceeded)

func (r *Runtime) terminalEvent(s *session.Session, now int64) LifecycleEvent {
	t := macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED
	if s.Status == session.Resolved {
		t = macpv1.SessionLifecycleEvent_EVENT_TYPE_RESOLVED
	}
	return LifecycleEvent{Type: t, Session: s.Metadata(), ObservedMs: now}
}

// closedOpen updates the per-initiator OPEN count after a session ended.
func (r *Runtime) closedOpen(o *owner) {
	r.mu.Lock()
	if r.openBy[o.initiator] > 0 {
		r.openBy[o.initiator]--
		r.openTotal--
	}
	r.mu.Unlock()
}

func (r *Runtime) startSession(ctx context.Context, id coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	return r.retryShared(ctx, func() (*macpv1.Ack, bool) { return r.startSessionOnce(ctx, id, env) })
}

func (r *Runtime) startSessionOnce(ctx context.Context, id coord.Identity, env *macpv1.Envelope) (*macpv1.Ack, bool) {
	if id.Caps.CannotStartSessions {
		return nackFor(env, coord.Errorf(coord.CodeForbidden, "%s may not start sessions", id.Sender), 0), false
	}
	if !id.Caps.AllowsMode(env.Mode) {
		return nackFor(env, coord.Errorf(coord.CodeForbidden, "%s may not start %s sessions", id.Sender, env.Mode), 0), false
	}
	now := r.nowMs()
	// An existing session answers for itself: a resend of its SessionStart
	// is a duplicate, anything else SESSION_ALREADY_EXISTS.
	if _, cerr := r.sessionOwner(ctx, env.SessionId); cerr == nil {
		return r.step(ctx, env), false
	} else if cerr.Code != coord.CodeSessionNotFound {
		return nackFor(env, cerr, 0), false
	}
	s, rec, err := session.Start(env, now, r.deps())
	if err != nil {
		return nackFor(env, coord.AsError(err), 0), false
	}
	o := &owner{id: env.SessionId, initiator: id.Sender, sess: s, durableCh: make(chan struct{})}
	// o is not visible to anyone until it is in the map, so locking it
	// before r.mu cannot deadlock.
	o.mu.Lock()
	r.mu.Lock()
	if _, taken := r.sessions[env.SessionId]; taken {
		r.mu.Unlock()
		o.mu.Unlock()
		return r.step(ctx, env), false
	}
	limit := r.opts.MaxOpenSessionsPerInitiator
	if id.Caps.MaxOpenSessions > 0 {
		limit = id.Caps.MaxOpenSessions
	}
	if limit > 0 && r.openBy[id.Sender] >= limit {
		r.mu.Unlock()
		o.mu.Unlock()
		return nackFor(env, coord.Errorf(coord.CodeRateLimited, "%s already has %d open sessions", id.Sender, limit), 0), false
	}
	r.sessions[env.SessionId] = o
	r.openBy[id.Sender]++
	r.openTotal++
	r.mu.Unlock()
	// Arm the deadline now, whatever the caller does next; if the start is
	// not stored the timer finds no session and does nothing.
	r.timers.add(env.SessionId, s.DeadlineMs)
	ev := LifecycleEvent{Type: macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED, Session: s.Metadata(), ObservedMs: now}
	done := r.enqueue(o, []session.Record{rec}, []LifecycleEvent{ev}, false)
	o.mu.Unlock()
	if err := r.await(ctx, done, func(err error) {
		if err != nil {
			r.forget(o)
		}
	}); err != nil {
		if r.sharedRetry(err) {
			return nil, true
		}
		return nackFor(env, coord.Errorf(coord.CodeInternalError, "the session could not be stored"), 0), false
	}
	return &macpv1.Ack{Ok: true, MessageId: env.MessageId, SessionId: env.SessionId, AcceptedAtUnixMs: now, SessionState: macpv1.SessionState_SESSION_STATE_OPEN}, false
}

// forget removes a session whose SessionStart could not be stored, unless
// the store has it after all. Callers still holding o then see
// SESSION_NOT_FOUND (o.sess is nil), and the id is free again.
func (r *Runtime) forget(o *owner) {
	if _, err := r.store.LastSeq(context.Background(), o.id); err == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	r.mu.Lock()
	if r.sessions[o.id] == o {
		delete(r.sessions, o.id)
		if r.openBy[o.initiator] > 0 {
			r.openBy[o.initiator]--
			r.openTotal--
		}
	}
	r.mu.Unlock()
	o.sess = nil
}

func (r *Runtime) sendAmbient(_ context.Context, _ coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	if err := session.CheckAmbient(env); err != nil {
		return nackFor(env, err, 0)
	}
	now := r.nowMs()
	r.Signals.Publish(cloneEnvelope(env))
	return &macpv1.Ack{Ok: true, MessageId: env.MessageId, SessionId: env.SessionId, AcceptedAtUnixMs: now}
}

func cloneEnvelope(e *macpv1.Envelope) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion: e.MacpVersion, Mode: e.Mode, MessageType: e.MessageType, MessageId: e.MessageId,
		SessionId: e.SessionId, Sender: e.Sender, TimestampUnixMs: e.TimestampUnixMs, Payload: e.Payload,
	}
}

// Cancel cancels a session on behalf of id (RFC-MACP-0001 §7.5): OPEN ->
// EXPIRED with a runtime-emitted SessionCancel record. Only the initiator
// may cancel (FORBIDDEN); unknown sessions are SESSION_NOT_FOUND; an
// already terminal session is answered ok with its state.
func (r *Runtime) Cancel(ctx context.Context, id coord.Identity, sessionID, reason string) (*macpv1.Ack, *coord.Error) {
	var cerr *coord.Error
	ack := r.retryShared(ctx, func() (ack *macpv1.Ack, retry bool) {
		ack, cerr, retry = r.cancelOnce(ctx, id, sessionID, reason)
		return ack, retry
	})
	return ack, cerr
}

func (r *Runtime) cancelOnce(ctx context.Context, id coord.Identity, sessionID, reason string) (*macpv1.Ack, *coord.Error, bool) {
	o, cerr := r.lockSession(ctx, sessionID)
	if cerr != nil {
		return nil, cerr, false
	}
	now := r.nowMs()
	before := o.sess.Status
	out := o.sess.Cancel(id.Sender, reason, uuid.NewString(), now)
	if out.Err != nil {
		o.mu.Unlock()
		return nil, out.Err, false
	}
	state := o.sess.Status
	closes := before == session.Open && state.Terminal()
	var events []LifecycleEvent
	if closes {
		events = append(events, r.terminalEvent(o.sess, now))
	}
	done := r.enqueue(o, out.Records, events, closes)
	o.mu.Unlock()
	if err := r.await(ctx, done, nil); err != nil {
		if r.sharedRetry(err) {
			return nil, nil, true
		}
		return &macpv1.Ack{Ok: false, SessionId: sessionID, Error: &macpv1.MACPError{Code: string(coord.CodeInternalError), Message: "the cancellation could not be stored", SessionId: sessionID}}, nil, false
	}
	ack := &macpv1.Ack{Ok: true, SessionId: sessionID, AcceptedAtUnixMs: now, SessionState: state.Proto()}
	if len(out.Records) > 0 && out.Records[0].Envelope != nil {
		ack.MessageId = out.Records[0].Envelope.MessageId
	}
	return ack, nil, false
}

// expireByTimer is called by the timer loop when a deadline passes. The
// expiry runs off the timer goroutine, so a session whose lock is held or
// that must first be rebuilt (waiting for its appends) does not delay
// other deadlines. Close waits for it.
func (r *Runtime) expireByTimer(id string) {
	r.wg.Add(1) // the timer loop is running, so the group is not at zero
	go func() {
		defer r.wg.Done()
		r.expire(id)
	}()
}

// expire writes the Expire record of a session whose deadline passed. If
// that cannot be done now (the session cannot be rebuilt, or the append
// fails) the deadline is retried: an OPEN session must not outlive its
// TTL just because nobody touches it (TTL-2).
func (r *Runtime) expire(id string) {
	o := r.lookup(id)
	if o == nil {
		return
	}
	o.mu.Lock()
	if o.sess == nil {
		o.mu.Unlock()
		return
	}
	if err := r.heal(context.Background(), o); err != nil {
		o.mu.Unlock()
		r.log.Error("rebuilding session for expiry failed", "session_id", id, "err", err)
		r.retryExpiry(id)
		return
	}
	now := r.nowMs()
	rec, ok := o.sess.ExpireIfDue(now)
	if !ok {
		o.mu.Unlock()
		return
	}
	done := r.enqueue(o, []session.Record{rec}, []LifecycleEvent{r.terminalEvent(o.sess, now)}, true)
	o.mu.Unlock()
	if err := <-done; err != nil {
		r.retryExpiry(id)
	}
}

func (r *Runtime) retryExpiry(id string) {
	if !r.closing.Load() {
		r.timers.add(id, r.opts.Now().Add(expiryRetry).UnixMilli())
	}
}

// visible reports whether id may read session s.
func visible(id coord.Identity, s *session.Session) bool {
	return id.Caps.IsObserver || s.MayObserve(id.Sender)
}

// readDurable locks the session once everything decided so far is durable
// and calls fn with it.
func (r *Runtime) readDurable(ctx context.Context, o *owner, fn func(*session.Session)) *coord.Error {
	for {
		o.mu.Lock()
		if o.sess == nil {
			o.mu.Unlock()
			return coord.Errorf(coord.CodeSessionNotFound, "session %s not found", o.id)
		}
		if err := r.heal(ctx, o); err != nil {
			o.mu.Unlock()
			return coord.Errorf(coord.CodeInternalError, "session %s is unavailable", o.id)
		}
		o.durableMu.Lock()
		durable, ch := o.durableSeq, o.durableCh
		o.durableMu.Unlock()
		if durable >= o.sess.Seq {
			fn(o.sess)
			o.mu.Unlock()
			return nil
		}
		o.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(50 * time.Millisecond): // re-check: an append may have failed
		case <-ctx.Done():
			return coord.Errorf(coord.CodeInternalError, "request cancelled")
		}
	}
}

// GetSession returns a session's durable metadata if id may see it
// (initiator, declared participant, observer).
func (r *Runtime) GetSession(ctx context.Context, id coord.Identity, sessionID string) (*macpv1.SessionMetadata, *coord.Error) {
	o := r.lookup(sessionID)
	if o == nil {
		// A terminal session on disk answers from its final metadata.
		if md, ok := r.storedMetadata(ctx, sessionID); ok {
			if !MayObserveMetadata(id, md) {
				return nil, coord.Errorf(coord.CodeForbidden, "%s may not read session %s", id.Sender, sessionID)
			}
			return md, nil
		}
		var cerr *coord.Error
		if o, cerr = r.sessionOwner(ctx, sessionID); cerr != nil {
			return nil, cerr
		}
	}
	var md *macpv1.SessionMetadata
	allowed := false
	if err := r.readDurable(ctx, o, func(s *session.Session) {
		if allowed = visible(id, s); allowed {
			md = s.Metadata()
		}
	}); err != nil {
		return nil, err
	}
	if !allowed {
		return nil, coord.Errorf(coord.CodeForbidden, "%s may not read session %s", id.Sender, sessionID)
	}
	return md, nil
}

// Inspect calls fn with the durable session under its lock, without
// authorization (for in-process tests and tools).
func (r *Runtime) Inspect(ctx context.Context, sessionID string, fn func(*session.Session)) *coord.Error {
	o, cerr := r.sessionOwner(ctx, sessionID)
	if cerr != nil {
		return cerr
	}
	return r.readDurable(ctx, o, fn)
}

// ListSessions returns the metadata of every session id may see, OPEN and
// terminal, sorted by start time then id.
func (r *Runtime) ListSessions(ctx context.Context, id coord.Identity) []*macpv1.SessionMetadata {
	// The store lists every durable session; resident sessions answer with
	// their live durable state, terminal ones on disk with their final
	// metadata, quarantined ones (to observers) with their id only.
	var infos []store.SessionInfo
	if err := r.store.List(ctx, func(info store.SessionInfo) error {
		infos = append(infos, info)
		return nil
	}); err != nil {
		r.log.Error("listing sessions failed", "err", err)
	}
	out := make([]*macpv1.SessionMetadata, 0, len(infos))
	for _, info := range infos {
		if _, q := r.quarantineReason(info.SessionID); q || info.Quarantined != "" {
			if id.Caps.IsObserver {
				out = append(out, &macpv1.SessionMetadata{SessionId: info.SessionID})
			}
			continue
		}
		o := r.lookup(info.SessionID)
		if o == nil && info.Final != nil {
			if MayObserveMetadata(id, info.Final) {
				out = append(out, info.Final)
			}
			continue
		}
		if o == nil {
			var cerr *coord.Error
			if o, cerr = r.sessionOwner(ctx, info.SessionID); cerr != nil {
				continue
			}
		}
		_ = r.readDurable(ctx, o, func(s *session.Session) {
			if visible(id, s) {
				out = append(out, s.Metadata())
			}
		})
	}
	slices.SortFunc(out, func(a, b *macpv1.SessionMetadata) int {
		if a.StartedAtUnixMs != b.StartedAtUnixMs {
			if a.StartedAtUnixMs < b.StartedAtUnixMs {
				return -1
			}
			return 1
		}
		if a.SessionId < b.SessionId {
			return -1
		}
		if a.SessionId > b.SessionId {
			return 1
		}
		return 0
	})
	return out
}

// MayObserveSession reports whether id may see the session's lifecycle.
func MayObserveMetadata(id coord.Identity, md *macpv1.SessionMetadata) bool {
	return id.Caps.IsObserver || md.Initiator == id.Sender || slices.Contains(md.Participants, id.Sender)
}

// Store returns the history store.
func (r *Runtime) Store() store.Store { return r.store }

// nackFor builds a failure Ack.
func nackFor(env *macpv1.Envelope, err *coord.Error, state macpv1.SessionState) *macpv1.Ack {
	ack := &macpv1.Ack{Ok: false, SessionState: state, Error: &macpv1.MACPError{Code: string(err.Code), Message: err.Message}}
	if env != nil {
		ack.MessageId, ack.SessionId = env.MessageId, env.SessionId
		ack.Error.MessageId, ack.Error.SessionId = env.MessageId, env.SessionId
	}
	if len(err.Reasons) > 0 {
		ack.Error.Details = reasonsJSON(err.Reasons)
	}
	return ack
}
