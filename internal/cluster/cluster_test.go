package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
)

// Commitments raced from different nodes on one session: exactly one is
// accepted, the others see the session resolved (RFC-MACP-0001 §7: the
// first accepted Commitment resolves the session; checklist "a session
// resolves at most once"), and every node then reports it RESOLVED.
func TestRacingCommitments(t *testing.T) {
	e := newEnv(t, 3, 3)
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
		if a := e.send(1, aliceID, proposalEnv(sid, "m1")); !a.GetOk() {
			t.Fatalf("proposal on node 1: %s", ackString(a))
		}
		acks := make([]*macpv1.Ack, 3)
		var wg sync.WaitGroup
		for i := range acks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acks[i] = e.send(i, initID, commitEnv(sid, fmt.Sprintf("c%d", i), fmt.Sprintf("commit-%d", i)))
			}()
		}
		wg.Wait()
		won := 0
		for i, a := range acks {
			switch {
			case a.GetOk() && !a.GetDuplicate():
				won++
			case !a.GetOk() && a.GetError().GetCode() == string(coord.CodeSessionNotOpen):
			default:
				t.Fatalf("round %d: node %d: %s", round, i, ackString(a))
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d Commitments accepted, want exactly 1: %v %v %v", round, won, ackString(acks[0]), ackString(acks[1]), ackString(acks[2]))
		}
		commits := 0
		recs := history(t, ns, sid)
		for _, r := range recs {
			if r.Envelope != nil && r.Envelope.MessageType == coord.TypeCommitment {
				commits++
			}
		}
		if commits != 1 || recs[len(recs)-1].Status != session.Resolved {
			t.Fatalf("round %d: stored %d Commitments, last status %v", round, commits, recs[len(recs)-1].Status)
		}
		for i := range acks {
			waitState(t, e, i, sid, macpv1.SessionState_SESSION_STATE_RESOLVED)
		}
	}
}

// waitState waits until node i reports the session in state st (its copy
// is fed by the stream).
func waitState(t *testing.T, e *env, i int, sid string, st macpv1.SessionState) {
	t.Helper()
	var got macpv1.SessionState
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		md, cerr := e.node(i).Runtime().GetSession(context.Background(), initID, sid)
		if cerr == nil {
			if got = md.State; got == st {
				return
			}
		}
	}
	t.Fatalf("node %d: session %s is %v, want %v", i, sid, got, st)
}

