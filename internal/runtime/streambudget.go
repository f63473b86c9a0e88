package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpd/macpd/internal/clock"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// Stream buffers (docs/security.md "Stream buffers"): every stream that
// delivers session records (StreamSession today; SSE and WebSocket
// followers use the same API) holds the records it has read but the
// client has not yet taken in a StreamWindow. A window is bounded twice:
//
//   - per stream, by StreamBudgetOptions.PerStream bytes (a window that
//     holds nothing may always take one record, whatever its size, so a
//     record larger than the bound is still delivered), and
//   - globally, by StreamBudgetOptions.Total bytes shared by all windows
//     (when nothing at all is charged, one record is always allowed).
//
// A record is charged (StreamCost) before it is read from the store or
// handed to the consumer, and released by the consumer once the transport
// has really taken it (for gRPC: once later data has pushed it out of the
// HTTP/2 send queue, see internal/server/stream.go). So replay is paced by
// what the client reads: a client that reads nothing makes its stream
// wait, never queue.
//
// A window that holds records and has released nothing for
// StreamBudgetOptions.StallTimeout is stalled: Acquire fails with
// ErrStalled (RATE_LIMITED), and the transport ends the stream with it; the
// client resumes with the cursor it last received (docs/resume.md). A
// window that holds nothing and only waits for the global budget (other
// streams hold it) is not stalled: it waits.

// DefaultStreamBudget are the documented defaults.
var DefaultStreamBudget = StreamBudgetOptions{
	PerStream:    1 << 20,
	Total:        256 << 20,
	StallTimeout: 30 * time.Second,
}

// StreamBudgetOptions tune the stream buffers (MACP_STREAM_BUFFER_BYTES,
// MACP_STREAM_BUFFER_BUDGET_BYTES, MACP_STREAM_STALL_TIMEOUT_MS).
type StreamBudgetOptions struct {
	// PerStream bounds the bytes (StreamCost) one stream holds.
	PerStream int64
	// Total bounds the bytes all streams hold together.
	Total int64
	// StallTimeout ends a stream that holds records and took none for
	// this long; 0 never ends one.
	StallTimeout time.Duration
}

// StreamCostOverhead is what every record counts besides its encoding:
// the decoded structs and the queue entry.
const StreamCostOverhead = 512

// StreamCost is what a record counts against the stream buffers: twice
// its envelope's encoded size (the decoded record and its wire encoding
// in the transport's send queue coexist) plus StreamCostOverhead. The
// same record always costs the same, so the consumer can release what the
// follower charged.
func StreamCost(rec session.Record) int64 {
	if rec.Envelope == nil {
		return StreamCostOverhead
	}
	return 2*int64(proto.Size(rec.Envelope)) + StreamCostOverhead
}

// StreamBudget is the global budget of stream buffers.
type StreamBudget struct {
	opts  StreamBudgetOptions
	clock clock.Clock

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced on every release while waiting > 0
	waiting int           // Acquire calls waiting on changed

	usedGauge atomic.Int64 // used, for metrics without the lock
	windows   atomic.Int64
	stalled   atomic.Int64 // windows that failed with ErrStalled
	waits     atomic.Int64 // Acquire calls that had to wait
}

// NewStreamBudget returns a budget; zero fields take DefaultStreamBudget's
// values (StallTimeout < 0 disables the stall limit). c times the stall
// limit; nil = the wall clock.
func NewStreamBudget(o StreamBudgetOptions, c clock.Clock) *StreamBudget {
	if o.PerStream <= 0 {
		o.PerStream = DefaultStreamBudget.PerStream
	}
	if o.Total <= 0 {
		o.Total = DefaultStreamBudget.Total
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = DefaultStreamBudget.StallTimeout
	}
	return &StreamBudget{opts: o, clock: clock.OrReal(c), changed: make(chan struct{})}
}

// Options returns the budget's settings.
func (b *StreamBudget) Options() StreamBudgetOptions { return b.opts }

// StreamBudgetStats are the budget's figures (metrics).
type StreamBudgetStats struct {
	Used, Total int64 // bytes held by all windows, and the budget
	Windows     int64 // open windows
	Stalled     int64 // windows ended as stalled, since start
	Waits       int64 // acquisitions that had to wait, since start
}

// Stats returns the current figures.
func (b *StreamBudget) Stats() StreamBudgetStats {
	return StreamBudgetStats{
		Used: b.usedGauge.Load(), Total: b.opts.Total, Windows: b.windows.Load(),
		Stalled: b.stalled.Load(), Waits: b.waits.Load(),
	}
}

// StreamWindow is one stream's share of the budget. It counts what the
// stream holds in two parts: pending (charged, not yet handed to the
// transport) and sent (handed to the transport, which may still hold it
// until the client reads). Acquire is called by one goroutine (the
// follower); the others by any; Close once, at the end.
type StreamWindow struct {
	b *StreamBudget
	// Guarded by b.mu.
	pending, sent int64
	lastProgress  time.Time // last Sent or ReleaseSent
	closed        bool
}

// NewWindow opens a stream's window.
func (b *StreamBudget) NewWindow() *StreamWindow {
	b.windows.Add(1)
	return &StreamWindow{b: b, lastProgress: b.clock.Now()}
}

