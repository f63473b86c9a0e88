package sdk_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
)

// Each mode helper drives one complete session against a real runtime and
// the result is checked both in the Acks and in the session's metadata
// (RFC-MACP-0008..0011; ext.multi_round.v1 checklist MR-1..5).

func wantResolved(t *testing.T, ack *macpv1.Ack) {
	t.Helper()
	if ack.GetSessionState() != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("want RESOLVED, got %v", ack)
	}
}

func TestProposalSessionHelpers(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord, alice := dial(t, a.Addr(), "coord"), dial(t, a.Addr(), "alice")
	s := coord.Proposal("")
	if s.Mode != sdk.ProposalMode || s.ModeVersion != sdk.ProposalModeVersion {
		t.Fatalf("binding: %+v", s.Session)
	}
	mustOK(t, "start")(s.Start(ctx, "price", []string{"coord", "alice"}, time.Minute))
	mustOK(t, "propose")(s.Propose(ctx, "p1", "100 EUR", "opening offer", "price"))
	sa := alice.Proposal(s.ID)
	mustOK(t, "counter")(sa.CounterPropose(ctx, "p2", "p1", "90 EUR", "counter"))
	// Withdraw is the author's only.
	_, err := sa.Withdraw(ctx, "p1", "not mine")
	wantCode(t, err, sdk.CodeForbidden)
	mustOK(t, "accept a")(sa.Accept(ctx, "p2", "ok"))
	// A positive Commitment needs every participant's Accept.
	_, err = s.CommitOutcome(ctx, "proposal.accepted", true, "agreed")
	wantCode(t, err, sdk.CodeInvalidEnvelope)
	mustOK(t, "accept c")(s.Accept(ctx, "p2", "fine"))
	mustOK(t, "withdraw p1")(s.Withdraw(ctx, "p1", "superseded"))
	wantResolved(t, mustOK(t, "commit")(s.CommitOutcome(ctx, "proposal.accepted", true, "agreed on p2")))

	// A terminal Reject makes a negative Commitment eligible.
	s2 := coord.Proposal("")
	mustOK(t, "start 2")(s2.Start(ctx, "price", []string{"coord", "alice"}, time.Minute))
	mustOK(t, "propose 2")(s2.Propose(ctx, "p1", "200 EUR", ""))
	mustOK(t, "reject")(alice.Proposal(s2.ID).Reject(ctx, "p1", true, "too much"))
	wantResolved(t, mustOK(t, "commit 2")(s2.CommitOutcome(ctx, "proposal.rejected", false, "no deal")))
}

func TestTaskSessionHelpers(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord, bob, carol := dial(t, a.Addr(), "coord"), dial(t, a.Addr(), "bob"), dial(t, a.Addr(), "carol")
	s := coord.Task("")
	mustOK(t, "start")(s.Start(ctx, "summarize", []string{"bob", "carol"}, time.Minute))
	mustOK(t, "request")(s.Request(ctx, &taskv1.TaskRequestPayload{TaskId: "t1", Title: "summarize", Instructions: "short"}))
	mustOK(t, "reject")(carol.Task(s.ID).Reject(ctx, "t1", "busy"))
	sb := bob.Task(s.ID)
	mustOK(t, "accept")(sb.Accept(ctx, "t1", ""))
	// Only the active assignee reports.
	_, err := carol.Task(s.ID).Update(ctx, "t1", "working", 0.5, "")
	wantCode(t, err, sdk.CodeForbidden)
	mustOK(t, "update")(sb.Update(ctx, "t1", "working", 0.5, "half"))
	mustOK(t, "complete")(sb.Complete(ctx, "t1", []byte("done"), "it is done"))
	wantResolved(t, mustOK(t, "commit")(s.CommitOutcome(ctx, "task.completed", true, "bob did it")))

	s2 := coord.Task("")
	mustOK(t, "start 2")(s2.Start(ctx, "fail", []string{"bob"}, time.Minute))
	mustOK(t, "request 2")(s2.Request(ctx, &taskv1.TaskRequestPayload{TaskId: "t2", RequestedAssignee: "bob"}))
	sb2 := bob.Task(s2.ID)
	mustOK(t, "accept 2")(sb2.Accept(ctx, "t2", ""))
	mustOK(t, "fail")(sb2.Fail(ctx, "t2", "E_DISK", "disk full", true))
	wantResolved(t, mustOK(t, "commit 2")(s2.CommitOutcome(ctx, "task.failed", false, "bob failed")))
}

func TestHandoffSessionHelpers(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	owner, bob, carol := dial(t, a.Addr(), "owner"), dial(t, a.Addr(), "bob"), dial(t, a.Addr(), "carol")
	s := owner.Handoff("")
	mustOK(t, "start")(s.Start(ctx, "on-call", []string{"owner", "bob", "carol"}, time.Minute))
	mustOK(t, "offer")(s.Offer(ctx, "h1", "bob", "pager", "vacation"))
	mustOK(t, "context")(s.Context(ctx, "h1", "text/plain", []byte("runbook")))
	// Only the target answers.
	_, err := carol.Handoff(s.ID).Accept(ctx, "h1", "")
	wantCode(t, err, sdk.CodeForbidden)
	mustOK(t, "decline")(bob.Handoff(s.ID).Decline(ctx, "h1", "busy"))
	mustOK(t, "offer 2")(s.Offer(ctx, "h2", "carol", "pager", "vacation"))
	mustOK(t, "accept")(carol.Handoff(s.ID).Accept(ctx, "h2", "sure"))
	wantResolved(t, mustOK(t, "commit")(s.CommitOutcome(ctx, "handoff.accepted", true, "carol has the pager")))
}

