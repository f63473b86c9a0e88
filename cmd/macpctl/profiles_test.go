package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
)

// profileRun drives sessions of one macpd run through the CLI.
type profileRun struct {
	t *testing.T
	a *app.App
	r runner
}

func (p profileRun) start() string {
	p.t.Helper()
	res := p.r.ok("start", "--agent", "coord", "--mode", "macp.mode.decision.v1", "--participants", "coord,alice", "--ttl", "10m",
		"--intent", "profiles")
	return res.lines()[0]
}

func (p profileRun) propose(sid string) {
	p.t.Helper()
	p.r.ok("send", "--agent", "coord", "--session", sid, "--type", "Proposal",
		"--payload-json", `{"proposal_id":"p1","option":"postgres","rationale":"boring"}`)
}

func (p profileRun) resolve(sid string) {
	p.t.Helper()
	p.r.ok("send", "--agent", "alice", "--session", sid, "--type", "Vote", "--payload-json", `{"proposal_id":"p1","vote":"APPROVE"}`)
	p.r.ok("send", "--agent", "coord", "--session", sid, "--type", "Commitment",
		"--payload-json", `{"action":"decision.selected","authority_scope":"team","reason":"approved","outcome_positive":true}`)
}

func (p profileRun) control(op, sid string, want macpv1.SessionState) {
	p.t.Helper()
	res := p.r.ok(op, sid, "--agent", "coord", "--reason", op)
	m := obj(p.t, res.lines()[0])
	if field(m, "ok") != true || field(m, "session_state") != want.String() {
		p.t.Fatalf("%s %s: %s; want %s", op, sid, res.out, want)
	}
}

func (p profileRun) cancel(sid string, want string) {
	p.t.Helper()
	if res := p.r.ok("cancel", sid, "--agent", "coord"); !strings.Contains(res.out, want) {
		p.t.Fatalf("cancel %s: %s; want %s", sid, res.out, want)
	}
}

