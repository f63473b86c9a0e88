package streambudget

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpd/macpd/internal/clock"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/limits"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// Stream buffers (docs/security.md "Stream buffers"): every stream that
// delivers session records (StreamSession, WatchSignals, SSE and WebSocket
// followers) holds the records it has read but the client has not yet
// taken in a Window. A window is bounded four times:
//
//   - per stream, by Options.PerStream bytes (a window that
//     has nothing pending may always take one record, whatever its size,
//     so a record larger than the bound is still delivered);
//   - per identity, by Options.PerIdentity bytes shared by
//     all windows of the identity that follows (Bind);
//   - per session, by Options.PerSession bytes shared by all
//     windows that follow the session;
//   - globally, by Options.Total bytes shared by all windows.
//
// An identity (a session) that holds nothing may always take one record,
// so no share can lock its owner out. Of the global budget, Headroom bytes
// are only for windows that hold nothing: however the others filled it,
// a stream that holds nothing can take one record (when nothing at all is
// charged, one record is always allowed). So no identity and no session
// can hold more than its share (plus one record), and a stream that is
// read keeps moving while others do not read.
//
// Waiting is fair: Acquire calls that wait are granted in the order they
// started waiting, each as soon as its bounds allow it; one that waits for
// the global budget is not overtaken by a later one (of its class: holding
// something, or holding nothing and using the headroom), while one that
// waits on its own stream's, identity's or session's bound does not hold
// up the others.
//
// A record is charged (Cost) before it is read from the store or
// handed to the consumer, and released by the consumer once the transport
// has really taken it (for gRPC: once later data has pushed it out of the
// HTTP/2 send queue, see internal/server/stream.go). So replay is paced by
// what the client reads: a client that reads nothing makes its stream
// wait, never queue. Close returns everything at once: transports close a
// window when its stream and everything it handed to the transport are
// done, or when its connection ends (then nothing it handed over is
// written any more).
//
// A window that holds records and has released nothing for
// Options.StallTimeout is stalled: Acquire fails with
// ErrStalled (RATE_LIMITED), and the transport ends the stream with it; the
// client resumes with the cursor it last received (docs/resume.md). A
// window that holds nothing and only waits for the budget (other streams
// hold it) is not stalled: it waits.

// Default are the documented defaults. PerIdentity and
// PerSession default to Total/8 and Total/4 (32 and 64 MiB of the default
// budget), Headroom to Total/8.
var Default = Options{
	PerStream:    1 << 20,
	Total:        256 << 20,
	PerIdentity:  32 << 20,
	PerSession:   64 << 20,
	Headroom:     32 << 20,
	StallTimeout: 30 * time.Second,
}

// Options tune the stream buffers (MACP_STREAM_BUFFER_BYTES,
// MACP_STREAM_BUFFER_BUDGET_BYTES, MACP_STREAM_BUFFER_IDENTITY_BYTES,
// MACP_STREAM_BUFFER_SESSION_BYTES, MACP_STREAM_STALL_TIMEOUT_MS).
type Options struct {
	// PerStream bounds the bytes (Cost) one stream holds.
	PerStream int64
	// Total bounds the bytes all streams hold together.
	Total int64
	// PerIdentity bounds the bytes the streams of one identity hold
	// together; 0 = Total/8.
	PerIdentity int64
	// PerSession bounds the bytes the streams of one session hold
	// together; 0 = Total/4.
	PerSession int64
	// Headroom is the part of Total only windows that hold nothing may
	// take; 0 = Total/8.
	Headroom int64
	// StallTimeout ends a stream that holds records and took none for
	// this long; 0 never ends one.
	StallTimeout time.Duration
	// Logger receives the rate-limited line about throttled identities;
	// nil = none.
	Logger *slog.Logger
}

// CostOverhead is what every record counts besides its encoding:
// the decoded structs and the queue entry.
const CostOverhead = 512

