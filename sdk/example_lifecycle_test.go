package sdk_test

import (
	"context"
	"fmt"
	"log"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
)

// The initiator pauses a session, resumes it, and later cancels it; each
// Ack carries the state reached. The cancel ends CANCELLED when macpd runs
// with MACP_PROFILE=latest, EXPIRED under the default 2026-04.
func ExampleSession_Suspend() {
	ctx := context.Background()
	coord, err := sdk.Dial(ctx, "127.0.0.1:50051", sdk.WithInsecure(), sdk.WithBearer("coord"))
	if err != nil {
		log.Fatal(err)
	}
	defer coord.Close()
	q := coord.Quorum("")
	if _, err := q.Start(ctx, "deploy v2.4", []string{"ana", "ben"}, time.Hour); err != nil {
		log.Fatal(err)
	}
	ack, err := q.Suspend(ctx, "change freeze")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ack.SessionState) // SESSION_STATE_SUSPENDED: every message is SESSION_NOT_OPEN, the TTL stops
	if ack, err = q.Resume(ctx, "freeze over"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(ack.SessionState) // SESSION_STATE_OPEN, with the TTL left at the suspension
	profile, _ := coord.Profile(ctx)
	if ack, err = q.Cancel(ctx, "superseded by v2.5"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(profile, ack.SessionState) // 2026-09 SESSION_STATE_CANCELLED, or 2026-04 SESSION_STATE_EXPIRED
}

// A Commitment in a new session supersedes the one that resolved an
// earlier session: the reference is the earlier session's id and its
// Commitment's RFC-MACP-0013 hash.
func ExampleSupersedes() {
	ctx := context.Background()
	coord, err := sdk.Dial(ctx, "127.0.0.1:50051", sdk.WithInsecure(), sdk.WithBearer("coord"))
	if err != nil {
		log.Fatal(err)
	}
	defer coord.Close()
	const priorSession = "6f1c0b52-8d3e-4c41-9b7a-2e5f8a9d0c13" // resolved earlier
	d := coord.Decision("")
	// ... Start, proposals and votes ...
	_, err = d.CommitOutcome(ctx, "decision.selected", true, "revised after the incident",
		sdk.SupersedesSession(coord, priorSession)) // reads the prior Commitment from its history
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleCommitmentHash() {
	h, err := sdk.CommitmentHash(&macpv1.CommitmentPayload{
		CommitmentId: "c-7", Action: "quorum.approved", AuthorityScope: "session", Reason: "two approvals",
		ModeVersion: "1.0.0", ConfigurationVersion: "v1", PolicyVersion: "policy.default", OutcomePositive: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(h)
	// Output: sha256:ea4d5380d84b47f7a2e74426d788811a40751e8595b5ad1f14bdcc2ed314b6d3
}
