package runtime

import (
	"container/heap"
	"sync"
	"time"
)

// timerLoop fires session deadlines on time from a min-heap: one goroutine,
// one time.Timer armed for the earliest deadline (not a periodic sweep).
type timerLoop struct {
	mu    sync.Mutex
	items deadlineHeap
	wake  chan struct{}
	now   func() time.Time
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

func newTimerLoop(now func() time.Time, fire func(string)) *timerLoop {
	return &timerLoop{wake: make(chan struct{}, 1), now: now, fire: fire}
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
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var due []string
		wait := time.Hour
		nowMs := t.now().UnixMilli()
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
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-stop:
			return
		case <-t.wake:
		case <-timer.C:
		}
	}
}
