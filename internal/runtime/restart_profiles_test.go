package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// profileLimits are the admission limits of a runtime whose new sessions
// are bound to profile (MACP_PROFILE), with a one-hour suspension cap
// (MACP_MAX_SUSPEND_MS).
func profileLimits(profile string) session.Limits {
	lim := session.DefaultLimits()
	lim.Profile = profile
	lim.MaxSuspendMs = 3_600_000
	return lim
}

// startCapped is startAt with the SessionStart's max_suspend_ms set.
func startCapped(clk *clocktest.Fake, sid string, ttlMs, maxSuspendMs int64) *macpv1.Envelope {
	env := startAt(clk, sid, "m0", ttlMs)
	env.Payload = mustMarshal(&macpv1.SessionStartPayload{
		Intent: "decide", Participants: []string{aliceID.Sender, bobID.Sender},
		ModeVersion: decision.ModeVersion, ConfigurationVersion: cfgVersion, TtlMs: ttlMs, MaxSuspendMs: maxSuspendMs,
	})
	return env
}

// profSessState is what a restart must preserve of one session.
type profSessState struct {
	status                            session.Status
	seq                               uint64
	profile                           string
	deadline, maxSuspend              int64
	suspendedTotal, suspendedAt, bank int64
	expiry                            int64 // ExpiryMs, 0 once terminal
	md                                *macpv1.SessionMetadata
}

func (a profSessState) String() string {
	return fmt.Sprintf("%s seq=%d profile=%s deadline=%d cap=%d suspended(total=%d at=%d banked=%d) expiry=%d",
		a.status, a.seq, a.profile, a.deadline, a.maxSuspend, a.suspendedTotal, a.suspendedAt, a.bank, a.expiry)
}

func profStateOf(t *testing.T, r *Runtime, sid string) profSessState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var st profSessState
	if err := r.Inspect(ctx, sid, func(s *session.Session) {
		st = profSessState{status: s.Status, seq: s.Seq, profile: s.Binding.Profile, deadline: s.DeadlineMs, maxSuspend: s.MaxSuspendMs,
			suspendedTotal: s.SuspendedTotalMs, suspendedAt: s.SuspendedAtMs, bank: s.BankedMs}
		st.expiry, _ = s.ExpiryMs()
	}); err != nil {
		t.Fatalf("Inspect %s: %v", sid, err)
	}
	md, cerr := r.GetSession(ctx, initID, sid)
	if cerr != nil {
		t.Fatalf("GetSession %s: %v", sid, cerr)
	}
	st.md = md
	return st
}

func sameSessState(a, b profSessState) bool {
	mdA, mdB := a.md, b.md
	a.md, b.md = nil, nil
	return a == b && proto.Equal(mdA, mdB)
}

func mustControlAck(t *testing.T, what string, ack *macpv1.Ack, err *coord.Error, want macpv1.SessionState) {
	t.Helper()
	if err != nil || ack == nil || !ack.Ok || ack.SessionState != want {
		t.Fatalf("%s: ack %v, err %v; want ok %s", what, ack, err, want)
	}
}

func countRecKind(recs []session.Record, k session.Kind) int {
	n := 0
	for _, r := range recs {
		if r.Kind == k {
			n++
		}
	}
	return n
}

