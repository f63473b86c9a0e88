package runtime

import (
	"sync"

	"github.com/macpd/macpd/internal/hub"
)

// Session lifecycle fan-out with coalescing (WatchSessions).
//
// Lifecycle events are observations, not history: a watcher that falls
// behind may be told only the latest state of each session it missed
// (issue #5: "observation streams may coalesce what a client missed;
// accepted history never does"). So instead of dropping a slow watcher,
// a LifecycleWatcher keeps a pending set keyed by session id that holds
// only the latest event of each session: a RESOLVED or EXPIRED replaces a
// CREATED still pending for the same session, and events are delivered in
// the order their session first became pending. A watcher that drains its
// set after a stall therefore ends in the same per-session state as one
// that kept up.
//
// Memory per watcher is bounded by the number of distinct sessions
// pending (LifecycleFeed's maxPending). A watcher that exceeds it is ended
// (Done closes, Overflowed reports true, its set is freed): its transport
// tells the client to re-sync with ListSessions. Publish never blocks: it
// only updates maps under short locks, whatever the watchers do.
//
// The transports do not consume a LifecycleWatcher directly: each caller's
// feed is a SessionWatch (lifecycle.go), the initial sync then the live
// events without duplicates, the same on gRPC and HTTP.

// DefaultMaxWatchPending is the default cap on distinct sessions pending
// for one lifecycle watcher (Options.MaxWatchPending).
const DefaultMaxWatchPending = 10_000

// LifecycleFeed carries session lifecycle events (CREATED, RESOLVED,
// EXPIRED), published by the committer after they are durable. It has two
// kinds of subscribers: the embedded Hub's (Subscribe: a bounded queue of
// every event, dropped with Lagged when full; for in-process consumers
// that want each event) and coalescing watchers (Watch; WatchSessions).
type LifecycleFeed struct {
	*hub.Hub[LifecycleEvent]

	maxPending int
	mu         sync.Mutex
	watchers   map[*LifecycleWatcher]struct{}
}

// NewLifecycleFeed returns a feed whose Hub subscribers buffer up to
// buffer events and whose watchers hold up to maxPending sessions
// (DefaultMaxWatchPending if maxPending < 1).
func NewLifecycleFeed(buffer, maxPending int) *LifecycleFeed {
	if maxPending < 1 {
		maxPending = DefaultMaxWatchPending
	}
	return &LifecycleFeed{
		Hub:        hub.New[LifecycleEvent](buffer),
		maxPending: maxPending,
		watchers:   make(map[*LifecycleWatcher]struct{}),
	}
}

// Publish offers ev to every Hub subscriber and every watcher; it never
// blocks on a consumer.
func (f *LifecycleFeed) Publish(ev LifecycleEvent) {
	f.Hub.Publish(ev)
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.watchers {
		if !w.offer(ev) {
			delete(f.watchers, w)
		}
	}
}

// Len returns the number of Hub subscribers and watchers.
func (f *LifecycleFeed) Len() int {
	f.mu.Lock()
	n := len(f.watchers)
	f.mu.Unlock()
	return f.Hub.Len() + n
}

// Watch adds a coalescing watcher. filter, if not nil, selects the events
// the watcher wants (visibility); it runs on the publisher's goroutine, so
// it must be cheap and must not block. Events it rejects take no room.
func (f *LifecycleFeed) Watch(filter func(LifecycleEvent) bool) *LifecycleWatcher {
	w := &LifecycleWatcher{
		filter:  filter,
		max:     f.maxPending,
		pending: make(map[string]LifecycleEvent),
		ready:   make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	f.mu.Lock()
	f.watchers[w] = struct{}{}
	f.mu.Unlock()
	return w
}

// Unwatch removes w and frees what it holds; safe to call more than once.
func (f *LifecycleFeed) Unwatch(w *LifecycleWatcher) {
	f.mu.Lock()
	delete(f.watchers, w)
	f.mu.Unlock()
	w.end(false)
}

// LifecycleWatcher is one coalescing subscription (see LifecycleFeed).
// One goroutine consumes it: wait on Ready (or Done), then call Next until
// it reports false.
type LifecycleWatcher struct {
	filter func(LifecycleEvent) bool
	max    int

	mu      sync.Mutex
	pending map[string]LifecycleEvent // latest event per session id
	order   []string                  // session ids in first-pending order, from head
	head    int
	ended   bool
	over    bool
	peak    int // largest number of sessions pending at once

	ready chan struct{} // holds a token while something may be pending
	done  chan struct{}
}

// offer adds ev to the pending set (publisher side). It reports false if
// the watcher ended, now or before, so the feed forgets it.
func (w *LifecycleWatcher) offer(ev LifecycleEvent) bool {
	if w.filter != nil && !w.filter(ev) {
		return true
	}
	id := ev.Session.GetSessionId()
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return false
	}
	if _, ok := w.pending[id]; ok {
		w.pending[id] = ev // coalesce: the latest state wins, position kept
		w.mu.Unlock()
		return true
	}
	if len(w.pending) >= w.max {
		w.mu.Unlock()
		w.end(true)
		return false
	}
	w.pending[id] = ev
	w.order = append(w.order, id)
	w.peak = max(w.peak, len(w.pending))
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
	return true
}

// end stops the watcher: overflow marks it as having fallen too far
// behind. Only the first call counts.
func (w *LifecycleWatcher) end(overflow bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	w.ended, w.over = true, overflow
	w.pending, w.order, w.head = nil, nil, 0
	close(w.done)
}

// Ready receives a value when events may be pending.
func (w *LifecycleWatcher) Ready() <-chan struct{} { return w.ready }

// Done closes when the watcher was ended (Unwatch, or overflow).
func (w *LifecycleWatcher) Done() <-chan struct{} { return w.done }

// Overflowed reports whether the watcher was ended because more than the
// feed's maxPending sessions were pending: its consumer must re-sync
// (ListSessions) and watch again.
func (w *LifecycleWatcher) Overflowed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
}

// Next removes and returns the oldest pending event (in first-pending
// order, carrying its session's latest state); false if none is pending
// or the watcher ended.
func (w *LifecycleWatcher) Next() (LifecycleEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head == len(w.order) {
		return LifecycleEvent{}, false
	}
	id := w.order[w.head]
	w.order[w.head] = ""
	w.head++
	ev := w.pending[id]
	delete(w.pending, id)
	switch {
	case w.head == len(w.order):
		w.order, w.head = w.order[:0], 0
	case w.head > 1024 && w.head*2 > len(w.order):
		// Drop the consumed prefix so the slice does not grow forever
		// under a steady trickle.
		n := copy(w.order, w.order[w.head:])
		clear(w.order[n:])
		w.order, w.head = w.order[:n], 0
	}
	if w.head == len(w.order) && cap(w.order) > 4096 {
		w.order = nil // release a large backing array once drained
	}
	return ev, true
}

// Pending returns the number of sessions pending and the largest number
// ever pending at once.
func (w *LifecycleWatcher) Pending() (now, peak int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending), w.peak
}

// MaxPending returns the cap on distinct sessions pending per watcher.
func (f *LifecycleFeed) MaxPending() int { return f.maxPending }
