package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// FloorPercent is the GC percent that puts the next collection's heap
// target at or above floor bytes, given live bytes of live heap: base when
// base already does, else the smallest percent that reaches the floor
// (never above maxFloorPercent). Pure; floor <= 0 disables the floor.
func FloorPercent(base int, floor, live uint64) int {
	if floor == 0 || base < 0 || live == 0 { // live 0: no collection yet
		return base
	}
	// target = live * (1 + pct/100) >= floor  <=>  pct >= 100*floor/live - 100
	need := (floor*100 + live - 1) / live // ceil(100*floor/live)
	if need <= 100 {
		return base
	}
	pct := need - 100
	if pct > maxFloorPercent {
		pct = maxFloorPercent
	}
	return max(base, int(pct))
}

// maxFloorPercent bounds the percent the floor may set (a heap target of
// at most 11 times the live heap): the percent applies to the live heap
// the next collection finds, which may have grown meanwhile (recovery at
// start, a burst of sessions), so an unbounded percent computed from a
// tiny live heap could let the heap grow far past the floor before the
// collector runs again; a too-large target also costs, as allocations
// then keep touching fresh pages instead of reusing collected ones.
const maxFloorPercent = 1000

// Floor keeps the collector's heap target at or above a minimum heap size
// while the live heap is small: after every collection it sets the GC
// percent to FloorPercent(base, floor, live heap). While macpd's live Go
// heap is small (a fresh process, a few hundred resident sessions: the
// store's memtables and cache live outside it) and the accept path
// allocates several KiB per envelope, a percent-only target collects many
// times a second; a floor of some tens of MiB cuts the collections
// several-fold for a bounded amount of memory. Once the live heap passes
// floor/(1+base/100) (thousands of resident sessions), it does nothing.
// The soft memory limit, when set, still caps the heap.
type Floor struct {
	base  int
	floor uint64

	mu      sync.Mutex
	stopped bool
	pct     int // last percent applied
	samples [1]metrics.Sample
	cycles  uint64
}

// StartFloor starts the floor: it applies FloorPercent now and after each
// collection until Stop. base is the GC percent in force (Apply's); floor
// is in bytes.
func StartFloor(base int, floor uint64) *Floor {
	f := &Floor{base: base, floor: floor, pct: base}
	f.samples[0].Name = "/gc/heap/live:bytes"
	f.adjust()
	f.arm()
	return f
}

// arm registers a cleanup on a fresh unreachable object: it runs after
// the next collection that finds the object dead, i.e. once per cycle.
func (f *Floor) arm() {
	o := new(sentinel)
	runtime.AddCleanup(o, func(f *Floor) {
		if f.adjust() {
			f.arm()
		}
	}, f)
}

// sentinel is large enough not to be a tiny allocation (tiny objects
// share blocks, and their cleanups may never run).
type sentinel struct{ _ [32]byte }

// adjust applies the percent for the current live heap; false once
// stopped.
func (f *Floor) adjust() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	f.cycles++
	metrics.Read(f.samples[:])
	var live uint64
	if f.samples[0].Value.Kind() == metrics.KindUint64 {
		live = f.samples[0].Value.Uint64()
	}
	pct := FloorPercent(f.base, f.floor, live)
	// Re-apply only on a change of more than an eighth: SetGCPercent is
	// cheap, but there is no need to touch the pacer for small drifts.
	if d := math.Abs(float64(pct - f.pct)); d > float64(f.pct)/8 || (pct == f.base) != (f.pct == f.base) {
		debug.SetGCPercent(pct)
		f.pct = pct
	}
	return true
}

// Percent returns the GC percent the floor last applied.
func (f *Floor) Percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pct
}

// Cycles returns how many times the floor has adjusted (once at start,
// then once per collection).
func (f *Floor) Cycles() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cycles
}

// Stop ends the floor and restores the base percent.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	debug.SetGCPercent(f.base)
	f.pct = f.base
}
