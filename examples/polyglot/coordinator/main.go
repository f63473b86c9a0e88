// Command coordinator is the Go side of the polyglot example
// (examples/polyglot/README.md): it starts a Decision Mode session
// (RFC-MACP-0007) whose participants are a voter written with the official
// Python SDK and one written with the official TypeScript SDK, proposes an
// option, waits for both votes, commits, and exits non-zero unless the
// session resolves as expected: the Commitment accepted by the runtime, the
// session RESOLVED, and one APPROVE vote on the proposal from each voter,
// each sent under that voter's own authenticated identity.
//
// examples/polyglot/run.sh starts macpd, both voters and this program; run
// by hand it needs the session id the voters wait for:
//
//	coordinator -addr 127.0.0.1:50051 -session $SID -voters py-voter,ts-voter
//
// With MACP_TOKEN set it authenticates with that bearer token (the runtime's
// static token list binds it to a sender); otherwise it uses the dev identity
// "coordinator" (macpd with MACP_ALLOW_INSECURE=1).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
)

func main() {
	addr := flag.String("addr", envOr("MACP_ADDR", "127.0.0.1:50051"), "macpd gRPC address (plaintext)")
	session := flag.String("session", "", "session id to start (the voters wait for it); empty: a new one")
	voters := flag.String("voters", "py-voter,ts-voter", "comma-separated participant ids, one per voter")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *addr, *session, strings.Split(*voters, ",")); err != nil {
		log.Fatalf("polyglot coordinator FAILED: %v", err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, addr, sessionID string, voters []string) error {
	token := envOr("MACP_TOKEN", "coordinator")
	c, err := sdk.Dial(ctx, addr, sdk.WithInsecure(), sdk.WithBearer(token), sdk.WithRetry(5))
	if err != nil {
		return err
	}
	defer c.Close()
	init, err := c.Initialize(ctx)
	if err != nil {
		return fmt.Errorf("initialize (is macpd running at %s?): %w", addr, err)
	}
	fmt.Printf("coordinator: connected to %s %s\n", init.GetRuntimeInfo().GetName(), init.GetRuntimeInfo().GetVersion())

	// Under the latest profile only declared participants may propose, so
	// the coordinator lists itself next to the voters.
	participants := append([]string{"coordinator"}, voters...)
	d := c.Decision(sessionID)
	if _, err := d.Start(ctx, "pick the team's database", participants, 2*time.Minute); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	fmt.Println("coordinator: started session", d.ID, "with participants", participants)
	if _, err := d.Propose(ctx, "p1", "postgres", "mature, transactional, the team knows it"); err != nil {
		return fmt.Errorf("propose: %w", err)
	}
	fmt.Println("coordinator: proposed p1 = postgres")

	// Follow the session; once every voter voted, commit. The Commit's Ack
	// is the runtime accepting it; Run returns after the Commitment comes
	// back on the stream.
	proj := sdk.NewDecisionProjection()
	var commitAck *macpv1.Ack
	a := sdk.NewAgent(c, d.ID, sdk.WithProjection(proj))
	a.Handle(sdk.TypeVote, func(ctx context.Context, m *sdk.Message) error {
		var v decisionv1.VotePayload
		if err := m.Decode(&v); err != nil {
			return err
		}
		fmt.Printf("coordinator: vote %s on %s from %s (%q)\n", v.Vote, v.ProposalId, m.Sender(), v.Reason)
		if len(votesOn(proj, "p1")) < len(voters) || commitAck != nil {
			return nil
		}
		// The commitment records what the votes decided, either way; the
		// checks below then say whether that is the expected outcome.
		approve, reject, _ := proj.Proposals[0].Tally()
		action := "decision.selected"
		if approve <= reject {
			action = "decision.rejected"
		}
		ack, err := d.Commit(ctx, &macpv1.CommitmentPayload{
			Action: action, AuthorityScope: "team", OutcomePositive: approve > reject,
			Reason: fmt.Sprintf("postgres: %d of %d voters approve", approve, len(voters)),
		})
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		commitAck = ack
		return nil
	})
	if err := a.Run(ctx); err != nil {
		return err
	}

	// The outcome, checked against what the runtime says.
	if commitAck == nil || !commitAck.GetOk() {
		return fmt.Errorf("the Commitment was not accepted: %v", commitAck)
	}
	md, err := d.Metadata(ctx)
	if err != nil {
		return err
	}
	if md.GetState() != macpv1.SessionState_SESSION_STATE_RESOLVED {
		return fmt.Errorf("session is %v, want RESOLVED", md.GetState())
	}
	if !proj.Resolved() || proj.CommitmentSender != "coordinator" {
		return fmt.Errorf("unexpected commitment %v from %q", proj.Commitment, proj.CommitmentSender)
	}
	if got := proj.Commitment.GetAction(); got != "decision.selected" {
		return fmt.Errorf("the session resolved %s (%s), want decision.selected", got, proj.Commitment.GetReason())
	}
	got := votesOn(proj, "p1")
	var senders []string
	for s, v := range got {
		if v != "APPROVE" {
			return fmt.Errorf("%s voted %s, want APPROVE", s, v)
		}
		senders = append(senders, s)
	}
	sort.Strings(senders)
	want := append([]string(nil), voters...)
	sort.Strings(want)
	if strings.Join(senders, ",") != strings.Join(want, ",") {
		return fmt.Errorf("votes from %v, want one from each of %v", senders, want)
	}
	fmt.Printf("coordinator: RESOLVED %s: %s (votes from %s)\n", d.ID, proj.Commitment.GetReason(), strings.Join(senders, ", "))
	return nil
}

// votesOn returns each sender's vote on proposal id: a sender may change
// its vote, the last one counts.
func votesOn(p *sdk.DecisionProjection, id string) map[string]string {
	out := map[string]string{}
	for _, pr := range p.Proposals {
		if pr.ID != id {
			continue
		}
		for _, v := range pr.Votes {
			out[v.Sender] = v.Vote
		}
	}
	return out
}
