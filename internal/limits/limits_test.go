package limits

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A sender gets a minute's allowance at once, then PerMinute/60 per
// second; other senders are independent.
func TestRateTokenBucket(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := NewRate(60, c.now)
	for i := 0; i < 60; i++ {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("event %d of the burst refused", i+1)
		}
	}
	ok, retry := l.Allow("a")
	if ok {
		t.Fatal("61st event in the same instant allowed")
	}
	if retry <= 0 || retry > time.Second+time.Millisecond {
		t.Fatalf("retryAfter %v, want about 1s", retry)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key is limited too")
	}
	c.add(500 * time.Millisecond)
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("allowed after half a token")
	}
	c.add(500 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("refused after a whole token refilled")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("two events allowed for one refilled token")
	}
	// The bucket never holds more than the burst.
	c.add(time.Hour)
	n := 0
	for {
		if ok, _ := l.Allow("a"); !ok {
			break
		}
		n++
	}
	if n != 60 {
		t.Fatalf("after an hour idle %d events allowed, want the burst 60", n)
	}
}

func TestRateDisabled(t *testing.T) {
	for _, l := range []*Rate{NewRate(0, nil), NewRate(-1, nil), nil} {
		for i := 0; i < 10000; i++ {
			if ok, _ := l.Allow("a"); !ok {
				t.Fatal("disabled limiter refused")
			}
		}
		if l.Keys() != 0 {
			t.Fatal("disabled limiter keeps state")
		}
	}
}

// Buckets that refilled are forgotten, so keys from long ago do not
// accumulate.
func TestRateSweep(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := NewRate(600, c.now)
	for i := 0; i < 1000; i++ {
		l.Allow(fmt.Sprint("k", i))
	}
	if l.Keys() != 1000 {
		t.Fatalf("keys %d", l.Keys())
	}
	c.add(2 * time.Minute)
	l.Allow("fresh")
	if l.Keys() != 1 {
		t.Fatalf("after the sweep %d keys, want 1", l.Keys())
	}
}

func TestRateConcurrent(t *testing.T) {
	l := NewRate(1000, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if ok, _ := l.Allow("a"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// 1000 burst plus whatever refilled meanwhile (a few per ms).
	if allowed < 1000 || allowed > 1200 {
		t.Fatalf("allowed %d of 4000 concurrent events, want about 1000", allowed)
	}
}

func TestCounter(t *testing.T) {
	c := NewCounter(2)
	r1, ok1 := c.Acquire("a")
	r2, ok2 := c.Acquire("a")
	_, ok3 := c.Acquire("a")
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("acquire: %v %v %v, want true true false", ok1, ok2, ok3)
	}
	if _, ok := c.Acquire("b"); !ok {
		t.Fatal("another key is limited too")
	}
	r1()
	r1() // idempotent
	if c.Count("a") != 1 {
		t.Fatalf("count %d after one release (twice)", c.Count("a"))
	}
	if _, ok := c.Acquire("a"); !ok {
		t.Fatal("slot not freed")
	}
	r2()
	if NewCounter(0).Max() != 0 {
		t.Fatal("max")
	}
	for i := 0; i < 100; i++ {
		if _, ok := NewCounter(0).Acquire("a"); !ok {
			t.Fatal("disabled counter refused")
		}
	}
}
