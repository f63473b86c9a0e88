package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// epoch is the fake clock's start: fixed, so every timestamp in a run (and
// in its trace) is a function of the seed.
var epoch = time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)

// settleBound bounds every wait for the runtime's goroutines to finish
// what a step started (an expiry to be stored, a follower to catch up).
// It is a liveness bound, not a timing assertion: a wait that reaches it
// is reported as a stuck runtime.
const settleBound = 20 * time.Second

// config is one run's parameters.
type config struct {
	seed   uint64
	steps  int
	mutate string // "" or a harness-only mutation (mutations_test.go)
}

// failure aborts a run: fail panics with it and run recovers it.
type failure struct{ msg string }

// world is one simulated deployment: the fake clock, the crashable
// in-memory disk, the Pebble store and runtime over it, the clients' model
// of what was acknowledged, and the trace.
type world struct {
	cfg   config
	rng   *rand.Rand
	clk   *clocktest.Fake
	ctx   context.Context
	modes *mode.Registry
	lim   session.Limits

	mem *vfs.MemFS // the disk; replaced by its crash clone at each crash
	inj *injector
	st  *pebblestore.Store
	pst *parkStore // st as the runtime sees it (interleave_test.go)
	// park, while set, is where the next follower started parks
	// (actFollowRace).
	park *parkPoint
	// gclk is the clock the runtime sees: clk with a gate on its timers
	// (interleave_test.go), one per runtime.
	gclk *gateClock
	rt   *runtime.Runtime
	reg  *registry.Registry // the runtime's mode and policy lookups

	step  int
	trace []string

	sessions  []*simSession
	byID      map[string]*simSession
	followers []*follower
	policies  map[string]bool // policy id -> registration acknowledged
	msgN      int
	polN      int

	crashes, faults, heldSyncs int

	// Protocol-mode attachments (attach_test.go).
	api      *api
	conns    []*simConn
	atts     []*simAttach
	attStats attStats
	states   map[string]map[uint64]any // session -> record seq -> its metadata, as the harness saw it

	// SSE feeds (sse_test.go).
	feeds    []*sseFeed
	sseStats sseStats
}

// simSession is the clients' model of one session id.
type simSession struct {
	id        string
	n         int
	mode      string
	initiator coord.Identity
	parts     []coord.Identity
	policy    string

	started    bool                      // SessionStart acknowledged (or found in history after a crash)
	sent       []*macpv1.Envelope        // each message id once, first sent first
	from       map[string]coord.Identity // who sent each message id
	acked      map[string]bool           // message ids acknowledged ok (they must be in history for ever)
	unsure     map[string]bool           // message ids answered INTERNAL_ERROR or lost in a crash
	props      []string                  // proposal ids sent
	resolvedBy string                    // the Commitment acknowledged (not as a duplicate)
	status     session.Status            // as last read (Inspect)
	expiry     int64                     // session.ExpiryMs as last read; 0: none
	inspected  bool                      // expiry was read at least once
	terminal   bool
}

func newWorld(cfg config) *world {
	w := &world{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.seed, 0x5eed_0032)),
		clk:      clocktest.NewAt(epoch),
		ctx:      context.Background(),
		modes:    builtin.Modes(),
		byID:     make(map[string]*simSession),
		policies: make(map[string]bool),
		inj:      &injector{},
	}
	w.lim = session.DefaultLimits()
	w.lim.MaxSuspendMs = 10 * 60 * 1000
	if w.rng.IntN(2) == 0 {
		w.lim.Profile = coord.ProfileApril
	} else {
		w.lim.Profile = coord.ProfileLatest
	}
	w.mem = vfs.NewCrashableMem()
	return w
}

// logf appends one line to the trace. Only values that are a function of
// the seed may go in: no runtime-generated ids, no hashes over them, no
// durations measured on the wall clock.
func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%04d t=%-9d ", w.step, w.clk.NowMs()-epoch.UnixMilli())+fmt.Sprintf(format, args...))
}

func (w *world) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.logf("INVARIANT VIOLATED: %s", msg)
	panic(failure{msg})
}

func (w *world) fs() vfs.FS {
	var fs vfs.FS = w.mem
	if w.cfg.mutate == mutLyingSync {
		fs = lyingFS{fs}
	}
	return errorfs.Wrap(fs, w.inj)
}

