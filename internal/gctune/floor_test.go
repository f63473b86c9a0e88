package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestFloorPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name        string
		base        int
		floor, live uint64
		want        int
	}{
		{"no floor", 200, 0, 1 * mib, 200},
		{"GC off stays off", -1, 64 * mib, 1 * mib, -1},
		{"live heap large: base", 200, 64 * mib, 40 * mib, 200},
		{"exactly at the floor with base", 200, 60 * mib, 20 * mib, 200},
		{"small live heap: floor decides", 200, 64 * mib, 8 * mib, 700},
		{"rounds up to reach the floor", 100, 10, 3, 234},
		{"floor just above base target", 100, 21 * mib, 10 * mib, 110},
		{"no collection yet: base", 200, 64 * mib, 0, 200},
		{"tiny heap capped", 200, 64 * mib, 1, maxFloorPercent},
		{"cap: at most 11 times the live heap", 200, 64 * mib, 4 * mib / 2, maxFloorPercent},
		{"cap below base: base", 2000, 64 * mib, 1, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FloorPercent(tc.base, tc.floor, tc.live)
			if got != tc.want {
				t.Fatalf("FloorPercent(%d, %d, %d) = %d, want %d", tc.base, tc.floor, tc.live, got, tc.want)
			}
			// Unless capped (or off), the target reaches the floor.
			if tc.floor > 0 && tc.base > 0 && tc.live > 0 && got < maxFloorPercent {
				if target := tc.live * uint64(100+got) / 100; target < tc.floor {
					t.Fatalf("target %d below floor %d", target, tc.floor)
				}
			}
		})
	}
}

// The floor raises the GC percent while the live heap is small, keeps it
// up to date after collections, and restores the base percent on Stop.
func TestFloorFollowsCollections(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	runtime.GC()
	f := StartFloor(100, 1<<40) // far above any test heap: the floor decides
	defer f.Stop()
	if p := f.Percent(); p != maxFloorPercent {
		t.Fatalf("percent %d with a 1 TiB floor, want the cap %d", p, maxFloorPercent)
	}
	if cur := debug.SetGCPercent(f.Percent()); cur != f.Percent() {
		t.Fatalf("runtime percent %d, floor says %d", cur, f.Percent())
	}
	start := f.Cycles()
	deadline := time.Now().Add(10 * time.Second)
	for f.Cycles() < start+2 {
		if time.Now().After(deadline) {
			t.Fatalf("floor did not run after collections: %d cycles", f.Cycles()-start)
		}
		runtime.GC()
		time.Sleep(time.Millisecond) // cleanups run on their own goroutine
	}
	f.Stop()
	if cur := debug.SetGCPercent(100); cur != 100 {
		t.Fatalf("after Stop the percent is %d, want the base 100", cur)
	}
	c := f.Cycles()
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if f.Cycles() != c {
		t.Fatalf("stopped floor still adjusting")
	}
}

func TestDecideMinHeap(t *testing.T) {
	const v2 = "/sys/fs/cgroup/memory.max"
	for _, tc := range []struct {
		name  string
		min   int64
		limit int64
		vars  map[string]string
		files map[string]string
		want  int64
	}{
		{"configured floor", 64 << 20, 0, nil, nil, 64 << 20},
		{"capped at a quarter of the memory limit", 64 << 20, 100 << 20, nil, nil, 25 << 20},
		{"capped by the cgroup limit", 64 << 20, 0, nil, map[string]string{v2: "200000000"}, 45000000},
		{"GOGC set: no floor", 64 << 20, 0, map[string]string{"GOGC": "100"}, nil, 0},
		{"zero: none", 0, 0, nil, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(200, tc.limit, tc.min, env(tc.vars, tc.files)).MinHeap; got != tc.want {
				t.Fatalf("MinHeap = %d, want %d", got, tc.want)
			}
		})
	}
}