// Cost is what a record counts against the stream buffers: twice
// its envelope's encoded size (the decoded record and its wire encoding
// in the transport's send queue coexist) plus CostOverhead. The
// same record always costs the same, so the consumer can release what the
// follower charged.
func Cost(rec session.Record) int64 {
	if rec.Envelope == nil {
		return CostOverhead
	}
	return 2*int64(proto.Size(rec.Envelope)) + CostOverhead
}

// throttleLogEvery is the least time between two log lines about
// throttled identities.
const throttleLogEvery = 10 * time.Second

// Budget is the global budget of stream buffers.
type Budget struct {
	opts  Options
	clock clock.Clock

	mu         sync.Mutex
	used       int64
	identities map[string]*holder // identities with open windows
	sessions   map[string]*holder // sessions with open windows
	queue      []*waiter          // waiting Acquire calls, in arrival order
	// barHeld, barEmpty: a queued waiter of the class (holding something,
	// holding nothing) waits for the global budget; later ones of the
	// class wait behind it (set by grantLocked).
	barHeld, barEmpty bool
	lastLog           time.Time // last throttle line
	unlogged          int64     // throttles since the last line
	stallLog          *limits.LogEvery

	usedGauge atomic.Int64 // used, for metrics without the lock
	windows   atomic.Int64
	stalled   atomic.Int64 // windows that failed with ErrStalled
	waits     atomic.Int64 // Acquire calls that had to wait
	throttled atomic.Int64 // Acquire calls that waited on their identity's or session's share
}

// holder is what the windows of one identity or one session hold.
type holder struct {
	used    int64
	windows int
	waiting int // queued waiters of its windows
}

// waiter is one waiting Acquire call.
type waiter struct {
	w           *Window
	n           int64
	ready       chan struct{} // closed when granted, or when w closed
	granted     bool
	ident, sess *holder // the holders whose waiting count it is in
}

// New returns a budget; zero fields take Default's
// values or fractions of Total (StallTimeout < 0 disables the stall
// limit). c times the stall limit; nil = the wall clock.
func New(o Options, c clock.Clock) *Budget {
	if o.PerStream <= 0 {
		o.PerStream = Default.PerStream
	}
	if o.Total <= 0 {
		o.Total = Default.Total
	}
	if o.PerIdentity <= 0 {
		o.PerIdentity = max(o.Total/8, 1)
	}
	if o.PerSession <= 0 {
		o.PerSession = max(o.Total/4, 1)
	}
	if o.Headroom <= 0 {
		o.Headroom = o.Total / 8
	}
	o.Headroom = min(o.Headroom, o.Total)
	if o.StallTimeout == 0 {
		o.StallTimeout = Default.StallTimeout
	}
	return &Budget{
		opts: o, clock: clock.OrReal(c),
		identities: map[string]*holder{}, sessions: map[string]*holder{},
		stallLog: limits.NewLogEvery(o.Logger, throttleLogEvery),
	}
}

// Options returns the budget's settings.
func (b *Budget) Options() Options { return b.opts }

// Stats are the budget's figures (metrics).
type Stats struct {
	Used, Total int64 // bytes held by all windows, and the budget
	Windows     int64 // open windows
	Stalled     int64 // windows ended as stalled, since start
	Waits       int64 // acquisitions that had to wait, since start
	// Throttled counts acquisitions that waited because their identity or
	// session held its share, since start.
	Throttled int64
}

// Stats returns the current figures.
func (b *Budget) Stats() Stats {
	return Stats{
		Used: b.usedGauge.Load(), Total: b.opts.Total, Windows: b.windows.Load(),
		Stalled: b.stalled.Load(), Waits: b.waits.Load(), Throttled: b.throttled.Load(),
	}
}

// Holder is what one identity or session holds (TopHolders).
type Holder struct {
	Name    string
	Bytes   int64
	Windows int
}

