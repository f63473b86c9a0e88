// Package limits holds the runtime's generic abuse limits: a token-bucket
// rate limiter keyed by identity (Rate, and SenderRates, the runtime's two
// per-sender allowances), a concurrency counter keyed by identity or
// session, the listeners' connection counter (ConnCounter) and a
// rate-limited abuse log (LogEvery). Both are safe for concurrent use, never block, and
// keep memory proportional to the keys active recently.
package limits

import (
	"sync"
	"time"
)

// Rate is a token-bucket rate limiter per key (RFC-MACP-0004 §7: rate
// limits per sender). Each key has a bucket of Burst tokens, refilled at
// PerMinute tokens per minute; an event takes one token. A zero or
// negative PerMinute disables the limiter: every event is allowed.
//
// With Burst = PerMinute (NewRate) a sender may use a whole minute's
// allowance at once and then PerMinute/60 events per second, the same
// long-run rate as the reference runtime's 60-second sliding window.
type Rate struct {
	perMinute int
	burst     float64
	perNs     float64 // tokens per nanosecond
	now       func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewRate returns a limiter allowing perMinute events per minute per key
// with a burst of perMinute. now is the clock (time.Now if nil).
func NewRate(perMinute int, now func() time.Time) *Rate {
	if now == nil {
		now = time.Now
	}
	l := &Rate{perMinute: perMinute, now: now, buckets: make(map[string]*bucket)}
	if perMinute > 0 {
		l.burst = float64(perMinute)
		l.perNs = float64(perMinute) / float64(time.Minute)
	}
	return l
}

// PerMinute is the configured rate (0 = unlimited).
func (l *Rate) PerMinute() int { return l.perMinute }

// Allow takes one token from key's bucket. When there is none it returns
// false and how long until the next token.
func (l *Rate) Allow(key string) (ok bool, retryAfter time.Duration) {
	if l == nil || l.perMinute <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	} else {
		b.refill(now, l)
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	need := (1 - b.tokens) / l.perNs
	return false, time.Duration(need) + 1
}

func (b *bucket) refill(now time.Time, l *Rate) {
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(l.burst, b.tokens+float64(el)*l.perNs)
		b.last = now
	}
}

// sweep drops, at most once a minute, buckets that have refilled
// completely: they are indistinguishable from a new bucket. So memory is
// bounded by the keys active in the last minute or two.
func (l *Rate) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		b.refill(now, l)
		if b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// Keys is the number of keys currently tracked (tests, diagnostics).
func (l *Rate) Keys() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// Counter bounds concurrent holders per key (streams per identity,
// subscribers per session). A zero or negative Max disables it.
type Counter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// NewCounter returns a counter allowing max concurrent holders per key.
func NewCounter(max int) *Counter { return &Counter{max: max, n: make(map[string]int)} }

// Max is the configured bound (0 = unlimited).
func (c *Counter) Max() int { return c.max }

// Acquire takes a slot for key. It returns a release function (call it
// exactly once; further calls do nothing) and true, or nil and false when
// key already holds Max slots.
func (c *Counter) Acquire(key string) (release func(), ok bool) {
	if c == nil || c.max <= 0 {
		return func() {}, true
	}
	c.mu.Lock()
	if c.n[key] >= c.max {
		c.mu.Unlock()
		return nil, false
	}
	c.n[key]++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if c.n[key]--; c.n[key] <= 0 {
				delete(c.n, key)
			}
			c.mu.Unlock()
		})
	}, true
}

// Count is key's current number of holders.
func (c *Counter) Count(key string) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}