func TestQuorumSessionHelpers(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord := dial(t, a.Addr(), "coord")
	voters := map[string]*sdk.Client{}
	for _, v := range []string{"v1", "v2", "v3"} {
		voters[v] = dial(t, a.Addr(), v)
	}
	s := coord.Quorum("")
	mustOK(t, "start")(s.Start(ctx, "deploy", []string{"v1", "v2", "v3"}, time.Minute))
	mustOK(t, "request")(s.RequestApproval(ctx, "r1", "deploy v2", "ship it", 2))
	mustOK(t, "approve")(voters["v1"].Quorum(s.ID).Approve(ctx, "r1", ""))
	mustOK(t, "abstain")(voters["v2"].Quorum(s.ID).Abstain(ctx, "r1", ""))
	// One approval of two: neither outcome yet.
	_, err := s.CommitOutcome(ctx, "quorum.approved", true, "early")
	wantCode(t, err, sdk.CodeInvalidEnvelope)
	// A second ballot from the same voter is refused.
	_, err = voters["v1"].Quorum(s.ID).Reject(ctx, "r1", "changed my mind")
	wantCode(t, err, sdk.CodeInvalidEnvelope)
	mustOK(t, "reject")(voters["v3"].Quorum(s.ID).Reject(ctx, "r1", "no"))
	wantResolved(t, mustOK(t, "commit")(s.CommitOutcome(ctx, "quorum.rejected", false, "threshold unreachable")))
}

func TestMultiRoundSessionHelpers(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord, alice, bob := dial(t, a.Addr(), "coord"), dial(t, a.Addr(), "alice"), dial(t, a.Addr(), "bob")
	s := coord.MultiRound("")
	mustOK(t, "start")(s.Start(ctx, "a name", []string{"alice", "bob"}, time.Minute))
	mustOK(t, "a1")(alice.MultiRound(s.ID).Contribute(ctx, "macpd"))
	mustOK(t, "b1")(bob.MultiRound(s.ID).Contribute(ctx, "gomacp"))
	_, err := s.CommitOutcome(ctx, "multi_round.converged", true, "early")
	wantCode(t, err, sdk.CodeInvalidEnvelope)
	mustOK(t, "b2")(bob.MultiRound(s.ID).Contribute(ctx, "macpd"))
	wantResolved(t, mustOK(t, "commit")(s.CommitOutcome(ctx, "multi_round.converged", true, "all agree")))
}

// Policy registration helpers (RFC-MACP-0012 §7): register, get, list,
// watch, bind a session to it, unregister; bad rules are refused with a
// typed error.
func TestPolicyHelpers(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	admin := dial(t, a.Addr(), "admin")
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	lists := make(chan []*macpv1.PolicyDescriptor, 16)
	go func() {
		for ds, err := range admin.WatchPolicies(watchCtx) {
			if err != nil {
				return
			}
			lists <- ds
		}
	}()
	first := <-lists
	if !slices.ContainsFunc(first, func(d *macpv1.PolicyDescriptor) bool { return d.PolicyId == sdk.DefaultPolicy }) {
		t.Fatalf("first watch list lacks %s: %v", sdk.DefaultPolicy, first)
	}

	bad, err := sdk.NewPolicy("policy.test.bad", sdk.QuorumMode, "", map[string]any{"threshold": map[string]any{"type": "bogus"}})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, admin.RegisterPolicy(ctx, bad), sdk.CodeInvalidPolicyDefinition)

	p, err := sdk.NewPolicy("policy.test.any", sdk.QuorumMode, "anyone commits", map[string]any{"commitment": map[string]any{"authority": "any_participant"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.RegisterPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, err := admin.GetPolicy(ctx, "policy.test.any")
	if err != nil || got.GetMode() != sdk.QuorumMode || got.GetDescription() != "anyone commits" {
		t.Fatalf("get: %v %v", got, err)
	}
	ls, err := admin.ListPolicies(ctx, sdk.QuorumMode)
	if err != nil || !slices.ContainsFunc(ls, func(d *macpv1.PolicyDescriptor) bool { return d.PolicyId == "policy.test.any" }) {
		t.Fatalf("list: %v %v", ls, err)
	}
	ls, _ = admin.ListPolicies(ctx, sdk.TaskMode)
	if slices.ContainsFunc(ls, func(d *macpv1.PolicyDescriptor) bool { return d.PolicyId == "policy.test.any" }) {
		t.Fatalf("mode filter ignored: %v", ls)
	}
	for ds := range lists { // the watch reports the registration
		if slices.ContainsFunc(ds, func(d *macpv1.PolicyDescriptor) bool { return d.PolicyId == "policy.test.any" }) {
			break
		}
	}

	// A session bound to it: a participant may commit.
	s := admin.Quorum("")
	s.PolicyVersion = "policy.test.any"
	mustOK(t, "start")(s.Start(ctx, "x", []string{"v1"}, time.Minute))
	mustOK(t, "request")(s.RequestApproval(ctx, "r", "act", "", 1))
	v1 := dial(t, a.Addr(), "v1").Quorum(s.ID)
	mustOK(t, "approve")(v1.Approve(ctx, "r", ""))
	wantResolved(t, mustOK(t, "commit by participant")(v1.CommitOutcome(ctx, "quorum.approved", true, "policy allows")))

	if err := admin.UnregisterPolicy(ctx, "policy.test.any"); err != nil {
		t.Fatal(err)
	}
	_, err = admin.GetPolicy(ctx, "policy.test.any")
	wantCode(t, err, sdk.CodeUnknownPolicyVersion)
	if err := admin.UnregisterPolicy(ctx, "policy.test.any"); !errors.As(err, new(*sdk.Error)) {
		t.Fatalf("second unregister: want *sdk.Error, got %v", err)
	}
}