// TopHolders returns the k identities and the k sessions that hold the
// most, largest first (metrics).
func (b *Budget) TopHolders(k int) (identities, sessions []Holder) {
	top := func(m map[string]*holder) []Holder {
		out := make([]Holder, 0, min(len(m), k+1))
		for name, h := range m {
			if h.used == 0 {
				continue
			}
			out = append(out, Holder{Name: name, Bytes: h.used, Windows: h.windows})
			slices.SortFunc(out, func(a, b Holder) int {
				if a.Bytes != b.Bytes {
					return cmp.Compare(b.Bytes, a.Bytes)
				}
				return strings.Compare(a.Name, b.Name)
			})
			if len(out) > k {
				out = out[:k]
			}
		}
		return out
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return top(b.identities), top(b.sessions)
}

// Held returns what the windows of identity and of sessionID hold now.
func (b *Budget) Held(identity, sessionID string) (byIdentity, bySession int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.identities[identity]; h != nil {
		byIdentity = h.used
	}
	if h := b.sessions[sessionID]; h != nil {
		bySession = h.used
	}
	return byIdentity, bySession
}

// Window is one stream's share of the budget. It counts what the
// stream holds in two parts: pending (charged, not yet handed to the
// transport) and sent (handed to the transport, which may still hold it
// until the client reads). Acquire is called by one goroutine (the
// follower); the others by any; Close once, at the end.
type Window struct {
	b *Budget
	// Guarded by b.mu.
	pending, sent    int64
	lastProgress     time.Time // last Sent or ReleaseSent
	closed           bool
	identity, sessID string
	ident, sess      *holder // nil until bound
	queued           *waiter // its Acquire's place in the queue, if any
}

// NewWindow opens a stream's window. It counts against the identity's
// and the session's shares once bound (Bind; Follow binds its window).
func (b *Budget) NewWindow() *Window {
	b.windows.Add(1)
	return &Window{b: b, lastProgress: b.clock.Now()}
}

// Bind counts the window against the shares of identity and sessionID
// from now on, moving what it holds; an empty argument leaves that part
// as it is.
func (w *Window) Bind(identity, sessionID string) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.closed {
		return
	}
	held := w.pending + w.sent
	wt := w.queued
	if wt != nil { // re-counted under the new holders below
		b.unqueueLocked(wt)
	}
	if identity != "" && (w.ident == nil || identity != w.identity) {
		w.ident = b.rebind(b.identities, w.ident, w.identity, identity, held)
		w.identity = identity
	}
	if sessionID != "" && (w.sess == nil || sessionID != w.sessID) {
		w.sess = b.rebind(b.sessions, w.sess, w.sessID, sessionID, held)
		w.sessID = sessionID
	}
	if wt != nil {
		b.queueLocked(wt)
	}
	if held > 0 && len(b.queue) > 0 {
		b.grantLocked() // the old holder holds less now
	}
}

// rebind moves a window holding held from old (named oldName, or nil) to
// the holder named name in m, and returns the latter.
func (b *Budget) rebind(m map[string]*holder, old *holder, oldName, name string, held int64) *holder {
	detach(m, old, oldName, held)
	h := m[name]
	if h == nil {
		h = &holder{}
		m[name] = h
	}
	h.used += held
	h.windows++
	return h
}

// detach takes a window holding held off h (named name in m, or nil).
func detach(m map[string]*holder, h *holder, name string, held int64) {
	if h == nil {
		return
	}
	h.used -= held
	h.windows--
	if h.windows <= 0 {
		delete(m, name)
	}
}

