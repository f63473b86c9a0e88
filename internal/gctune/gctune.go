// Package gctune sets the Go garbage collector's pace for the macpd
// process: its GC percent (how much the heap may grow between collections),
// a minimum heap target (Floor) and a soft memory limit.
//
// Contract: Apply is called once by the macpd command, never by library
// code (the settings are process-wide). The GOGC and GOMEMLIMIT environment
// variables, when set, win over the configuration: the Go runtime already
// applied them, and Apply leaves each one alone. With MemoryLimit 0 the
// limit is automatic: 90% of the cgroup (v2 memory.max, v1
// memory.limit_in_bytes) limit when the process has one, else none. The
// minimum heap (Floor) applies only to a configured percent (not GOGC) and
// is capped at a quarter of the memory limit.
//
// Why: the accept path allocates a few KiB per acknowledged envelope
// (gRPC framing, decoding, records) while sessions keep a live heap of
// their own, so at the Go default (GOGC=100) the collector runs several
// times a second under load and costs a fifth of the CPU. A higher percent
// trades memory for throughput; the soft limit makes the collector work
// harder instead of letting the heap outgrow the container.
package gctune

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Settings are the effective settings and where they came from.
type Settings struct {
	GCPercent   int
	GCFrom      string // "GOGC", "config"
	MemoryLimit int64  // bytes; math.MaxInt64 = none
	LimitFrom   string // "GOMEMLIMIT", "config", "cgroup", "none"
	// MinHeap is the heap target floor in bytes (Floor), 0 = none.
	MinHeap int64
}

// Env abstracts the process environment and files (tests).
type Env struct {
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
}

// OS is the real environment.
var OS = Env{Getenv: os.Getenv, ReadFile: os.ReadFile}

// Decide computes the settings without applying them. minHeap is the
// configured heap floor in bytes (0 = none).
func Decide(gcPercent int, memoryLimit, minHeap int64, env Env) Settings {
	s := Settings{GCPercent: gcPercent, GCFrom: "config", MemoryLimit: math.MaxInt64, LimitFrom: "none"}
	if v := env.Getenv("GOGC"); v != "" {
		s.GCFrom = "GOGC"
		s.GCPercent = -1 // whatever the runtime parsed ("off" included)
		if n, err := strconv.Atoi(v); err == nil {
			s.GCPercent = n
		}
	}
	switch {
	case env.Getenv("GOMEMLIMIT") != "":
		s.LimitFrom = "GOMEMLIMIT"
		s.MemoryLimit = -1 // the runtime's own setting
	case memoryLimit > 0:
		s.MemoryLimit, s.LimitFrom = memoryLimit, "config"
	default:
		if n, ok := cgroupLimit(env); ok {
			s.MemoryLimit, s.LimitFrom = n/10*9, "cgroup"
		}
	}
	if s.GCFrom == "config" && minHeap > 0 {
		s.MinHeap = minHeap
		if s.MemoryLimit > 0 && s.MinHeap > s.MemoryLimit/4 {
			s.MinHeap = s.MemoryLimit / 4
		}
	}
	return s
}

// Apply applies Decide's settings to the process and logs them. With a
// heap floor it starts a Floor for the life of the process.
func Apply(gcPercent int, memoryLimit, minHeap int64, env Env, log *slog.Logger) Settings {
	s := Decide(gcPercent, memoryLimit, minHeap, env)
	if s.GCFrom == "config" {
		debug.SetGCPercent(s.GCPercent)
		if s.MinHeap > 0 {
			StartFloor(s.GCPercent, uint64(s.MinHeap))
		}
	}
	if s.LimitFrom == "config" || s.LimitFrom == "cgroup" {
		debug.SetMemoryLimit(s.MemoryLimit)
	}
	if log != nil {
		limit := "none"
		switch {
		case s.MemoryLimit == -1:
			limit = env.Getenv("GOMEMLIMIT")
		case s.MemoryLimit != math.MaxInt64:
			limit = strconv.FormatInt(s.MemoryLimit, 10)
		}
		log.Info("garbage collector", "gc_percent", s.GCPercent, "gc_percent_from", s.GCFrom,
			"min_heap_bytes", s.MinHeap, "memory_limit_bytes", limit, "memory_limit_from", s.LimitFrom)
	}
	return s
}

// cgroupLimit reads the process's cgroup memory limit, if it has one.
func cgroupLimit(env Env) (int64, bool) {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := env.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(v, 10, 64)
		// "max" (v2) or a huge number (v1, page-rounded MaxInt64) = none.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
