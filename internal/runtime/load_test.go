package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
)

func resident(r *Runtime, id string) bool { return r.lookup(id) != nil }

// Issue #4 recovery: OPEN sessions are rebuilt at start; terminal ones are
// not loaded until someone asks, and answer from the store meanwhile.
func TestRecoveryLoadsOnlyOpenSessions(t *testing.T) {
	mem := memstore.New()
	r1 := newRT(t, mem, Options{})
	open := openSession(t, r1, 0)
	done := openSession(t, r1, 0)
	mustOK(t, r1, initID, commitEnv(done, "c", "c1"))
	r1.Close()

	r2 := newRT(t, mem, Options{})
	if !resident(r2, open) || resident(r2, done) {
		t.Fatalf("after recovery: open resident=%v, terminal resident=%v", resident(r2, open), resident(r2, done))
	}
	md, err := r2.GetSession(context.Background(), aliceID, done)
	if err != nil || md.State != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("GetSession of a terminal session on disk: %v %v", md, err)
	}
	if resident(r2, done) {
		t.Fatal("GetSession loaded the terminal session instead of using its stored metadata")
	}
	if _, err := r2.GetSession(context.Background(), coord.Identity{Sender: "mallory"}, done); err == nil || err.Code != coord.CodeForbidden {
		t.Fatalf("outsider: %v", err)
	}
	if n := len(r2.ListSessions(context.Background(), initID)); n != 2 {
		t.Fatalf("ListSessions: %d sessions, want 2", n)
	}
	// A retried final message loads the session and is a duplicate.
	if ack := r2.Send(context.Background(), initID, commitEnv(done, "c", "c1")); !ack.Ok || !ack.Duplicate {
		t.Fatalf("resent final Commitment: %v", ack)
	}
	if !resident(r2, done) {
		t.Fatal("resend did not load the session")
	}
	// A SessionStart reusing a terminal session's id is refused even
	// though the session was not resident.
	r3 := newRT(t, mem, Options{})
	wantCode(t, r3.Send(context.Background(), initID, startEnv(done, "other", 60_000)), coord.CodeSessionAlreadyExists)
}

// Terminal sessions leave memory after EvictAfter and come back on demand
// with their dedup set.
func TestEvictionAndReload(t *testing.T) {
	mem := memstore.New()
	r := newRT(t, mem, Options{EvictAfter: 20 * time.Millisecond})
	sid := openSession(t, r, 0)
	mustOK(t, r, initID, commitEnv(sid, "c", "c1"))
	eventually(t, 5*time.Second, "eviction", func() bool { return !resident(r, sid) })
	if ack := r.Send(context.Background(), initID, proposalEnv(sid, "m1")); !ack.Ok || !ack.Duplicate {
		t.Fatalf("duplicate after eviction: %v", ack)
	}
	wantCode(t, r.Send(context.Background(), initID, proposalEnv(sid, "new")), coord.CodeSessionNotOpen)
}

// Retention purges whole terminal sessions, never open ones.
func TestRetentionPurgesTerminalSessions(t *testing.T) {
	mem := memstore.New()
	r := newRT(t, mem, Options{Retention: 50 * time.Millisecond})
	open := openSession(t, r, 0)
	done := openSession(t, r, 0)
	mustOK(t, r, initID, commitEnv(done, "c", "c1"))
	eventually(t, 5*time.Second, "purge", func() bool {
		_, err := mem.Info(context.Background(), done)
		return err == store.ErrNotFound
	})
	if _, err := mem.Info(context.Background(), open); err != nil {
		t.Fatalf("open session purged: %v", err)
	}
	if _, err := r.GetSession(context.Background(), initID, done); err == nil || err.Code != coord.CodeSessionNotFound {
		t.Fatalf("purged session: %v", err)
	}
}

