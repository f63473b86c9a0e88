package sdk_test

import (
	"context"
	"fmt"
	"log"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/protobuf/proto"
)

// accepted builds an envelope as a runtime records it: the sender is set
// by the runtime from the caller's identity.
func accepted(sender, sessionID, mode, typ string, payload proto.Message) *macpv1.Envelope {
	env, err := sdk.NewEnvelope(sessionID, mode, typ, payload)
	if err != nil {
		log.Fatal(err)
	}
	env.Sender = sender
	return env
}

// A QuorumProjection folds a session's accepted history (here written out
// by hand; usually from a Subscription) into the tally.
func ExampleQuorumProjection() {
	start, _ := sdk.NewSessionStart("s1", sdk.QuorumMode, sdk.StartPayload{
		Intent: "deploy", Participants: []string{"ana", "ben", "cai"}, TTL: time.Minute,
		ModeVersion: sdk.QuorumModeVersion, ConfigurationVersion: "v1",
	})
	start.Sender = "release-manager"
	p := sdk.NewQuorumProjection()
	err := sdk.ApplyAll(p,
		start,
		accepted("release-manager", "s1", sdk.QuorumMode, sdk.TypeApprovalRequest,
			&quorumv1.ApprovalRequestPayload{RequestId: "r1", Action: "deploy v2.4", RequiredApprovals: 2}),
		accepted("ana", "s1", sdk.QuorumMode, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: "r1"}),
		accepted("ben", "s1", sdk.QuorumMode, sdk.TypeReject, &quorumv1.RejectPayload{RequestId: "r1", Reason: "freeze"}),
	)
	if err != nil {
		log.Fatal(err)
	}
	a, r, _ := p.Counts()
	approve, reject := p.Eligible()
	fmt.Printf("%s: %d approve, %d reject, %d to vote, need %d\n", p.Phase(), a, r, p.Remaining(), p.Threshold())
	fmt.Println("commit approved now:", approve, "- rejected now:", reject)

	_ = p.Apply(accepted("cai", "s1", sdk.QuorumMode, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: "r1"}))
	approve, _ = p.Eligible()
	fmt.Println("after cai approves, commit approved:", approve)
	// Output:
	// Voting: 1 approve, 1 reject, 1 to vote, need 2
	// commit approved now: false - rejected now: false
	// after cai approves, commit approved: true
}

// A DecisionProjection tells who voted what and which proposal leads.
func ExampleDecisionProjection() {
	start, _ := sdk.NewSessionStart("s2", sdk.DecisionMode, sdk.StartPayload{
		Participants: []string{"alice", "bob"}, TTL: time.Minute, ModeVersion: sdk.DecisionModeVersion, ConfigurationVersion: "v1",
	})
	start.Sender = "coord"
	d := sdk.NewDecisionProjection()
	_ = sdk.ApplyAll(d, start,
		accepted("coord", "s2", sdk.DecisionMode, sdk.TypeProposal, &decisionv1.ProposalPayload{ProposalId: "p1", Option: "postgres"}),
		accepted("coord", "s2", sdk.DecisionMode, sdk.TypeProposal, &decisionv1.ProposalPayload{ProposalId: "p2", Option: "sqlite"}),
		accepted("alice", "s2", sdk.DecisionMode, sdk.TypeVote, &decisionv1.VotePayload{ProposalId: "p2", Vote: "APPROVE"}),
		accepted("bob", "s2", sdk.DecisionMode, sdk.TypeVote, &decisionv1.VotePayload{ProposalId: "p2", Vote: "APPROVE"}),
	)
	lead := d.Leading()
	approve, _, _ := lead.Tally()
	fmt.Println(d.Phase(), lead.Option, approve, "approvals; alice voted", lead.VoteOf("alice"))
	// Output: Voting sqlite 2 approvals; alice voted APPROVE
}

// A policy for Decision sessions that need a majority of cast votes.
func ExampleNewPolicy() {
	p, err := sdk.NewPolicy("policy.team.majority", sdk.DecisionMode, "majority of cast votes",
		map[string]any{"voting": map[string]any{"algorithm": "majority"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.PolicyId, p.Mode, p.Rules)
	// Register it (needs can_manage_mode_registry) and bind a session to it:
	//
	//	err = client.RegisterPolicy(ctx, p)
	//	d := client.Decision("")
	//	d.PolicyVersion = p.PolicyId
	//	d.Start(ctx, ...)

	// Output: policy.team.majority macp.mode.decision.v1 {"voting":{"algorithm":"majority"}}
}

// Errors carry the MACP code; only RATE_LIMITED and INTERNAL_ERROR are
// worth repeating unchanged.
func ExampleCodeOf() {
	err := fmt.Errorf("voting: %w", &sdk.Error{Code: sdk.CodeForbidden, Message: "not a participant"})
	fmt.Println(sdk.CodeOf(err), sdk.CodeOf(err).HTTPStatus(), sdk.Retryable(err))
	fmt.Println(sdk.Retryable(&sdk.Error{Code: sdk.CodeRateLimited}))
	// Output:
	// FORBIDDEN 403 false
	// true
}

// A Quorum voter: it approves every approval request it is asked about,
// and returns when the session ends.
func ExampleAgent() {
	ctx := context.Background()
	c, err := sdk.Dial(ctx, "127.0.0.1:50051", sdk.WithInsecure(), sdk.WithBearer("ana"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sessionID := "..." // from the coordinator
	a := sdk.NewAgent(c, sessionID, sdk.WithSelf("ana"))
	a.Handle(sdk.TypeApprovalRequest, func(ctx context.Context, m *sdk.Message) error {
		var req quorumv1.ApprovalRequestPayload
		if err := m.Decode(&req); err != nil {
			return err
		}
		_, err := m.Reply(ctx, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: req.RequestId, Reason: "looks good"})
		return err
	})
	if err := a.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
