package runtime

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock"
	"github.com/macpd/macpd/internal/hub"
	"github.com/macpd/macpd/internal/limits"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/streambudget"
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
	// MaxCommitsInFlight bounds the groups handed to the store and not
	// yet answered (commit.go; 0 = 4, enough for a local disk whose syncs
	// coalesce). A replicated store whose appends take a network round
	// trip (natsstore) needs more to keep its pipeline full.
	MaxCommitsInFlight int
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
	// Clock is the source of "now" and of every timer a rule depends on:
	// TTL expiry, overdue sessions at recovery, the commit-wait bound,
	// the stream stall limit and the instant a stream opened (package
	// clock). nil = the wall clock, which production always uses; tests
	// pass a clocktest.Fake and advance it.
	Clock  clock.Clock
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
	// (package streambudget); zero fields take streambudget.Default's values.
	StreamBuffers streambudget.Options
	// Forwarder, if set, serves each session on its owner node (forward.go).
	Forwarder Forwarder
}

func (o *Options) ensureDefaults() {
	if o.Limits == (session.Limits{}) {
		o.Limits = session.DefaultLimits()
	}
	if o.MaxCommitBatch <= 0 {
		o.MaxCommitBatch = 256
	}
	if o.MaxCommitsInFlight <= 0 {
		o.MaxCommitsInFlight = defaultMaxInFlight
	}
	if o.SubscriberBuffer <= 0 {
		o.SubscriberBuffer = 1024
	}
	o.Clock = clock.OrReal(o.Clock)
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
	opts  Options
	store store.Store
	// modes and policies are the lookups the core resolves a SessionStart
	// against (New); replayModes is the one replay binds stored sessions
	// with (modes, or what modes' ReplayModes returns).
	modes       session.Modes
	replayModes session.Modes
	policies    policy.Lookup
	log         *slog.Logger

	mu          sync.RWMutex
	sessions    map[string]*owner
	openBy      map[string]int    // OPEN sessions per initiator (durable or in flight)
	openTotal   int               // the sum of openBy (metrics)
	quarantined map[string]string // session id -> why its history cannot be used

	commit  *committer // the group committer (commit.go)
	timers  *timerLoop
	stop    chan struct{}
	wg      sync.WaitGroup
	closing atomic.Bool

	// Signals carries every accepted ambient Signal/Progress envelope.
	Signals *hub.Hub[*macpv1.Envelope]
	// Lifecycle carries CREATED/RESOLVED/EXPIRED events after they are
	// durable, to Hub subscribers and coalescing watchers (watch.go).
	Lifecycle *LifecycleFeed

	rates *limits.SenderRates // per-sender rate limits (ratelimit.go)
	// streams is the budget of stream buffers (package streambudget).
	streams *streambudget.Budget
	// deadlines bounds commit waits (Options.CommitTimeout; deadline.go);
	// nil without a timeout.
	deadlines *deadlines

	shared atomic.Bool // the store is shared with other nodes (cluster.go)

	metrics   *Metrics     // nil: none (metrics.go)
	followers atomic.Int64 // registered followers, all sessions (metrics)
}

// ReplayModer is the optional capability of a mode lookup given to New
// that also knows modes no longer offered to new sessions but still bound
// by stored ones (registry.Registry: unregistered extension modes).
type ReplayModer interface {
	ReplayModes() session.Modes
}

// New builds a Runtime over st. modes and policies are the lookups the
// core resolves a SessionStart's mode and policy_version against (a
// *mode.Registry and policy.DefaultOnly{}, or a registry.Registry for
// both: package registry owns registration, its storage and reload; nil
// policies = policy.DefaultOnly{}). Stored sessions replay with modes, or
// with modes.ReplayModes() when modes is a ReplayModer.
func New(st store.Store, modes session.Modes, policies policy.Lookup, opts Options) *Runtime {
	opts.ensureDefaults()
	if policies == nil {
		policies = policy.DefaultOnly{}
	}
	if opts.StreamBuffers.Logger == nil {
		opts.StreamBuffers.Logger = opts.Logger
	}
	r := &Runtime{
		opts:        opts,
		store:       st,
		modes:       modes,
		replayModes: modes,
		policies:    policies,
		log:         opts.Logger,
		sessions:    make(map[string]*owner),
		quarantined: make(map[string]string),
		openBy:      make(map[string]int),
		stop:        make(chan struct{}),
		Signals:     hub.NewBounded(opts.SubscriberBuffer, signalWatchBytes, signalCost),
		Lifecycle:   NewLifecycleFeed(opts.SubscriberBuffer, opts.MaxWatchPending),
		rates:       limits.NewSenderRates(opts.Rates.SessionStartsPerMinute, opts.Rates.MessagesPerMinute, opts.Clock.Now, opts.Logger),
		streams:     streambudget.New(opts.StreamBuffers, opts.Clock),
		metrics:     opts.Metrics,
	}
	if rm, ok := modes.(ReplayModer); ok {
		r.replayModes = rm.ReplayModes()
	}
	if opts.Metrics != nil {
		opts.Metrics.rt.Store(r)
	}
	r.commit = newCommitter(st, opts.MaxCommitBatch, opts.MaxCommitsInFlight, opts.Logger, opts.Metrics, opts.Clock, r.completed)
	r.timers = newTimerLoop(opts.Clock, r.expireByTimer)
	if opts.CommitTimeout > 0 {
		r.deadlines = newDeadlines(opts.CommitTimeout, opts.Clock)
	}
	return r
}

// Start recovers stored sessions and starts the background loops.
func (r *Runtime) Start(ctx context.Context) error {
	if err := r.recover(ctx); err != nil {
		return err
	}
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.commit.run() }()
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
	if r.closing.Swap(true) {
		return
	}
	r.commit.stop()
	close(r.stop)
	r.wg.Wait()
}

// ReplayModes returns the mode lookup stored sessions replay with (New).
func (r *Runtime) ReplayModes() session.Modes { return r.replayModes }

func (r *Runtime) nowMs() int64 { return r.opts.Clock.Now().UnixMilli() }

// Clock returns the runtime's clock (Options.Clock): transports read the
// instant a stream opened and arm their stall timers with it.
func (r *Runtime) Clock() clock.Clock { return r.opts.Clock }

// Limits returns the admission limits.
func (r *Runtime) Limits() session.Limits { return r.opts.Limits }

func (r *Runtime) deps() session.Deps {
	return session.Deps{Modes: r.modes, Policies: r.policies, Limits: r.opts.Limits}
}

// replay folds a session's stored history through the core (package
// replay). records is the history's expected length when known (0 if
// not): it sizes the session's dedup set up front (session.Reserve).
func (r *Runtime) replay(ctx context.Context, id string, records uint64) (*session.Session, error) {
	s, err := replay.Stored(ctx, r.store, id, r.replayOptions(records))
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, store.ErrNotFound
	}
	return s, nil
}

// replayOptions are the lookups and limits stored sessions replay with.
func (r *Runtime) replayOptions(records uint64) replay.Options {
	return replay.Options{Modes: r.replayModes, Limits: r.opts.Limits, Records: records}
}

// Store returns the history store.
func (r *Runtime) Store() store.Store { return r.store }