// A follower on node 1 receives, in order and without gaps, the envelopes
// accepted on node 0 (RFC-MACP-0006 §3.2 passive subscribe across nodes;
// docs/resume.md), and sees the session end.
func TestFollowAcrossNodes(t *testing.T) {
	e := newEnv(t, 3, 2)
	sid := newSID()
	if a := e.send(0, initID, startEnv(sid, "m0", 60_000)); !a.GetOk() {
		t.Fatalf("start: %s", ackString(a))
	}
	waitState(t, e, 1, sid, macpv1.SessionState_SESSION_STATE_OPEN)
	got := make(chan session.Record, 100)
	done := make(chan error, 1)
	go func() {
		done <- e.node(1).Runtime().Follow(context.Background(), aliceID, sid, 0, runtime.FollowOptions{}, func(r session.Record) error {
			got <- r
			return nil
		})
	}()
	const n = 20
	for i := 1; i <= n; i++ {
		if a := e.send(0, aliceID, proposalEnv(sid, fmt.Sprintf("m%d", i))); !a.GetOk() {
			t.Fatalf("proposal %d: %s", i, ackString(a))
		}
	}
	if a := e.send(0, initID, commitEnv(sid, "c", "commit")); !a.GetOk() {
		t.Fatalf("commit: %s", ackString(a))
	}
	for want := uint64(1); want <= n+2; want++ {
		select {
		case r := <-got:
			if r.Seq != want {
				t.Fatalf("follower got record %d, want %d", r.Seq, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("follower on node 1: record %d never came", want)
		}
	}
	if err := <-done; !errors.Is(err, runtime.ErrFollowEnded) {
		t.Fatalf("Follow ended with %v", err)
	}
}

// A session's TTL expires exactly once across nodes: every node arms the
// deadline (RFC-MACP-0001 §7.4; checklist TTL-2), the first expiry append
// wins and the others conflict, and every node then reports it EXPIRED.
func TestExpiryOnceAcrossNodes(t *testing.T) {
	e := newEnv(t, 3, 3)
	sid := newSID()
	if a := e.send(0, initID, startEnv(sid, "m0", 1500)); !a.GetOk() {
		t.Fatalf("start: %s", ackString(a))
	}
	for i := 0; i < 3; i++ {
		waitState(t, e, i, sid, macpv1.SessionState_SESSION_STATE_EXPIRED)
	}
	recs := history(t, e.reader(), sid)
	expiries := 0
	for _, r := range recs {
		if r.Kind == session.KindExpire {
			expiries++
		}
	}
	if expiries != 1 || len(recs) != 2 {
		t.Fatalf("history has %d records, %d expiries; want a start and one expiry", len(recs), expiries)
	}
}

// A policy registered on node 0 is served by node 1 (the meta bucket's
// watch reloads the registry), and unregistering it on node 1 removes it
// from node 0 (RFC-MACP-0012 §7).
func TestRegistriesShared(t *testing.T) {
	e := newEnv(t, 3, 2)
	admin := coord.Identity{Sender: "agent://admin", Caps: coord.Capabilities{CanManageModeRegistry: true}}
	pd := &macpv1.PolicyDescriptor{PolicyId: "policy.cluster.shared", Mode: "macp.mode.decision.v1", Rules: `{"voting":{"algorithm":"majority"}}`, SchemaVersion: 1}
	if cerr := e.node(0).Registry().RegisterPolicy(admin, pd); cerr != nil {
		t.Fatal(cerr)
	}
	waitPolicy(t, e, 1, pd.PolicyId, true)
	if cerr := e.node(1).Registry().UnregisterPolicy(admin, pd.PolicyId); cerr != nil {
		t.Fatal(cerr)
	}
	waitPolicy(t, e, 0, pd.PolicyId, false)
}

func waitPolicy(t *testing.T, e *env, i int, id string, want bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, cerr := e.node(i).Registry().GetPolicy(id); (cerr == nil) == want {
			return
		}
	}
	t.Fatalf("node %d: policy %s registered = %v, want %v", i, id, !want, want)
}

// One active connection per caller and session across nodes (issue 27
// item 2): a Supersede on node 1 (what session/resume calls) ends the same
// identity's tracked follow of the session on node 0, over NATS; another
// identity's follow, and another session's, stay. Before, the rule was
// kept per process and node 0's follow stayed live.
func TestSupersedeAcrossNodes(t *testing.T) {
	e := newEnv(t, 3, 2)
	sid, other := newSID(), newSID()
	ended := make(chan string, 3)
	a0 := e.node(0).Runtime().Attachments()
	defer a0.Track(aliceID.Sender, sid, func() { ended <- "alice/sid" })()
	defer a0.Track(bobID.Sender, sid, func() { ended <- "bob/sid" })()
	defer a0.Track(aliceID.Sender, other, func() { ended <- "alice/other" })()
	// The notice is core NATS: retry until node 0's subscription is live.
	deadline := time.Now().Add(20 * time.Second)
	for {
		e.node(1).Runtime().Attachments().Supersede(aliceID.Sender, sid)
		select {
		case got := <-ended:
			if got != "alice/sid" {
				t.Fatalf("ended %s", got)
			}
		case <-time.After(200 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("node 0's follow was not superseded by node 1")
			}
			continue
		}
		break
	}
	select {
	case got := <-ended:
		t.Fatalf("also ended %s", got)
	case <-time.After(300 * time.Millisecond):
	}
	if n := a0.Tracked(bobID.Sender, sid) + a0.Tracked(aliceID.Sender, other); n != 2 {
		t.Fatalf("%d unrelated follows left on node 0, want 2", n)
	}
}
