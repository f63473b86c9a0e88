package sdk_test

import (
	"errors"
	"testing"
	"time"

	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
)

// Projections refuse input that does not fit an accepted history and fold
// a cancellation; Session.Subscribe feeds one from a real runtime
// (RFC-MACP-0003: the accepted history determines the state).
func TestProjectionFitAndLiveFold(t *testing.T) {
	p := sdk.NewQuorumProjection()
	req := accepted("coord", "s1", sdk.QuorumMode, sdk.TypeApprovalRequest, &quorumv1.ApprovalRequestPayload{RequestId: "r", Action: "a", RequiredApprovals: 1})
	if err := p.Apply(req); !errors.Is(err, sdk.ErrNotStarted) {
		t.Fatalf("before SessionStart: %v", err)
	}
	dstart, _ := sdk.NewSessionStart("s1", sdk.DecisionMode, sdk.StartPayload{Participants: []string{"a"}, TTL: time.Minute})
	if err := p.Apply(dstart); err == nil {
		t.Fatal("a Decision SessionStart accepted by a Quorum projection")
	}
	start, _ := sdk.NewSessionStart("s1", sdk.QuorumMode, sdk.StartPayload{Participants: []string{"a", "b", "a"}, TTL: time.Minute})
	start.Sender = "coord"
	if err := sdk.ApplyAll(p, start, req); err != nil {
		t.Fatal(err)
	}
	if !p.Started() || !p.IsParticipant("b") || p.IsParticipant("coord") || len(p.Participants) != 2 || p.PolicyVersion != sdk.DefaultPolicy {
		t.Fatalf("view: %+v", p.SessionView)
	}
	for _, bad := range []*macpv1.Envelope{
		accepted("a", "s2", sdk.QuorumMode, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: "r"}),           // other session
		accepted("a", "s1", sdk.QuorumMode, "Bogus", nil),                                                        // unknown type
		accepted("a", "s1", sdk.DecisionMode, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: "r"}),         // other mode
		{SessionId: "s1", Mode: sdk.QuorumMode, MessageType: sdk.TypeApprove, Payload: []byte{0xff, 0xff, 0xff}}, // undecodable
		start, // a second SessionStart
	} {
		if err := p.Apply(bad); err == nil {
			t.Errorf("accepted %s/%s in session %s", bad.Mode, bad.MessageType, bad.SessionId)
		}
	}
	// The runtime's suspend and resume records fold into the view
	// (RFC-MACP-0001 §7.5) and leave the mode state alone.
	before := p.Messages
	if err := p.Apply(accepted("_runtime", "s1", sdk.QuorumMode, sdk.TypeSessionSuspend, &macpv1.SessionSuspendPayload{Reason: "hold"})); err != nil || !p.Suspended || p.Ended() {
		t.Fatalf("suspend: %v %+v", err, p.SessionView)
	}
	if err := p.Apply(accepted("_runtime", "s1", sdk.QuorumMode, sdk.TypeSessionResume, &macpv1.SessionResumePayload{BankedMs: 5})); err != nil || p.Suspended || p.Messages != before+2 {
		t.Fatalf("resume: %v %+v", err, p.SessionView)
	}
	cancel := accepted("", "s1", sdk.QuorumMode, sdk.TypeSessionCancel, &macpv1.SessionCancelPayload{Reason: "stop"})
	if err := p.Apply(cancel); err != nil || !p.Cancelled || p.CancelReason != "stop" || !p.Ended() || p.Resolved() {
		t.Fatalf("cancel: %v %+v", err, p.SessionView)
	}
	if pos, neg := p.Eligible(); pos || neg {
		t.Fatal("eligible after cancellation")
	}
	if err := p.Apply(accepted("a", "s1", sdk.QuorumMode, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: "r"})); err == nil {
		t.Fatal("a ballot after the end was folded")
	}

	// Live: a subscription's events folded as they come.
	a := startApp(t)
	ctx := ctxT(t)
	coord := dial(t, a.Addr(), "coord")
	q := coord.Quorum("")
	if q.Client() != coord {
		t.Fatal("Client()")
	}
	mustOK(t, "start")(q.Start(ctx, "x", []string{"v1", "v2"}, time.Minute))
	mustOK(t, "request")(q.RequestApproval(ctx, "r", "act", "", 2))
	mustOK(t, "approve")(dial(t, a.Addr(), "v1").Quorum(q.ID).Approve(ctx, "r", ""))
	mustOK(t, "cancel")(q.Cancel(ctx, "changed plans"))
	live := sdk.NewQuorumProjection()
	sub := q.Subscribe(ctx, 0)
	defer sub.Close()
	for ev, err := range sub.All() {
		if err != nil {
			t.Fatal(err)
		}
		if err := live.Apply(ev.Envelope); err != nil {
			t.Fatalf("seq %d: %v", ev.Seq, err)
		}
	}
	if approvals, _, _ := live.Counts(); approvals != 1 || !live.Cancelled || live.CancelReason != "changed plans" || live.Messages != 4 {
		t.Fatalf("live projection: %+v ballots %v", live.SessionView, live.Ballots)
	}
}

func TestNewPolicyRules(t *testing.T) {
	for _, tc := range []struct {
		rules any
		want  string
	}{
		{nil, "{}"},
		{`{"a":1}`, `{"a":1}`},
		{[]byte(`{"b":2}`), `{"b":2}`},
		{struct {
			X int `json:"x"`
		}{3}, `{"x":3}`},
	} {
		d, err := sdk.NewPolicy("p", "*", "", tc.rules)
		if err != nil || d.Rules != tc.want || d.SchemaVersion != 1 {
			t.Errorf("NewPolicy(%v) = %v, %v", tc.rules, d, err)
		}
	}
	if _, err := sdk.NewPolicy("p", "*", "", func() {}); err == nil {
		t.Error("unmarshalable rules accepted")
	}
}
