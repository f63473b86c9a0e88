// Command quorum runs a Quorum Mode approval (RFC-MACP-0011) against a
// local macpd and exits non-zero unless the session resolves approved.
//
// A release manager asks three reviewers to approve a deployment, two
// approvals required. Each reviewer is an agent that answers the
// ApprovalRequest by its own rule (two approve, one rejects). The release
// manager's agent keeps a QuorumProjection and commits quorum.approved as
// soon as the projection says the threshold is reached (or
// quorum.rejected once it cannot be).
//
//	MACP_ALLOW_INSECURE=1 go run ./cmd/macpd &
//	go run ./examples/quorum              # or -addr host:port, MACP_ADDR
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
)

func main() {
	addr := flag.String("addr", envOr("MACP_ADDR", "127.0.0.1:50051"), "macpd gRPC address (plaintext, dev identities: MACP_ALLOW_INSECURE=1)")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *addr); err != nil {
		log.Fatalf("quorum example FAILED: %v", err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func dial(ctx context.Context, addr, id string) (*sdk.Client, error) {
	return sdk.Dial(ctx, addr, sdk.WithInsecure(), sdk.WithBearer(id), sdk.WithRetry(5))
}

// reviewers and how each one votes.
var reviewers = map[string]string{"ana": sdk.TypeApprove, "ben": sdk.TypeReject, "cai": sdk.TypeApprove}

func run(ctx context.Context, addr string) error {
	rm, err := dial(ctx, addr, "release-manager")
	if err != nil {
		return err
	}
	defer rm.Close()
	if _, err := rm.Initialize(ctx); err != nil {
		return fmt.Errorf("initialize (is macpd running at %s with MACP_ALLOW_INSECURE=1?): %w", addr, err)
	}
	q := rm.Quorum("")
	if _, err := q.Start(ctx, "deploy v2.4 to production", []string{"ana", "ben", "cai"}, 5*time.Minute); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	fmt.Println("session", q.ID)

	g, gctx := errgroup.WithContext(ctx)
	for id, choice := range reviewers {
		c, err := dial(ctx, addr, id)
		if err != nil {
			return err
		}
		defer c.Close()
		a := sdk.NewAgent(c, q.ID, sdk.WithSelf(id))
		a.Handle(sdk.TypeApprovalRequest, func(ctx context.Context, m *sdk.Message) error {
			var req quorumv1.ApprovalRequestPayload
			if err := m.Decode(&req); err != nil {
				return err
			}
			var ballot proto.Message
			switch choice {
			case sdk.TypeApprove:
				ballot = &quorumv1.ApprovePayload{RequestId: req.RequestId, Reason: id + ": tests are green"}
			default:
				ballot = &quorumv1.RejectPayload{RequestId: req.RequestId, Reason: id + ": wait for the freeze to end"}
			}
			_, err := m.Reply(ctx, choice, ballot)
			// A ballot after the decision is refused SESSION_NOT_OPEN:
			// the quorum did not need it.
			if errors.Is(err, &sdk.Error{Code: sdk.CodeSessionNotOpen}) {
				return nil
			}
			return err
		})
		g.Go(func() error { return a.Run(gctx) })
	}

	proj := sdk.NewQuorumProjection()
	ra := sdk.NewAgent(rm, q.ID, sdk.WithProjection(proj))
	committed := false // ballots accepted before our Commitment still arrive after we sent it
	decide := func(ctx context.Context, m *sdk.Message) error {
		approve, reject := proj.Eligible()
		a, r, ab := proj.Counts()
		fmt.Printf("%s from %s: %d approve, %d reject, %d abstain of %d (need %d)\n", m.Type(), m.Sender(), a, r, ab, len(proj.Participants), proj.Threshold())
		switch {
		case committed:
		case approve:
			committed = true
			_, err := q.CommitOutcome(ctx, "quorum.approved", true, fmt.Sprintf("%d of %d approvals", a, proj.Threshold()))
			return err
		case reject:
			committed = true
			_, err := q.CommitOutcome(ctx, "quorum.rejected", false, "the threshold can no longer be reached")
			return err
		}
		return nil
	}
	for _, typ := range []string{sdk.TypeApprove, sdk.TypeReject, sdk.TypeAbstain} {
		ra.Handle(typ, decide)
	}
	g.Go(func() error { return ra.Run(gctx) })

	if _, err := q.RequestApproval(ctx, "deploy-v2.4", "deploy v2.4 to production", "release notes in #123", 2); err != nil {
		return fmt.Errorf("request approval: %w", err)
	}
	if err := g.Wait(); err != nil {
		return err
	}

	md, err := q.Metadata(ctx)
	if err != nil {
		return err
	}
	if md.GetState() != macpv1.SessionState_SESSION_STATE_RESOLVED || proj.Commitment.GetAction() != "quorum.approved" {
		return fmt.Errorf("session %v with %v, want RESOLVED quorum.approved", md.GetState(), proj.Commitment)
	}
	fmt.Println("RESOLVED:", proj.Commitment.GetAction(), "-", proj.Commitment.GetReason())
	return nil
}