// Issue 25 "Done when": a Pebble store holding sessions of both profiles
// comes back exactly after a restart. Runtime 1 runs with MACP_PROFILE
// 2026-04, runtime 2 (same data directory, same fake clock) with latest,
// runtime 3 with 2026-04 again. Sessions of each profile are resolved,
// cancelled (EXPIRED under 2026-04, CANCELLED under latest, also from
// SUSPENDED), suspended, resumed with their TTL moved, and left OPEN.
// After each restart every session's state, deadline, suspension
// bookkeeping, profile and GetSession metadata are what they were; the
// sessions bound to the other profile keep their own cancellation rule
// (a session's profile is its start record's, not the server's); one
// latest session suspended across the restart is expired by its
// suspension cap exactly once, at the first instant past the cap; the
// resumed session expires at its moved deadline, not the original one;
// and internal/replay/verify (macpctl verify) verifies every session.
func TestRestartSessionsOfBothProfiles(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	clk := clocktest.New()
	t0 := clk.NowMs()
	openStore := func() *pebblestore.Store {
		st, err := pebblestore.Open(dir, pebblestore.Options{})
		if err != nil {
			t.Fatalf("pebblestore.Open: %v", err)
		}
		return st
	}
	var st *pebblestore.Store
	boot := func(profile string) *Runtime {
		t.Helper()
		st = openStore()
		r := New(st, testModes(), defaultPolicies, Options{Clock: clk, Limits: profileLimits(profile)})
		if err := r.Start(ctx); err != nil {
			t.Fatalf("Start (%s): %v", profile, err)
		}
		return r
	}
	shutdown := func(r *Runtime) {
		t.Helper()
		r.Close()
		if err := st.Close(); err != nil {
			t.Fatalf("store Close: %v", err)
		}
	}
	suspend := func(r *Runtime, sid string) {
		t.Helper()
		ack, err := r.Suspend(ctx, initID, sid, "waiting")
		mustControlAck(t, "suspend "+sid, ack, err, macpv1.SessionState_SESSION_STATE_SUSPENDED)
	}
	resume := func(r *Runtime, sid string) {
		t.Helper()
		ack, err := r.Resume(ctx, initID, sid, "ready")
		mustControlAck(t, "resume "+sid, ack, err, macpv1.SessionState_SESSION_STATE_OPEN)
	}
	cancelAs := func(r *Runtime, sid string, want macpv1.SessionState) {
		t.Helper()
		ack, err := r.Cancel(ctx, initID, sid, "not needed")
		mustControlAck(t, "cancel "+sid, ack, err, want)
	}
	start := func(r *Runtime, ttl, maxSuspend int64) string {
		t.Helper()
		sid := newSID()
		mustOK(t, r, initID, startCapped(clk, sid, ttl, maxSuspend))
		mustOK(t, r, aliceID, proposalEnv(sid, "m1")) // latest: only declared participants propose
		return sid
	}
	const long = 600_000 // ten minutes: no expiry by TTL in this test but the one checked

	// Runtime 1: 2026-04.
	r1 := boot(coord.ProfileApril)
	aResolved := start(r1, long, 0)
	mustOK(t, r1, initID, commitEnv(aResolved, "c", "c1"))
	aCancelled := start(r1, long, 0)
	cancelAs(r1, aCancelled, macpv1.SessionState_SESSION_STATE_EXPIRED)
	aSuspCancelled := start(r1, long, 0)
	suspend(r1, aSuspCancelled)
	cancelAs(r1, aSuspCancelled, macpv1.SessionState_SESSION_STATE_EXPIRED)
	aSuspended := start(r1, long, 0) // cap: the runtime's, one hour
	aOpen := start(r1, long, 0)
	aMoved := start(r1, 60_000, 0) // deadline t0+60s
	clk.Advance(10 * time.Second)
	suspend(r1, aMoved) // banks 50 s
	suspend(r1, aSuspended)
	clk.Advance(20 * time.Second)
	resume(r1, aMoved) // deadline now t0+30s+50s
	if got := profStateOf(t, r1, aMoved); got.deadline != t0+80_000 || got.status != session.Open || got.suspendedTotal != 20_000 {
		t.Fatalf("resumed April session: %v; want deadline %d", got, t0+80_000)
	}
	aIDs := []string{aResolved, aCancelled, aSuspCancelled, aSuspended, aOpen, aMoved}
	shutdown(r1)

	// Runtime 2: latest, over the same data directory.
	r2 := boot(coord.ProfileLatest)
	lResolved := start(r2, long, 0)
	mustOK(t, r2, initID, commitEnv(lResolved, "c", "c1"))
	lCancelled := start(r2, long, 0)
	cancelAs(r2, lCancelled, macpv1.SessionState_SESSION_STATE_CANCELLED)
	lSuspCancelled := start(r2, long, 0)
	suspend(r2, lSuspCancelled)
	clk.Advance(time.Second)
	cancelAs(r2, lSuspCancelled, macpv1.SessionState_SESSION_STATE_CANCELLED)
	lCapped := start(r2, long, 5_000) // suspended across the restart; its cap fires after it
	lMoved := start(r2, long, 0)
	lOpen := start(r2, long, 0)
	suspend(r2, lMoved)
	suspend(r2, lCapped)
	capAt := clk.NowMs() + 5_000 + 1 // the first instant the 5 s cap is exceeded
	clk.Advance(3 * time.Second)
	resume(r2, lMoved)
	lIDs := []string{lResolved, lCancelled, lSuspCancelled, lCapped, lMoved, lOpen}
	all := slices.Concat(aIDs, lIDs)

	before := map[string]profSessState{}
	for _, sid := range all {
		before[sid] = profStateOf(t, r2, sid)
	}
	for _, sid := range aIDs {
		if p := before[sid].profile; p != coord.ProfileApril {
			t.Fatalf("April session %s bound to %q", sid, p)
		}
	}
	for _, sid := range lIDs {
		if p := before[sid].profile; p != coord.ProfileLatest {
			t.Fatalf("latest session %s bound to %q", sid, p)
		}
	}
	for sid, want := range map[string]session.Status{
		aResolved: session.Resolved, aCancelled: session.Expired, aSuspCancelled: session.Expired, aSuspended: session.Suspended,
		aOpen: session.Open, aMoved: session.Open, lResolved: session.Resolved, lCancelled: session.Cancelled,
		lSuspCancelled: session.Cancelled, lCapped: session.Suspended, lMoved: session.Open, lOpen: session.Open,
	} {
		if got := before[sid].status; got != want {
			t.Fatalf("session %s is %s before the restart, want %s", sid, got, want)
		}
	}
	if c := before[lCapped]; c.maxSuspend != 5_000 || c.expiry != capAt {
		t.Fatalf("capped session: %v; want cap 5000, expiry %d", c, capAt)
	}
	if c := before[aSuspended]; c.maxSuspend != 3_600_000 {
		t.Fatalf("April suspended session: %v; want the runtime's cap", c)
	}
	if m := before[lMoved]; m.deadline != m.md.StartedAtUnixMs+long+3_000 {
		t.Fatalf("resumed latest session: %v; want its deadline moved by 3 s", m)
	}
	shutdown(r2)

	// Runtime 3: 2026-04 again. Nothing changed while it was down.
	r3 := boot(coord.ProfileApril)
	for _, sid := range all {
		if got := profStateOf(t, r3, sid); !sameSessState(got, before[sid]) {
			t.Fatalf("session %s after the restart:\n%v\n%v\nwant\n%v\n%v", sid, got, got.md, before[sid], before[sid].md)
		}
	}
	var openIDs []string
	if err := st.ListOpen(ctx, func(info store.SessionInfo) error { openIDs = append(openIDs, info.SessionID); return nil }); err != nil {
		t.Fatal(err)
	}
	wantOpen := []string{aSuspended, aOpen, aMoved, lCapped, lMoved, lOpen}
	if slices.Sort(openIDs); !slices.Equal(openIDs, slices.Sorted(slices.Values(wantOpen))) {
		t.Fatalf("ListOpen after the restarts = %v, want %v", openIDs, wantOpen)
	}
	// The recovered capped session's timer is armed at its cap.
	if !heapHas(r3, lCapped, capAt) {
		t.Fatalf("no timer for the suspended session at its cap %d", capAt)
	}
	eventually(t, 10*time.Second, "the timer loop to wait for the cap", func() bool {
		return slices.ContainsFunc(clk.Deadlines(), time.UnixMilli(capAt).Equal)
	})
	// One millisecond before the cap: still SUSPENDED.
	clk.Advance(time.Duration(capAt-1-clk.NowMs()) * time.Millisecond)
	if s, _ := getState(r3, initID, lCapped); s != macpv1.SessionState_SESSION_STATE_SUSPENDED {
		t.Fatalf("capped session is %v before its cap", s)
	}
	clk.Advance(time.Millisecond) // the cap is exceeded
	eventually(t, 10*time.Second, "the suspension cap to expire the session", func() bool {
		recs := stored(t, st, lCapped)
		return recs[len(recs)-1].Kind == session.KindExpire
	})
	recs := stored(t, st, lCapped)
	last := recs[len(recs)-1]
	if countRecKind(recs, session.KindExpire) != 1 || last.AcceptedAtMs != capAt || last.Status != session.Expired ||
		last.Final.GetState() != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("capped session's history ends with %s at %d (%s), %d expire records; want one expiry at %d",
			last.Kind, last.AcceptedAtMs, last.Status, countRecKind(recs, session.KindExpire), capAt)
	}

	// The resumed April session outlives its original deadline (t0+60s)
	// and expires at the moved one (t0+80s); the latest session bound to
	// the other profile is cancelled CANCELLED by this April server, the
	// April one EXPIRED.
	clk.Advance(time.Duration(t0+60_000-clk.NowMs()) * time.Millisecond)
	if s, _ := getState(r3, initID, aMoved); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("resumed session is %v at its original deadline", s)
	}
	eventually(t, 10*time.Second, "the timer loop to wait for the moved deadline", func() bool {
		return slices.ContainsFunc(clk.Deadlines(), time.UnixMilli(t0+80_000).Equal)
	})
	clk.Advance(20 * time.Second)
	eventually(t, 10*time.Second, "the resumed session to expire", func() bool {
		recs := stored(t, st, aMoved)
		return recs[len(recs)-1].Kind == session.KindExpire
	})
	if recs := stored(t, st, aMoved); recs[len(recs)-1].AcceptedAtMs != t0+80_000 {
		t.Fatalf("resumed session expired at %d, want its moved deadline %d", recs[len(recs)-1].AcceptedAtMs, t0+80_000)
	}
	cancelAs(r3, lOpen, macpv1.SessionState_SESSION_STATE_CANCELLED)
	cancelAs(r3, aOpen, macpv1.SessionState_SESSION_STATE_EXPIRED)
	// The suspended April session resumes with its banked TTL.
	resume(r3, aSuspended)
	after3 := map[string]profSessState{}
	for _, sid := range all {
		after3[sid] = profStateOf(t, r3, sid)
	}
	if a := after3[aSuspended]; a.deadline != clk.NowMs()+before[aSuspended].bank {
		t.Fatalf("April session resumed after the restarts: %v; want deadline now+%d", a, before[aSuspended].bank)
	}
	shutdown(r3)

	// Offline: what macpctl verify runs, over every session of both profiles.
	st = openStore()
	res := map[string]verify.SessionResult{}
	ok, failed, err := verify.Verify(ctx, st, testModes(), session.DefaultLimits(), func(r verify.SessionResult) { res[r.SessionID] = r })
	if err != nil || ok != len(all) || failed != 0 {
		t.Fatalf("verify: %d ok, %d failed, %v: %v", ok, failed, err, res)
	}
	for _, sid := range all {
		if res[sid].Status != after3[sid].status {
			t.Fatalf("verify replays %s as %s, the runtime had %s", sid, res[sid].Status, after3[sid].status)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Runtime 4 (latest): the expiry fired once, and nothing else moved.
	r4 := boot(coord.ProfileLatest)
	defer shutdown(r4)
	for _, sid := range all {
		if got := profStateOf(t, r4, sid); !sameSessState(got, after3[sid]) {
			t.Fatalf("session %s after the last restart:\n%v\nwant\n%v", sid, got, after3[sid])
		}
	}
	if n := countRecKind(stored(t, st, lCapped), session.KindExpire); n != 1 {
		t.Fatalf("the capped session has %d expire records", n)
	}
}

// A SUSPENDED session whose suspension cap passes while the runtime is
// down (Pebble, fake clock) expires exactly once after the restart, under
// a server bound to the other profile: by its timer, due at boot, at the
// restarted runtime's instant; or, when a ResumeSession comes first, by
// that resume (SESSION_NOT_OPEN, the expiry stored), after which its timer
// finds nothing to do. A third session, resumed before the cap, is OPEN
// with its banked TTL.
func TestRestartSuspensionCapPassedWhileDown(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	clk := clocktest.New()
	st, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r1 := New(st, testModes(), defaultPolicies, Options{Clock: clk, Limits: profileLimits(coord.ProfileLatest)})
	if err := r1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var byTimer, byResume, resumed string
	for _, p := range []*string{&byTimer, &byResume, &resumed} {
		*p = newSID()
		mustOK(t, r1, initID, startCapped(clk, *p, 600_000, 1_000))
		ack, cerr := r1.Suspend(ctx, initID, *p, "waiting")
		mustControlAck(t, "suspend", ack, cerr, macpv1.SessionState_SESSION_STATE_SUSPENDED)
	}
	clk.Advance(500 * time.Millisecond)
	ack, cerr := r1.Resume(ctx, initID, resumed, "ready")
	mustControlAck(t, "resume", ack, cerr, macpv1.SessionState_SESSION_STATE_OPEN)
	wantDeadline := clk.NowMs() + 600_000
	r1.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second) // both caps pass while down

	st, err = pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r2, due := newRTHeldTimers(t, st, Options{Clock: clk, Limits: profileLimits(coord.ProfileApril)})
	fired := map[string]bool{}
	for range 2 {
		fired[recv(t, due, "a due suspension cap")] = true
	}
	if !fired[byTimer] || !fired[byResume] {
		t.Fatalf("due at boot: %v; want the two suspended sessions", fired)
	}
	// ResumeSession first: the session expires instead.
	if ack, cerr := r2.Resume(ctx, initID, byResume, "too late"); cerr == nil || cerr.Code != coord.CodeSessionNotOpen || ack != nil {
		t.Fatalf("resume past the cap: %v %v; want SESSION_NOT_OPEN", ack, cerr)
	}
	now := clk.NowMs()
	r2.expireByTimer(byResume)
	r2.expireByTimer(byTimer)
	eventually(t, 10*time.Second, "the timer's expiry to be stored", func() bool {
		recs := stored(t, st, byTimer)
		return recs[len(recs)-1].Kind == session.KindExpire
	})
	r2.Close() // waits for the expiry workers
	for _, sid := range []string{byTimer, byResume} {
		recs := stored(t, st, sid)
		last := recs[len(recs)-1]
		if len(recs) != 3 || countRecKind(recs, session.KindExpire) != 1 || last.Kind != session.KindExpire || last.AcceptedAtMs != now {
			t.Fatalf("session %s (by timer %v): %d records, last %s at %d; want start, suspend, one expiry at %d", sid, sid == byTimer, len(recs), last.Kind, last.AcceptedAtMs, now)
		}
	}
	if recs := stored(t, st, resumed); len(recs) != 3 || recs[2].Kind != session.KindResume || recs[0].Start.Profile != coord.ProfileLatest {
		t.Fatalf("resumed session: %d records", len(recs))
	}
	r3 := newRT(t, st, Options{Clock: clk, Limits: profileLimits(coord.ProfileApril)})
	if got := profStateOf(t, r3, resumed); got.status != session.Open || got.deadline != wantDeadline || got.suspendedTotal != 500 {
		t.Fatalf("resumed session after the restarts: %v; want OPEN, deadline %d", got, wantDeadline)
	}
	ok, failed, err := verify.Verify(ctx, st, testModes(), session.DefaultLimits(), nil)
	if err != nil || ok != 3 || failed != 0 {
		t.Fatalf("verify: %d ok, %d failed, %v", ok, failed, err)
	}
}