// bothProfilesDataDir writes a data directory with sessions of both
// profiles: a macpd run with MACP_PROFILE=2026-04, then one with latest on
// the same directory. It returns the session ids by name and the state
// each must verify as.
func bothProfilesDataDir(t *testing.T) (dir string, ids map[string]string, states map[string]string) {
	dir = t.TempDir()
	ids = map[string]string{}
	run := func(profile string, drive func(p profileRun)) {
		a := startApp(t, func(c *config.Config) { c.MemoryOnly, c.DataDir, c.Profile = false, dir, profile })
		p := profileRun{t, a, runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1"}}}
		drive(p)
		if err := a.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	const (
		suspended = macpv1.SessionState_SESSION_STATE_SUSPENDED
		open      = macpv1.SessionState_SESSION_STATE_OPEN
	)
	run(coord.ProfileApril, func(p profileRun) {
		for _, n := range []string{"aResolved", "aCancelled", "aSuspended", "aResumed", "aCrossCancel"} {
			ids[n] = p.start()
		}
		p.propose(ids["aResolved"])
		p.control("suspend", ids["aResolved"], suspended)
		p.control("resume", ids["aResolved"], open)
		p.resolve(ids["aResolved"])
		p.control("suspend", ids["aCancelled"], suspended)
		p.cancel(ids["aCancelled"], "SESSION_STATE_EXPIRED")
		p.propose(ids["aSuspended"])
		p.control("suspend", ids["aSuspended"], suspended)
		p.control("suspend", ids["aResumed"], suspended)
		p.control("resume", ids["aResumed"], open)
		p.propose(ids["aResumed"])
		p.control("suspend", ids["aCrossCancel"], suspended)
	})
	run("latest", func(p profileRun) {
		for _, n := range []string{"lResolved", "lCancelled", "lSuspended"} {
			ids[n] = p.start()
		}
		p.propose(ids["lResolved"])
		p.control("suspend", ids["lResolved"], suspended)
		p.control("resume", ids["lResolved"], open)
		p.resolve(ids["lResolved"])
		p.propose(ids["lCancelled"])
		p.control("suspend", ids["lCancelled"], suspended)
		p.cancel(ids["lCancelled"], "SESSION_STATE_CANCELLED")
		p.control("suspend", ids["lSuspended"], suspended)
		p.control("resume", ids["lSuspended"], open)
		p.control("suspend", ids["lSuspended"], suspended)
		// An April session cancelled by the latest server: its own
		// profile's rule, EXPIRED.
		p.cancel(ids["aCrossCancel"], "SESSION_STATE_EXPIRED")
	})
	states = map[string]string{
		"aResolved": "RESOLVED", "aCancelled": "EXPIRED", "aSuspended": "SUSPENDED", "aResumed": "OPEN", "aCrossCancel": "EXPIRED",
		"lResolved": "RESOLVED", "lCancelled": "CANCELLED", "lSuspended": "SUSPENDED",
	}
	return dir, ids, states
}

// Issue 25: macpctl verify over a data directory holding sessions of both
// profiles (written by a 2026-04 run and a latest run of macpd): every
// session verifies with its state (SUSPENDED kept, CANCELLED only for
// latest sessions, an April session cancelled by the latest server
// EXPIRED).
func TestVerifyBothProfilesDataDir(t *testing.T) {
	dir, ids, states := bothProfilesDataDir(t)
	r := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1"}}
	res := r.ok("verify", "--data-dir", dir)
	if !strings.HasSuffix(res.out, fmt.Sprintf("%d sessions verified, 0 failed\n", len(ids))) {
		t.Fatalf("verify:\n%s", res.out)
	}
	for n, sid := range ids {
		if !strings.Contains(res.out, "OK   "+sid+" "+states[n]+" ") {
			t.Fatalf("verify does not report %s (%s) as %s:\n%s", n, sid, states[n], res.out)
		}
	}
}

// Issue 25 "Done when": macpctl replay --all over the same data directory
// reports 0 diverged, and replaying one session reports its state, how it
// ended and that it matches the store.
//
// Fails at w-durable's base (v25): replay builds each session's snapshot,
// and snapshot.Build refuses the states SUSPENDED and CANCELLED
// ("snapshot: bad input: state SESSION_STATE_SUSPENDED"), so every such
// session is reported diverged (matches_store false).
func TestReplayAllBothProfiles(t *testing.T) {
	dir, ids, states := bothProfilesDataDir(t)
	r := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1"}}
	res := r.run("replay", "--data-dir", dir, "--all")
	if res.code != 0 || res.out != fmt.Sprintf("%d sessions replayed, 0 diverged\n", len(ids)) {
		t.Errorf("replay --all: exit %d\n%s", res.code, res.out)
	}
	for n, endedBy := range map[string]string{"lCancelled": "cancel", "aCancelled": "cancel", "aCrossCancel": "cancel", "lSuspended": "", "aResumed": "", "aResolved": "commitment"} {
		res := r.run("replay", "--data-dir", dir, ids[n])
		m := obj(t, res.lines()[0])
		if field(m, "outcome", "state") != states[n] || field(m, "matches_store") != true || res.code != 0 {
			t.Errorf("replay %s (%s): exit %d %s", n, states[n], res.code, res.out)
			continue
		}
		if endedBy != "" {
			wantField(t, m, endedBy, "outcome", "ended_by")
		} else if v := field(m, "outcome", "ended_by"); v != nil {
			t.Errorf("%s: ended_by %v", n, v)
		}
	}
}

// A what-if (--policy-file) over sessions whose histories hold suspend and
// resume records keeps them: rebinding to a policy that decides nothing
// differently (no Commitment is evaluated) must not diverge, and the
// what-if outcome keeps the stored state (SUSPENDED stays SUSPENDED).
//
// Fails at w-durable's base (v25): snapshot.ReplayWhatIf replays
// KindMessage, KindCancel and KindExpire records only and skips
// KindSuspend/KindResume, so a SUSPENDED session comes out OPEN with its
// control envelopes missing (diverged true), and a resumed session keeps
// its pre-suspension deadline.
func TestReplayWhatIfKeepsSuspension(t *testing.T) {
	dir, ids, states := bothProfilesDataDir(t)
	r := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1"}}
	lenient := filepath.Join(t.TempDir(), "lenient.json")
	if err := os.WriteFile(lenient, []byte(`{"policy_id":"policy.test.lenient","mode":"*","rules":"{}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"aSuspended", "aResumed", "lSuspended", "lCancelled"} {
		res := r.ok("replay", "--data-dir", dir, ids[n], "--policy-file", lenient)
		m := obj(t, res.lines()[0])
		if field(m, "original", "state") != states[n] || field(m, "what_if", "state") != states[n] || field(m, "diverged") != false {
			t.Errorf("what-if of %s (%s): %s", n, states[n], res.out)
		}
	}
}

// Issue 31: macpctl replay --profile re-decides a stored session under the
// other protocol profile's rules (a what-if: exit 0 whatever it finds) and
// reports the first diverging sequence number. A 2026-04 session ended by
// CancelSession (start 1, suspend 2, cancel 3) diverges at 3 under latest,
// where the cancel ends it CANCELLED; a latest one (start, proposal,
// suspend, cancel) at 4 under 2026-04, where it ends EXPIRED; a resolved
// session diverges nowhere, but its what-if snapshot id names the other
// profile.
func TestReplayWhatIfAcrossProfiles(t *testing.T) {
	dir, ids, _ := bothProfilesDataDir(t)
	r := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1"}}
	for _, c := range []struct {
		name, profile, version, stored, whatIf string
		seq                                    float64
	}{
		{"aCancelled", "latest", "2026-09", "EXPIRED", "CANCELLED", 3},
		{"aCrossCancel", "2026-09", "2026-09", "EXPIRED", "CANCELLED", 3},
		{"lCancelled", "2026-04", "2026-04", "CANCELLED", "EXPIRED", 4},
	} {
		res := r.ok("replay", "--data-dir", dir, ids[c.name], "--profile", c.profile)
		m := obj(t, res.lines()[0])
		wantField(t, m, "profile", "rebind", "kind")
		wantField(t, m, c.version, "rebind", "version")
		wantField(t, m, true, "diverged")
		wantField(t, m, c.seq, "first_divergence_seq")
		wantField(t, m, c.stored, "divergence_state", "stored")
		wantField(t, m, c.whatIf, "divergence_state", "what_if")
		wantField(t, m, c.stored, "original", "state")
		wantField(t, m, c.whatIf, "what_if", "state")
		wantField(t, m, c.version, "what_if", "profile")
		wantField(t, m, map[string]string{"a": "2026-04", "l": "2026-09"}[c.name[:1]], "original", "profile")
		if v := field(m, "divergence_code"); v != nil {
			t.Errorf("%s: a state divergence has code %v", c.name, v)
		}
	}
	// No divergence: a suspended-resumed-resolved session under latest.
	plain := obj(t, r.ok("replay", "--data-dir", dir, ids["aResolved"]).lines()[0])
	res := r.ok("replay", "--data-dir", dir, ids["aResolved"], "--profile", "latest")
	m := obj(t, res.lines()[0])
	wantField(t, m, false, "diverged")
	wantField(t, m, "RESOLVED", "what_if", "state")
	if v := field(m, "first_divergence_seq"); v != nil {
		t.Errorf("first_divergence_seq %v", v)
	}
	if w, p := field(m, "what_if_state_snapshot_id"), field(plain, "state_snapshot_id"); w == nil || p == nil || w == p {
		t.Errorf("what-if snapshot %v, stored %v: the profile must reach the id", w, p)
	}
	// Under its own profile the what-if snapshot is the stored one.
	m = obj(t, r.ok("replay", "--data-dir", dir, ids["aResolved"], "--profile", "2026-04").lines()[0])
	wantField(t, m, false, "diverged")
	wantField(t, m, field(plain, "state_snapshot_id"), "what_if_state_snapshot_id")
	// --all: the two April sessions ended by a cancel diverge.
	all := r.ok("replay", "--data-dir", dir, "--all", "--profile", "latest")
	if !strings.HasSuffix(all.out, fmt.Sprintf("%d sessions replayed, 2 diverged\n", len(ids))) ||
		!strings.Contains(all.out, ids["aCancelled"]) || !strings.Contains(all.out, ids["aCrossCancel"]) {
		t.Errorf("replay --all --profile latest:\n%s", all.out)
	}
	// Usage errors.
	for _, args := range [][]string{
		{"--profile", "2031-01"},
		{"--profile", "latest", "--mode-version", "2.0.0"},
	} {
		if res := r.run(append([]string{"replay", "--data-dir", dir, ids["aResolved"]}, args...)...); res.code != 2 {
			t.Errorf("%v: exit %d %s", args, res.code, res.errOut)
		}
	}
}

// Issue 31: snapshots of sessions of both profiles, read from a server
// that now binds new sessions to latest. Offline (--data-dir, the
// recorded profile) equals the server's own service and the online read
// (GetSession, whose metadata does not carry the profile: macpd names it
// in a response header when asked, coord.HeaderSessionProfile) for every
// session, the 2026-04 ones that the history alone cannot tell from
// latest ones (resolved, suspended, open) included. Payloads of latest sessions name
// protocol_profile 2026-09, 2026-04 ones do not; a SUSPENDED session is
// snapshotted with state SUSPENDED and no outcome.
func TestSnapshotBothProfilesOnlineOffline(t *testing.T) {
	dir, ids, states := bothProfilesDataDir(t)
	a := startApp(t, func(c *config.Config) { c.MemoryOnly, c.DataDir, c.Profile = false, dir, "latest" })
	r := runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1"}}
	online, service := map[string]string{}, map[string]string{}
	for n, sid := range ids {
		rep, err := a.Snapshots().StateWindow(context.Background(), sid, snapshotio.Query{})
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		service[n] = string(rep.Snapshot.StateSnapshotID)
		online[n] = r.ok("snapshot", sid, "--agent", "coord", "--payload").out
	}
	if len(online) != len(ids) {
		t.Fatalf("read %d sessions online", len(online))
	}
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	off := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1"}}
	for n, sid := range ids {
		payload := off.ok("snapshot", sid, "--data-dir", dir, "--payload").out
		id := string(snapshot.HashBytes([]byte(strings.TrimSuffix(payload, "\n"))))
		if id != service[n] {
			t.Errorf("%s: offline %s, service %s", n, id, service[n])
		}
		if o, ok := online[n]; ok && o != payload {
			t.Errorf("%s: online\n%s\noffline\n%s", n, o, payload)
		}
		p := obj(t, payload)
		wantField(t, p, states[n], "state")
		want := any(nil)
		if strings.HasPrefix(n, "l") {
			want = "2026-09"
		}
		if got := field(p, "protocol_profile"); got != want {
			t.Errorf("%s: protocol_profile %v, want %v", n, got, want)
		}
		if states[n] == "SUSPENDED" || states[n] == "OPEN" {
			if field(p, "outcome") != nil {
				t.Errorf("%s: a %s session has an outcome: %s", n, states[n], payload)
			}
		} else {
			wantField(t, p, map[string]string{"RESOLVED": "commitment", "EXPIRED": "cancel", "CANCELLED": "cancel"}[states[n]], "outcome", "ended_by")
		}
	}
}