// errStalled is the error that ends a stalled stream (see above).
func errStalled(w *StreamWindow, held int64) *coord.Error {
	return coord.Errorf(coord.CodeRateLimited,
		"stream stalled: the client took nothing for %v while %d bytes were waiting for it; resume from the last sequence number received",
		w.b.opts.StallTimeout, held)
}

// tryLocked takes n if both bounds allow it; the caller holds b.mu. The
// per-stream bound counts pending and sent, but a stream with nothing
// pending may always take one more record (what it sent may sit in the
// transport until its client reads, and must not block it forever).
func (w *StreamWindow) tryLocked(n int64) bool {
	b := w.b
	if w.closed {
		return false
	}
	if w.pending > 0 && w.pending+w.sent+n > b.opts.PerStream {
		return false
	}
	if b.used > 0 && b.used+n > b.opts.Total {
		return false
	}
	w.pending += n
	b.add(n)
	return true
}

// add changes the budget's use by n; the caller holds b.mu. A decrease
// wakes the waiters.
func (b *StreamBudget) add(n int64) {
	b.used += n
	b.usedGauge.Store(b.used)
	if n < 0 {
		b.wakeLocked()
	}
}

// wakeLocked wakes the waiting Acquire calls, if any; the caller holds
// b.mu. Without waiters it does nothing: a fan-out stream calls Sent and
// ReleaseSent per record, and a channel made and closed for no one each
// time was a good part of its cost.
func (b *StreamBudget) wakeLocked() {
	if b.waiting > 0 {
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// TryAcquire takes n bytes (pending) if the bounds allow it now.
func (w *StreamWindow) TryAcquire(n int64) bool {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.tryLocked(n)
}

// Acquire takes n bytes (pending), waiting while the bounds do not allow
// it. It fails with ctx's error, or with a RATE_LIMITED *coord.Error when
// the stream is stalled: it holds something and neither sent nor released
// anything for StallTimeout while this call waited.
func (w *StreamWindow) Acquire(ctx context.Context, n int64) error {
	b := w.b
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var start time.Time // when the call first had to wait
	waited := false
	registered := false // counted in b.waiting
	for {
		b.mu.Lock()
		if registered {
			b.waiting--
			registered = false
		}
		if w.tryLocked(n) {
			b.mu.Unlock()
			return nil
		}
		if w.closed {
			b.mu.Unlock()
			return context.Canceled
		}
		if !waited {
			waited = true
			b.waits.Add(1)
			start = b.clock.Now()
		}
		changed := b.changed
		var stallIn time.Duration = -1
		now := b.clock.Now()
		if held := w.pending + w.sent; held > 0 && b.opts.StallTimeout > 0 {
			from := start
			if w.lastProgress.After(from) {
				from = w.lastProgress
			}
			stallIn = b.opts.StallTimeout - now.Sub(from)
			if stallIn <= 0 {
				b.mu.Unlock()
				b.stalled.Add(1)
				return errStalled(w, held)
			}
		}
		b.waiting++
		registered = true
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
				continue
			}
		}
		select {
		case <-changed:
		case <-fire:
		case <-ctx.Done():
			b.mu.Lock()
			b.waiting--
			b.mu.Unlock()
			return ctx.Err()
		}
	}
}

// Release returns n pending bytes that never reached the transport (a
// record the consumer skipped or dropped).
func (w *StreamWindow) Release(n int64) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.closed || n <= 0 {
		return
	}
	n = min(n, w.pending)
	w.pending -= n
	b.add(-n)
}

// Sent moves n bytes from pending to sent: the transport accepted them
// (for gRPC: Send returned). It counts as progress.
func (w *StreamWindow) Sent(n int64) {
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
	b.wakeLocked() // this window's Acquire may go on now
}

// ReleaseSent returns n sent bytes: the transport no longer holds them.
func (w *StreamWindow) ReleaseSent(n int64) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	w.lastProgress = b.clock.Now()
	if w.closed || n <= 0 {
		return
	}
	n = min(n, w.sent)
	w.sent -= n
	b.add(-n)
}

// Close returns everything the window still holds; the window is not used
// again (later calls change nothing). Safe to call more than once.
func (w *StreamWindow) Close() {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	b.windows.Add(-1)
	held := w.pending + w.sent
	w.pending, w.sent = 0, 0
	b.add(-held)
	if held == 0 { // wake an Acquire of this window
		b.wakeLocked()
	}
}

// StallTimeout is the budget's stall limit (0: none), for consumers that
// wait on their own queues.
func (w *StreamWindow) StallTimeout() time.Duration {
	if w.b.opts.StallTimeout < 0 {
		return 0
	}
	return w.b.opts.StallTimeout
}

// Stalled counts the window as stalled and returns the error that ends
// its stream, for consumers whose own queue stayed full for StallTimeout.
func (w *StreamWindow) Stalled() error {
	w.b.stalled.Add(1)
	w.b.mu.Lock()
	held := w.pending + w.sent
	w.b.mu.Unlock()
	return errStalled(w, held)
}

// StreamBudget returns the runtime's budget of stream buffers: transports
// open one window per stream (StreamBudget().NewWindow()) and pass it in
// FollowOptions.Window.
func (r *Runtime) StreamBudget() *StreamBudget { return r.streams }

// releaseAll returns the window's charges for records not delivered.
func releaseAll(w *StreamWindow, recs []session.Record) {
	if w == nil {
		return
	}
	for _, rec := range recs {
		w.Release(StreamCost(rec))
	}
}