// open opens the store on the current disk and starts a runtime on it
// (recovery runs here).
func (w *world) open() {
	st, err := pebblestore.Open("db", pebblestore.Options{FS: w.fs(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		w.fail("open store: %v", err)
	}
	w.st = st
	w.reg = registry.New(st, w.modes, policy.DefaultOnly{}, registry.Options{Clock: w.clk})
	if err := w.reg.Load(w.ctx); err != nil {
		w.fail("runtime start (recovery): %v", err)
	}
	w.pst = &parkStore{Store: st}
	w.gclk = newGateClock(w.clk)
	w.rt = runtime.New(w.pst, w.reg, w.reg, runtime.Options{Limits: w.lim, Clock: w.gclk})
	if err := w.rt.Start(w.ctx); err != nil {
		w.fail("runtime start (recovery): %v", err)
	}
	w.startAPI()
}

// shutdown stops the runtime and closes the store, without looking at
// what they return: after a crash clone was taken nothing they do counts.
func (w *world) shutdown() {
	if w.rt == nil {
		return
	}
	w.stopAPI()
	w.stopFollowers()
	done := make(chan struct{})
	w.gclk.stop()
	go func() {
		w.inj.releaseAll()
		w.rt.Close()
		_ = w.st.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(settleBound):
		panic(failure{"runtime Close did not return"})
	}
	w.rt, w.st = nil, nil
}

// crash replaces the disk by its crash clone (keepUnsynced: every byte
// written, else only what was synced), drops the process and recovers.
// The clone is taken first, so anything the old process still does (an
// append released from a held sync) cannot reach the new disk.
func (w *world) crash(keepUnsynced bool, why string) {
	w.crashes++
	pct := 0
	if keepUnsynced {
		pct = 100 // 0 and 100 only: in between, MemFS draws per file in map order (not reproducible)
	}
	clone := w.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(w.cfg.seed, uint64(w.step)))})
	w.logf("crash (%s), unsynced data kept: %d%%", why, pct)
	w.shutdown()
	w.states = nil // seen again after recovery
	w.mem = clone
	w.inj = &injector{}
	w.open()
	w.afterRecovery()
}

// afterRecovery checks what survived the crash and reports it.
func (w *world) afterRecovery() {
	for _, s := range w.sessions {
		hist := w.history(s.id)
		if !s.started && len(hist) > 0 {
			s.started = true
		}
		ids := msgIDs(hist)
		for _, e := range s.sent {
			id := e.MessageId
			if s.acked[id] && !ids[id] {
				w.fail("acknowledged envelope %s of %s lost in the crash (history %s)", id, s.id, kinds(hist))
			}
		}
		for _, id := range sortedKeys(s.unsure) {
			if ids[id] {
				w.logf("  %s: unacknowledged %s survived", s.id, id)
				s.acked[id] = true // in history now: a duplicate from here on
			} else {
				w.logf("  %s: unacknowledged %s absent", s.id, id)
			}
			delete(s.unsure, id)
		}
	}
	for _, id := range sortedKeys(w.policies) {
		if _, cerr := w.reg.GetPolicy(id); cerr != nil {
			w.fail("acknowledged policy %s lost in the crash: %v", id, cerr)
		}
	}
	w.recheckFollowers()
	w.recheckAttachments()
	w.recheckFeeds()
	w.settle()
}

// injector is the disk's fault plan (errorfs): at most one fault armed at
// a time, on Pebble's write-ahead log only, disarmed by settle.
type injector struct {
	mu      sync.Mutex
	kind    string // "", "fsync", "enospc", "hold"
	hits    int
	entered chan struct{}
	release chan struct{}
}

func (f *injector) String() string { return "sim injector" }

func isSync(k errorfs.OpKind) bool {
	return k == errorfs.OpFileSync || k == errorfs.OpFileSyncData || k == errorfs.OpFileSyncTo
}

func (f *injector) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	f.mu.Lock()
	switch {
	case f.kind == "fsync" && isSync(op.Kind):
		f.hits++
		f.mu.Unlock()
		return errorfs.ErrInjected
	case f.kind == "enospc" && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt):
		f.hits++
		f.mu.Unlock()
		return syscall.ENOSPC
	case f.kind == "hold" && isSync(op.Kind):
		f.hits++
		f.kind = ""
		entered, release := f.entered, f.release
		f.mu.Unlock()
		entered <- struct{}{}
		<-release
		return nil
	}
	f.mu.Unlock()
	return nil
}

func (f *injector) arm(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kind, f.hits = kind, 0
	if kind == "hold" {
		f.entered, f.release = make(chan struct{}, 1), make(chan struct{})
	}
}

func (f *injector) disarm() (hits int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kind != "hold" {
		f.kind = ""
	}
	return f.hits
}

func (f *injector) releaseAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kind = ""
	if f.release != nil {
		select {
		case <-f.release:
		default:
			close(f.release)
		}
	}
}

// wait polls cond until it holds; false if settleBound passed.
func wait(cond func() bool) bool {
	limit := time.Now().Add(settleBound)
	for !cond() {
		if time.Now().After(limit) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

var errStop = errors.New("stop")
