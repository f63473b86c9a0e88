package runtime

import (
	"container/heap"
	"context"

	"github.com/google/uuid"
	"sync"
	"time"

	"github.com/macpd/macpd/internal/clock"
	"github.com/macpd/macpd/internal/session"
)

// timerLoop fires session deadlines on time from a min-heap: one goroutine,
// one timer of the runtime's clock armed for the earliest deadline (not a
// periodic sweep).
type timerLoop struct {
	mu    sync.Mutex
	items deadlineHeap
	wake  chan struct{}
	clock clock.Clock
	fire  func(sessionID string)
}

type deadlineItem struct {
	atMs int64
	id   string
}

type deadlineHeap []deadlineItem

func (h deadlineHeap) Len() int { return len(h) }
func (h deadlineHeap) Less(i, j int) bool {
	if h[i].atMs != h[j].atMs {
		return h[i].atMs < h[j].atMs
	}
	return h[i].id < h[j].id
}
func (h deadlineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)   { *h = append(*h, x.(deadlineItem)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func newTimerLoop(c clock.Clock, fire func(string)) *timerLoop {
	return &timerLoop{wake: make(chan struct{}, 1), clock: c, fire: fire}
}

// add schedules id to fire at atMs (Unix ms).
func (t *timerLoop) add(id string, atMs int64) {
	t.mu.Lock()
	heap.Push(&t.items, deadlineItem{atMs: atMs, id: id})
	first := t.items[0].id == id && t.items[0].atMs == atMs
	t.mu.Unlock()
	if first {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// len returns the number of pending deadlines.
func (t *timerLoop) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.items)
}

// run fires due deadlines until stop closes.
func (t *timerLoop) run(stop <-chan struct{}) {
	timer := t.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var due []string
		wait := time.Hour
		nowMs := t.clock.Now().UnixMilli()
		t.mu.Lock()
		for len(t.items) > 0 && t.items[0].atMs <= nowMs {
			due = append(due, heap.Pop(&t.items).(deadlineItem).id)
		}
		if len(t.items) > 0 {
			wait = time.Duration(t.items[0].atMs-nowMs) * time.Millisecond
		}
		t.mu.Unlock()
		for _, id := range due {
			t.fire(id)
		}
		if len(due) > 0 {
			continue
		}
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(wait)
		if t.clock.Now().UnixMilli() != nowMs {
			// The clock moved while the timer was being armed (wait was
			// computed for the earlier instant, and a clock that jumps,
			// such as a test's, may have jumped past the deadline): look
			// again rather than wait too long.
			continue
		}
		select {
		case <-stop:
			return
		case <-t.wake:
		case <-timer.C():
		}
	}
}

// expiryRetry is how soon a deadline is retried when its expiry could not
// be stored (or the session could not be rebuilt to write it).
const expiryRetry = 250 * time.Millisecond

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
	if !r.owns(id) { // another node owns it (Forwarder): its deadline fires there
		r.retryExpiry(id)
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
		r.implicitLocked(o, now) // unlocks o
		return
	}
	done := r.commit.submit(o, []session.Record{rec}, []LifecycleEvent{r.terminalEvent(o.sess, now)}, true)
	o.mu.Unlock()
	if err := <-done; err != nil {
		r.retryExpiry(id)
	}
}

func (r *Runtime) retryExpiry(id string) {
	if !r.closing.Load() {
		r.timers.add(id, r.opts.Clock.Now().Add(expiryRetry).UnixMilli())
	}
}

// armExpiry arms the session's timer for the earliest time it can expire
// (session.ExpiryMs: the deadline while OPEN, the suspension cap while
// SUSPENDED); a terminal session needs none. A timer that fires early
// (the session was resumed, moving its deadline) finds nothing due and
// re-arms through the resume that moved it.
func (r *Runtime) armExpiry(s *session.Session) {
	if at, ok := s.ExpiryMs(); ok {
		r.timers.add(s.ID, at)
	}
	if at, ok := s.ImplicitDueMs(); ok { // a mode's implicit action (session/implicit.go)
		r.timers.add(s.ID, at)
	}
}

// implicitLocked takes a mode's implicit action that is due (the handoff
// implicit accept, session/implicit.go) with o.mu held, and unlocks it. A
// failed append is retried like an expiry.
func (r *Runtime) implicitLocked(o *owner, now int64) {
	out := o.sess.ImplicitIfDue(now, uuid.NewString())
	if len(out.Records) == 0 {
		o.mu.Unlock()
		if out.Err != nil {
			r.log.Error("implicit action failed", "session_id", o.id, "err", out.Err)
		}
		return
	}
	r.armExpiry(o.sess) // the deadline, and a next implicit action
	done := r.commit.submit(o, out.Records, nil, false)
	o.mu.Unlock()
	if err := <-done; err != nil {
		r.retryExpiry(o.id)
	}
}
