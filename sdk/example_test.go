package sdk_test

import (
	"context"
	"fmt"
	"log"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
)

// A coordinator and two participants reach one decision. Against a local
// macpd started with MACP_ALLOW_INSECURE=1 the bearer token is the agent id.
func ExampleDecisionSession() {
	ctx := context.Background()
	agent := func(id string) *sdk.Client {
		c, err := sdk.Dial(ctx, "127.0.0.1:50051", sdk.WithInsecure(), sdk.WithBearer(id), sdk.WithRetry(3))
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	coord, alice, bob := agent("coord"), agent("alice"), agent("bob")
	defer coord.Close()
	defer alice.Close()
	defer bob.Close()

	if _, err := coord.Initialize(ctx); err != nil {
		log.Fatal(err)
	}
	d := coord.Decision("") // a new session id
	if _, err := d.Start(ctx, "choose a database", []string{"alice", "bob"}, 5*time.Minute); err != nil {
		log.Fatal(err)
	}
	if _, err := d.Propose(ctx, "p1", "postgres", "boring and solid"); err != nil {
		log.Fatal(err)
	}
	// Participants join the same session by id.
	if _, err := alice.Decision(d.ID).Vote(ctx, "p1", "APPROVE", ""); err != nil {
		log.Fatal(err)
	}
	if _, err := bob.Decision(d.ID).Evaluate(ctx, "p1", "APPROVE", 0.8, "fits our ops"); err != nil {
		log.Fatal(err)
	}
	// Only the initiator may commit: bob is refused with a typed error.
	_, err := bob.Decision(d.ID).Commit(ctx, &macpv1.CommitmentPayload{Action: "decision.selected", AuthorityScope: "team", Reason: "me", OutcomePositive: true})
	if sdk.CodeOf(err) == sdk.CodeForbidden {
		fmt.Println("bob may not commit:", err)
	}
	ack, err := d.Commit(ctx, &macpv1.CommitmentPayload{
		Action: "decision.selected", AuthorityScope: "team", Reason: "alice approved", OutcomePositive: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ack.SessionState) // SESSION_STATE_RESOLVED
}