// Registered extension modes survive a restart with their sessions;
// unregistered ones stay replayable but cannot start sessions, and their
// name cannot be reused with another descriptor (issue #4 item 3).
func TestExtModesAreDurable(t *testing.T) {
	mem := memstore.New()
	admin := coord.Identity{Sender: "admin", Caps: coord.Capabilities{CanManageModeRegistry: true}}
	desc := &macpv1.ModeDescriptor{Mode: "ext.vote.v1", ModeVersion: "1.0.0", MessageTypes: []string{"Ballot"}}
	// The runtime resolves modes through the registry, which stores the
	// registrations (package registry) and is loaded before each start.
	newRTReg := func() (*Runtime, *registry.Registry) {
		reg := registry.New(mem, testModes(), policy.DefaultOnly{}, registry.Options{})
		if err := reg.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		r := New(mem, reg, reg, Options{})
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r, reg
	}
	r1, reg1 := newRTReg()
	if err := reg1.RegisterExtMode(admin, desc); err != nil {
		t.Fatal(err)
	}
	sid := newSID()
	start := startEnv(sid, "m0", 60_000)
	start.Mode = "ext.vote.v1"
	mustOK(t, r1, initID, start)
	ballot := sessionEnv(sid, "b1", "Ballot", []byte("x"))
	ballot.Mode = "ext.vote.v1"
	mustOK(t, r1, aliceID, ballot)
	r1.Close()

	r2, reg2 := newRTReg()
	if _, ok := reg2.Modes().Lookup("ext.vote.v1"); !ok {
		t.Fatal("registration lost on restart")
	}
	if v := inspect(t, r2, sid); v.seq != 2 {
		t.Fatalf("session of the extension mode after restart: %+v", v)
	}
	if err := reg2.UnregisterExtMode(admin, "ext.vote.v1"); err != nil {
		t.Fatal(err)
	}
	r2.Close()

	r3, reg3 := newRTReg()
	if _, ok := reg3.Modes().Lookup("ext.vote.v1"); ok {
		t.Fatal("unregistered mode came back")
	}
	if v := inspect(t, r3, sid); v.seq != 2 {
		t.Fatalf("session of a retired mode must still replay: %+v", v)
	}
	start2 := startEnv(newSID(), "m0", 60_000)
	start2.Mode = "ext.vote.v1"
	wantCode(t, r3.Send(context.Background(), initID, start2), coord.CodeModeNotSupported)
	other := &macpv1.ModeDescriptor{Mode: "ext.vote.v1", ModeVersion: "2.0.0", MessageTypes: []string{"Ballot"}}
	if err := reg3.RegisterExtMode(admin, other); err == nil {
		t.Fatal("re-registered a retired name with another descriptor")
	}
}

// readFailStore fails every Read while failing is set, the way a remote
// store fails to answer (a timeout): the history itself is sound.
type readFailStore struct {
	store.Store
	failing atomic.Bool
}

var errStoreTimeout = errors.New("store: request timed out")

func (s *readFailStore) Read(ctx context.Context, id string, from uint64, fn func(session.Record) error) error {
	if s.failing.Load() {
		return errStoreTimeout
	}
	return s.Store.Read(ctx, id, from, fn)
}

// A store that fails to serve a history is not a damaged history: a
// session loaded on demand (a call, a follower, a partition taken over)
// while the store fails to answer is not quarantined (that lasted until
// the process restarted, so a sound session stayed unusable on a live node
// after one timeout). The load answers INTERNAL_ERROR and the next one,
// once the store answers, serves the session. A history the core refuses
// is still quarantined (TestRecoveryQuarantinesUnreplayableHistory); boot
// still quarantines what it cannot read (TestRecoveryReplaysInParallel),
// so that one unreadable session does not keep a node from serving the
// others.
func TestStoreReadFailureIsNotQuarantine(t *testing.T) {
	fs := &readFailStore{Store: memstore.New()}
	r1 := newRT(t, fs, Options{})
	open := openSession(t, r1, 0)
	done := openSession(t, r1, 0)
	mustOK(t, r1, initID, commitEnv(done, "c", "c1"))
	r1.Close()

	r2 := newRT(t, fs, Options{}) // the OPEN session loads; the terminal one waits to be asked for
	if resident(r2, done) {
		t.Fatal("terminal session loaded at boot")
	}
	fs.failing.Store(true)
	for range 2 {
		cerr := r2.Inspect(context.Background(), done, func(*session.Session) {})
		if cerr == nil || cerr.Code != coord.CodeInternalError {
			t.Fatalf("Inspect while the store fails: %v, want INTERNAL_ERROR", cerr)
		}
	}
	if q := r2.Quarantined(); len(q) != 0 {
		t.Fatalf("a store failure quarantined %v", q)
	}
	fs.failing.Store(false)
	if v := inspect(t, r2, done); v.seq != 3 {
		t.Fatalf("after the store recovered: %+v, want the whole history (3 records)", v)
	}
	if ack := r2.Send(context.Background(), initID, proposalEnv(done, "m1")); !ack.Ok || !ack.Duplicate {
		t.Fatalf("resend after the store recovered: %v, want a duplicate", ack)
	}
	if v := inspect(t, r2, open); v.seq != 2 {
		t.Fatalf("open session: %+v", v)
	}
}