// errStalled is the error that ends a stalled stream (see above); the
// stall is logged (at most one line per throttleLogEvery).
// The caller does not hold b.mu.
func errStalled(w *Window, held int64) *coord.Error {
	w.b.mu.Lock()
	identity, sessID := w.identity, w.sessID
	w.b.mu.Unlock()
	w.b.stallLog.Warn("stream-stalled", "stream buffers: a stream was ended because its client took nothing (MACP_STREAM_STALL_TIMEOUT_MS)",
		"identity", identity, "session", sessID, "held_bytes", held, "stall_timeout", w.b.opts.StallTimeout)
	return coord.Errorf(coord.CodeRateLimited,
		"stream stalled: the client took nothing for %v while %d bytes were waiting for it; resume from the last sequence number received",
		w.b.opts.StallTimeout, held)
}

// What checkLocked found.
const (
	fits         = iota
	waitOwn      // the stream's own bound
	waitShare    // its identity's or session's share
	waitGlobal   // the global budget
	windowClosed // the window is closed
)

// checkLocked says whether n may be charged to w now; the caller holds
// b.mu. The per-stream bound counts pending and sent, but a stream with
// nothing pending may always take one more record (what it sent may sit
// in the transport until its client reads, and must not block it
// forever); an identity or session that holds nothing may always take one
// record; the headroom is for windows that hold nothing.
func (w *Window) checkLocked(n int64) int {
	b := w.b
	if w.closed {
		return windowClosed
	}
	held := w.pending + w.sent
	if w.pending > 0 && held+n > b.opts.PerStream {
		return waitOwn
	}
	if h := w.ident; h != nil && h.used > 0 && h.used+n > b.opts.PerIdentity {
		return waitShare
	}
	if h := w.sess; h != nil && h.used > 0 && h.used+n > b.opts.PerSession {
		return waitShare
	}
	limit := b.opts.Total - b.opts.Headroom
	if held == 0 {
		limit = b.opts.Total
	}
	if b.used > 0 && b.used+n > limit {
		return waitGlobal
	}
	return fits
}

// barredLocked says whether w waits behind a queued waiter of its class.
func (w *Window) barredLocked() bool {
	if w.pending+w.sent == 0 {
		return w.b.barEmpty
	}
	return w.b.barHeld
}

// chargeLocked changes what w holds by n (pending or sent was changed by
// the caller, who holds b.mu). A decrease lets waiters go on.
func (w *Window) chargeLocked(n int64) {
	b := w.b
	b.used += n
	b.usedGauge.Store(b.used)
	if w.ident != nil {
		w.ident.used += n
	}
	if w.sess != nil {
		w.sess.used += n
	}
	if n < 0 && b.affectedLocked(w) {
		b.grantLocked()
	}
}

// affectedLocked says whether a release by w may let a queued waiter go
// on: one waits for the global budget (a barrier is set), or on w's own
// stream, identity or session. Others wait on bounds w's release does not
// change, so the queue is not scanned for them (a release costs O(1) while
// one identity's hundreds of streams wait on its share).
func (b *Budget) affectedLocked(w *Window) bool {
	return len(b.queue) > 0 && (b.barHeld || b.barEmpty || w.queued != nil ||
		(w.ident != nil && w.ident.waiting > 0) || (w.sess != nil && w.sess.waiting > 0))
}

// queueLocked counts wt as waiting (its window and holders); unqueueLocked
// undoes it.
func (b *Budget) queueLocked(wt *waiter) {
	wt.w.queued = wt
	wt.ident, wt.sess = wt.w.ident, wt.w.sess
	if wt.ident != nil {
		wt.ident.waiting++
	}
	if wt.sess != nil {
		wt.sess.waiting++
	}
}

func (b *Budget) unqueueLocked(wt *waiter) {
	if wt.w.queued == wt {
		wt.w.queued = nil
	}
	if wt.ident != nil {
		wt.ident.waiting--
	}
	if wt.sess != nil {
		wt.sess.waiting--
	}
	wt.ident, wt.sess = nil, nil
}

