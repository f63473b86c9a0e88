package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/testutil"
)

// Issue 31 "Cluster": suspension, resumption and the suspension cap across
// nodes, cancel racing suspend, and both profiles in one shared store.

// cappedStart is a Decision SessionStart with max_suspend_ms set.
func cappedStart(sid string, ttlMs, maxSuspendMs int64) *macpv1.Envelope {
	return testutil.DecisionEnv(sid, "m0", coord.TypeSessionStart, mustMarshal(&macpv1.SessionStartPayload{
		Intent: "decide", Participants: []string{aliceID.Sender, bobID.Sender},
		ModeVersion: testutil.DecisionVersion, ConfigurationVersion: cfgVersion, TtlMs: ttlMs, MaxSuspendMs: maxSuspendMs,
	}))
}

// control runs Suspend, Resume or Cancel as id through node i's runtime.
func (e *env) control(i int, op string, id coord.Identity, sid string) (*macpv1.Ack, *coord.Error) {
	rt := e.node(i).Runtime()
	ctx := context.Background()
	switch op {
	case "suspend":
		return rt.Suspend(ctx, id, sid, "test")
	case "resume":
		return rt.Resume(ctx, id, sid, "test")
	default:
		return rt.Cancel(ctx, id, sid, "test")
	}
}

// kinds counts a session's stored records by kind.
func kinds(recs []session.Record) map[session.Kind]int {
	n := map[session.Kind]int{}
	for _, r := range recs {
		n[r.Kind]++
	}
	return n
}

// A session suspended through one node is SUSPENDED on every node and
// refuses messages on all of them; resumed through another, it is OPEN
// everywhere and takes messages again (RFC-MACP-0001 §7.5).
func TestSuspendResumeAcrossNodes(t *testing.T) {
	e := newEnvProfiles(t, 3, 3, false, []string{coord.ProfileLatest, coord.ProfileLatest, coord.ProfileLatest})
	sid := newSID()
	if a := e.send(0, initID, startEnv(sid, "m0", 60_000)); !a.GetOk() {
		t.Fatalf("start: %s", ackString(a))
	}
	if a, cerr := e.control(1, "suspend", initID, sid); cerr != nil || !a.GetOk() {
		t.Fatalf("suspend on node 1: %v %s", cerr, ackString(a))
	}
	for i := 0; i < 3; i++ {
		waitState(t, e, i, sid, macpv1.SessionState_SESSION_STATE_SUSPENDED)
	}
	if a := e.send(2, aliceID, proposalEnv(sid, "m1")); a.GetOk() || a.GetError().GetCode() != string(coord.CodeSessionNotOpen) {
		t.Fatalf("proposal to a suspended session on node 2: %s", ackString(a))
	}
	if a, cerr := e.control(2, "resume", initID, sid); cerr != nil || !a.GetOk() {
		t.Fatalf("resume on node 2: %v %s", cerr, ackString(a))
	}
	for i := 0; i < 3; i++ {
		waitState(t, e, i, sid, macpv1.SessionState_SESSION_STATE_OPEN)
	}
	if a := e.send(0, aliceID, proposalEnv(sid, "m2")); !a.GetOk() {
		t.Fatalf("proposal after resume on node 0: %s", ackString(a))
	}
	recs := history(t, e.reader(), sid)
	var got []session.Kind
	for _, r := range recs {
		got = append(got, r.Kind)
	}
	want := []session.Kind{session.KindStart, session.KindSuspend, session.KindResume, session.KindMessage}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history kinds %v, want %v", got, want)
	}
}

// A suspended session does not expire on its banked TTL on any node; its
// suspension cap (max_suspend_ms) ends it exactly once across the nodes
// that all arm it, and every node reports it EXPIRED.
func TestSuspensionCapOnceAcrossNodes(t *testing.T) {
	e := newEnvProfiles(t, 3, 3, false, []string{coord.ProfileLatest, coord.ProfileLatest, coord.ProfileLatest})
	sid := newSID()
	// TTL 1.2 s, cap 2.5 s: the TTL would pass during the suspension.
	if a := e.send(0, initID, cappedStart(sid, 1200, 2500)); !a.GetOk() {
		t.Fatalf("start: %s", ackString(a))
	}
	if a, cerr := e.control(1, "suspend", initID, sid); cerr != nil || !a.GetOk() {
		t.Fatalf("suspend: %v %s", cerr, ackString(a))
	}
	for i := 0; i < 3; i++ {
		waitState(t, e, i, sid, macpv1.SessionState_SESSION_STATE_EXPIRED)
	}
	recs := history(t, e.reader(), sid)
	n := kinds(recs)
	if n[session.KindExpire] != 1 || n[session.KindSuspend] != 1 || len(recs) != 3 {
		t.Fatalf("history %v: want a start, one suspend and one expiry", n)
	}
	susp, exp := recs[1], recs[2]
	if held := exp.AcceptedAtMs - susp.AcceptedAtMs; held < 2500 {
		t.Fatalf("expired %d ms after the suspension, before its 2500 ms cap (the banked TTL fired)", held)
	}
}

