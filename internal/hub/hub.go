package hub

import (
	"sync"
	"sync/atomic"
)

// Hub fans values out to subscribers without ever blocking the publisher.
// Each subscriber has a bounded buffer; a subscriber whose buffer is full
// when a value arrives is dropped: its Done channel closes and Lagged
// reports true, so its transport can end the stream with a clear error
// instead of silently losing values.
type Hub[T any] struct {
	mu   sync.Mutex
	subs map[*Sub[T]]struct{}
	size int
	// Optional byte bound (NewBounded): a subscriber whose values not
	// yet taken (Took) cost more than maxBytes is dropped like a full one.
	cost     func(T) int64
	maxBytes int64
}

// NewBounded is New with a second bound per subscriber: the values
// it holds and has not yet taken (Took) may cost at most maxBytes. One
// value is always allowed.
func NewBounded[T any](size int, maxBytes int64, cost func(T) int64) *Hub[T] {
	h := New[T](size)
	h.cost, h.maxBytes = cost, maxBytes
	return h
}

// Took tells a bounded hub that the subscriber received v from s.C.
func (h *Hub[T]) Took(s *Sub[T], v T) {
	if h.cost != nil {
		s.pending.Add(-h.cost(v))
	}
}

// New returns a hub whose subscribers buffer up to size values.
func New[T any](size int) *Hub[T] {
	if size < 1 {
		size = 1
	}
	return &Hub[T]{subs: make(map[*Sub[T]]struct{}), size: size}
}

// Sub is one subscription.
type Sub[T any] struct {
	C       chan T
	done    chan struct{}
	once    sync.Once
	lagged  bool
	pending atomic.Int64 // cost of the values in C (bounded hubs)
}

// Done closes when the subscription was dropped or cancelled.
func (s *Sub[T]) Done() <-chan struct{} { return s.done }

// Lagged reports whether the subscription was dropped for falling behind.
// Only meaningful after Done closed.
func (s *Sub[T]) Lagged() bool {
	select {
	case <-s.done:
		return s.lagged
	default:
		return false
	}
}

// Subscribe adds a subscriber.
func (h *Hub[T]) Subscribe() *Sub[T] {
	s := &Sub[T]{C: make(chan T, h.size), done: make(chan struct{})}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

// Unsubscribe removes s; safe to call more than once.
func (h *Hub[T]) Unsubscribe(s *Sub[T]) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.once.Do(func() { close(s.done) })
}

// Publish offers v to every subscriber, dropping those that are full.
func (h *Hub[T]) Publish(v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var c int64
	if h.cost != nil {
		c = h.cost(v)
	}
	for s := range h.subs {
		if c > 0 {
			if p := s.pending.Load(); p > 0 && p+c > h.maxBytes {
				delete(h.subs, s)
				s.lagged = true
				s.once.Do(func() { close(s.done) })
				continue
			}
		}
		select {
		case s.C <- v:
			s.pending.Add(c)
		default:
			delete(h.subs, s)
			s.lagged = true
			s.once.Do(func() { close(s.done) })
		}
	}
}

// Len returns the number of subscribers.
func (h *Hub[T]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