// grantLocked grants the queued waiters whose bounds allow it, in order,
// drops those whose window closed, and sets the barriers; the caller
// holds b.mu.
func (b *Budget) grantLocked() {
	b.barHeld, b.barEmpty = false, false
	kept := b.queue[:0]
	for _, wt := range b.queue {
		w := wt.w
		empty := w.pending+w.sent == 0
		barred := b.barHeld
		if empty {
			barred = b.barEmpty
		}
		if !barred {
			switch w.checkLocked(wt.n) {
			case fits:
				b.unqueueLocked(wt)
				w.pending += wt.n
				wt.granted = true
				close(wt.ready)
				w.chargeLocked(wt.n) // an increase: no recursion
				continue
			case windowClosed:
				b.unqueueLocked(wt)
				close(wt.ready)
				continue
			case waitGlobal:
				if empty {
					b.barEmpty = true
				} else {
					b.barHeld = true
				}
			}
		} else if w.closed {
			b.unqueueLocked(wt)
			close(wt.ready)
			continue
		}
		kept = append(kept, wt)
	}
	clear(b.queue[len(kept):])
	b.queue = kept
}

// removeLocked takes wt out of the queue (it gave up).
func (b *Budget) removeLocked(wt *waiter) {
	if i := slices.Index(b.queue, wt); i >= 0 {
		b.unqueueLocked(wt)
		b.queue = slices.Delete(b.queue, i, i+1)
		b.grantLocked() // the barriers may have been its
	}
}

// tryLocked takes n if the bounds allow it and no earlier waiter of its
// class waits for the global budget; the caller holds b.mu.
func (w *Window) tryLocked(n int64) (int, bool) {
	c := w.checkLocked(n)
	if c != fits {
		return c, false
	}
	if len(w.b.queue) > 0 && w.barredLocked() {
		return waitGlobal, false
	}
	w.pending += n
	w.chargeLocked(n)
	return fits, true
}

// TryAcquire takes n bytes (pending) if the bounds allow it now.
func (w *Window) TryAcquire(n int64) bool {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	_, ok := w.tryLocked(n)
	return ok
}

// throttledLocked counts (and now and then logs) an Acquire that waits on
// its identity's or session's share; the caller holds b.mu.
func (w *Window) throttledLocked() {
	b := w.b
	b.throttled.Add(1)
	b.unlogged++
	if b.opts.Logger == nil {
		return
	}
	now := b.clock.Now()
	if !b.lastLog.IsZero() && now.Sub(b.lastLog) < throttleLogEvery {
		return
	}
	var byID, bySess int64
	if w.ident != nil {
		byID = w.ident.used
	}
	if w.sess != nil {
		bySess = w.sess.used
	}
	b.opts.Logger.Warn("stream buffers: a stream waits because its identity or session holds its share (a client that does not read its streams)",
		"identity", w.identity, "identity_bytes", byID, "identity_share", b.opts.PerIdentity,
		"session", w.sessID, "session_bytes", bySess, "session_share", b.opts.PerSession,
		"throttled_since_last_line", b.unlogged)
	b.lastLog, b.unlogged = now, 0
}