// Cancel racing suspend through two nodes: each session ends CANCELLED
// (latest) exactly once, with at most one suspension before it, and every
// node agrees.
func TestCancelRacesSuspendOnce(t *testing.T) {
	e := newEnvProfiles(t, 3, 2, false, []string{coord.ProfileLatest, coord.ProfileLatest})
	ns := e.reader()
	rounds := 8
	if soak() {
		rounds = 100
	}
	for round := 0; round < rounds; round++ {
		sid := newSID()
		if a := e.send(0, initID, startEnv(sid, "m0", 60_000)); !a.GetOk() {
			t.Fatalf("start: %s", ackString(a))
		}
		waitState(t, e, 1, sid, macpv1.SessionState_SESSION_STATE_OPEN)
		var wg sync.WaitGroup
		var cancelAck, suspendAck *macpv1.Ack
		var cancelErr, suspendErr *coord.Error
		wg.Add(2)
		go func() { defer wg.Done(); cancelAck, cancelErr = e.control(round%2, "cancel", initID, sid) }()
		go func() { defer wg.Done(); suspendAck, suspendErr = e.control(1-round%2, "suspend", initID, sid) }()
		wg.Wait()
		if cancelErr != nil || !cancelAck.GetOk() {
			t.Fatalf("round %d: cancel: %v %s", round, cancelErr, ackString(cancelAck))
		}
		suspended := suspendErr == nil && suspendAck.GetOk()
		if !suspended && (suspendErr == nil || suspendErr.Code != coord.CodeSessionNotOpen) && suspendAck.GetError().GetCode() != string(coord.CodeSessionNotOpen) {
			t.Fatalf("round %d: suspend neither accepted nor SESSION_NOT_OPEN: %v %s", round, suspendErr, ackString(suspendAck))
		}
		recs := history(t, ns, sid)
		n := kinds(recs)
		last := recs[len(recs)-1]
		if last.Status != session.Cancelled || n[session.KindSuspend] > 1 || (n[session.KindSuspend] == 1) != suspended {
			t.Fatalf("round %d: history %v ending %v; suspend accepted %v", round, n, last.Status, suspended)
		}
		for i, r := range recs {
			if r.Seq != uint64(i+1) {
				t.Fatalf("round %d: record %d has seq %d", round, i, r.Seq)
			}
		}
		for i := 0; i < 2; i++ {
			waitState(t, e, i, sid, macpv1.SessionState_SESSION_STATE_CANCELLED)
		}
	}
}

// Both profiles in one shared store: node 0 binds new sessions to
// 2026-04 and node 1 to latest; each session keeps its profile on every
// node, so a cancel through either node ends the April session EXPIRED
// and the latest one CANCELLED, whichever node owns it.
func TestBothProfilesInOneStream(t *testing.T) {
	e := newEnvProfiles(t, 3, 2, false, []string{coord.ProfileApril, coord.ProfileLatest})
	// Several pairs, so that with partitioned ownership each node owns
	// sessions of the other's profile (a start forwarded to the owner
	// keeps the profile of the node the client reached).
	for k := 0; k < 6; k++ {
		april, latest := newSID(), newSID()
		if a := e.send(0, initID, startEnv(april, "m0", 60_000)); !a.GetOk() {
			t.Fatalf("start on the April node: %s", ackString(a))
		}
		if a := e.send(1, initID, startEnv(latest, "m0", 60_000)); !a.GetOk() {
			t.Fatalf("start on the latest node: %s", ackString(a))
		}
		waitState(t, e, 1, april, macpv1.SessionState_SESSION_STATE_OPEN)
		waitState(t, e, 0, latest, macpv1.SessionState_SESSION_STATE_OPEN)
		// Each cancelled through the node of the other profile.
		if a, cerr := e.control(1, "cancel", initID, april); cerr != nil || !a.GetOk() {
			t.Fatalf("cancel April session on node 1: %v %s", cerr, ackString(a))
		}
		if a, cerr := e.control(0, "cancel", initID, latest); cerr != nil || !a.GetOk() {
			t.Fatalf("cancel latest session on node 0: %v %s", cerr, ackString(a))
		}
		for i := 0; i < 2; i++ {
			waitState(t, e, i, april, macpv1.SessionState_SESSION_STATE_EXPIRED)
			waitState(t, e, i, latest, macpv1.SessionState_SESSION_STATE_CANCELLED)
		}
		ns := e.reader()
		for sid, want := range map[string]string{april: coord.ProfileApril, latest: coord.ProfileLatest} {
			recs := history(t, ns, sid)
			if got := recs[0].Start.Profile; got != want && !(want == coord.ProfileApril && got == "") {
				t.Fatalf("session %s recorded profile %q, want %q", sid, got, want)
			}
		}
	}
}
