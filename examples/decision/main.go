// Command decision runs a Decision Mode session (RFC-MACP-0007) among three
// Go agents against a local macpd, and exits non-zero unless the session
// resolves with the option both participants approved.
//
// The coordinator starts the session and proposes two options; alice and
// bob are agents that evaluate each proposal and vote; the coordinator's
// agent folds the session into a DecisionProjection and commits the
// leading proposal once both participants voted on it.
//
//	MACP_ALLOW_INSECURE=1 go run ./cmd/macpd &
//	go run ./examples/decision            # or -addr host:port, MACP_ADDR
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
	"golang.org/x/sync/errgroup"
)

func main() {
	addr := flag.String("addr", envOr("MACP_ADDR", "127.0.0.1:50051"), "macpd gRPC address (plaintext, dev identities: MACP_ALLOW_INSECURE=1)")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *addr); err != nil {
		log.Fatalf("decision example FAILED: %v", err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// dial connects as agent id; with MACP_ALLOW_INSECURE=1 the bearer token
// is the agent id.
func dial(ctx context.Context, addr, id string) (*sdk.Client, error) {
	return sdk.Dial(ctx, addr, sdk.WithInsecure(), sdk.WithBearer(id), sdk.WithRetry(5))
}

func run(ctx context.Context, addr string) error {
	coord, err := dial(ctx, addr, "coordinator")
	if err != nil {
		return err
	}
	defer coord.Close()
	if _, err := coord.Initialize(ctx); err != nil {
		return fmt.Errorf("initialize (is macpd running at %s with MACP_ALLOW_INSECURE=1?): %w", addr, err)
	}

	d := coord.Decision("")
	participants := []string{"alice", "bob"}
	if _, err := d.Start(ctx, "pick a database", participants, 5*time.Minute); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	fmt.Println("session", d.ID)

	// Both options are on the table before anyone deliberates: proposals
	// close when voting starts.
	options := map[string]string{"p1": "postgres", "p2": "mongodb"}
	for _, id := range []string{"p1", "p2"} {
		if _, err := d.Propose(ctx, id, options[id], "candidate"); err != nil {
			return fmt.Errorf("propose %s: %w", options[id], err)
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	// The participants evaluate every proposal (they like postgres), and
	// once everyone evaluated everything, vote for the proposal with the
	// most APPROVE recommendations.
	for _, id := range participants {
		c, err := dial(ctx, addr, id)
		if err != nil {
			return err
		}
		defer c.Close()
		proj := sdk.NewDecisionProjection()
		a := sdk.NewAgent(c, d.ID, sdk.WithProjection(proj))
		a.Handle(sdk.TypeProposal, func(ctx context.Context, m *sdk.Message) error {
			var p decisionv1.ProposalPayload
			if err := m.Decode(&p); err != nil {
				return err
			}
			rec := "REJECT"
			if p.Option == "postgres" {
				rec = "APPROVE"
			}
			_, err := m.Reply(ctx, sdk.TypeEvaluation, &decisionv1.EvaluationPayload{ProposalId: p.ProposalId, Recommendation: rec, Confidence: 0.9, Reason: id + " on " + p.Option})
			return err
		})
		voted := false
		a.Handle(sdk.TypeEvaluation, func(ctx context.Context, m *sdk.Message) error {
			if voted || len(proj.Evaluations) < len(participants)*len(proj.Proposals) {
				return nil
			}
			voted = true
			best, bestN := "", -1
			for _, p := range proj.Proposals {
				n := 0
				for _, e := range proj.Evaluations {
					if e.ProposalID == p.ID && e.Recommendation == "APPROVE" {
						n++
					}
				}
				if n > bestN {
					best, bestN = p.ID, n
				}
			}
			_, err := m.Reply(ctx, sdk.TypeVote, &decisionv1.VotePayload{ProposalId: best, Vote: "APPROVE", Reason: id + " agrees"})
			return err
		})
		g.Go(func() error { return a.Run(gctx) })
	}

	// The coordinator commits the leading proposal once every participant
	// voted.
	proj := sdk.NewDecisionProjection()
	ca := sdk.NewAgent(coord, d.ID, sdk.WithProjection(proj))
	ca.Handle(sdk.TypeVote, func(ctx context.Context, m *sdk.Message) error {
		votes := 0
		for _, p := range proj.Proposals {
			votes += len(p.Votes)
		}
		if votes < len(participants) {
			return nil
		}
		lead := proj.Leading()
		approve, _, _ := lead.Tally()
		fmt.Printf("all votes in: %s leads with %d approvals\n", lead.Option, approve)
		_, err := d.Commit(ctx, &macpv1.CommitmentPayload{Action: "decision.selected", AuthorityScope: "team",
			Reason: fmt.Sprintf("%s approved by %d of %d", lead.Option, approve, len(participants)), OutcomePositive: true})
		return err
	})
	g.Go(func() error { return ca.Run(gctx) })

	if err := g.Wait(); err != nil {
		return err
	}

	// Check the outcome from the runtime, not from the agents.
	md, err := d.Metadata(ctx)
	if err != nil {
		return err
	}
	if md.GetState() != macpv1.SessionState_SESSION_STATE_RESOLVED {
		return fmt.Errorf("session is %v, want RESOLVED", md.GetState())
	}
	if lead := proj.Leading(); lead == nil || lead.Option != "postgres" || !proj.Resolved() || proj.Commitment.GetAction() != "decision.selected" {
		return fmt.Errorf("unexpected outcome: %+v", proj.SessionView)
	}
	fmt.Println("RESOLVED:", proj.Commitment.GetReason())
	return nil
}