// Acquire takes n bytes (pending), waiting while the bounds do not allow
// it. It fails with ctx's error, or with a RATE_LIMITED *coord.Error when
// the stream is stalled: it holds something and neither sent nor released
// anything for StallTimeout while this call waited.
func (w *Window) Acquire(ctx context.Context, n int64) error {
	b := w.b
	b.mu.Lock()
	why, ok := w.tryLocked(n)
	if ok {
		b.mu.Unlock()
		return nil
	}
	if why == windowClosed {
		b.mu.Unlock()
		return context.Canceled
	}
	b.waits.Add(1)
	if why == waitShare {
		w.throttledLocked()
	}
	start := b.clock.Now()
	wt := &waiter{w: w, n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, wt)
	b.queueLocked(wt)
	b.grantLocked()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// b.mu is held here.
		if wt.granted {
			b.mu.Unlock()
			return nil
		}
		if w.closed {
			b.removeLocked(wt)
			b.mu.Unlock()
			return context.Canceled
		}
		var stallIn time.Duration = -1
		now := b.clock.Now()
		if held := w.pending + w.sent; held > 0 && b.opts.StallTimeout > 0 {
			from := start
			if w.lastProgress.After(from) {
				from = w.lastProgress
			}
			stallIn = b.opts.StallTimeout - now.Sub(from)
			if stallIn <= 0 {
				b.removeLocked(wt)
				b.mu.Unlock()
				b.stalled.Add(1)
				return errStalled(w, held)
			}
		}
		b.mu.Unlock()
		var fire <-chan time.Time
		if stallIn > 0 {
			if timer == nil {
				timer = b.clock.NewTimer(stallIn)
			} else {
				timer.Reset(stallIn)
			}
			fire = timer.C()
			if b.clock.Now().Sub(now) >= time.Millisecond {
				// The clock moved while the timer was being armed (a
				// clock that jumps, such as a test's, may have passed
				// the stall instant): look again rather than wait too
				// long.
				b.mu.Lock()
				continue
			}
		}
		select {
		case <-wt.ready:
		case <-fire:
		case <-ctx.Done():
			b.mu.Lock()
			if wt.granted { // granted meanwhile: give it back (unless Close did)
				if !w.closed {
					m := min(n, w.pending)
					w.pending -= m
					w.chargeLocked(-m)
				}
			} else {
				b.removeLocked(wt)
			}
			b.mu.Unlock()
			return ctx.Err()
		}
		b.mu.Lock()
	}
}

// Release returns n pending bytes that never reached the transport (a
// record the consumer skipped or dropped).
func (w *Window) Release(n int64) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.closed || n <= 0 {
		return
	}
	n = min(n, w.pending)
	w.pending -= n
	w.chargeLocked(-n)
}

// Sent moves n bytes from pending to sent: the transport accepted them
// (for gRPC: Send returned). It counts as progress.
func (w *Window) Sent(n int64) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	w.lastProgress = b.clock.Now()
	if w.closed {
		return
	}
	n = min(n, w.pending)
	w.pending -= n
	w.sent += n
	if w.queued != nil {
		b.grantLocked() // this window's Acquire may go on now
	}
}

// ReleaseSent returns n sent bytes: the transport no longer holds them.
func (w *Window) ReleaseSent(n int64) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	w.lastProgress = b.clock.Now()
	if w.closed || n <= 0 {
		return
	}
	n = min(n, w.sent)
	w.sent -= n
	w.chargeLocked(-n)
}

// Close returns everything the window still holds; the window is not used
// again (later calls change nothing). Safe to call more than once.
func (w *Window) Close() {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.closed {
		return
	}
	held := w.pending + w.sent
	w.pending, w.sent = 0, 0
	// Closed before the release: the grant pass the release runs must
	// end this window's own waiting Acquire, not grant it (nothing would
	// ever return that charge).
	w.closed = true
	w.chargeLocked(-held)
	b.windows.Add(-1)
	detach(b.identities, w.ident, w.identity, 0)
	detach(b.sessions, w.sess, w.sessID, 0)
	w.ident, w.sess = nil, nil
	if len(b.queue) > 0 {
		b.grantLocked() // ends an Acquire of this window
	}
}

// StallTimeout is the budget's stall limit (0: none), for consumers that
// wait on their own queues.
func (w *Window) StallTimeout() time.Duration {
	if w.b.opts.StallTimeout < 0 {
		return 0
	}
	return w.b.opts.StallTimeout
}

// Stalled counts the window as stalled and returns the error that ends
// its stream, for consumers whose own queue stayed full for StallTimeout.
func (w *Window) Stalled() error {
	w.b.stalled.Add(1)
	w.b.mu.Lock()
	held := w.pending + w.sent
	w.b.mu.Unlock()
	return errStalled(w, held)
}
