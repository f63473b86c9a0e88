package decision_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/mode/modetest"
)

// TestConformanceFixtures runs the spec's decision_*.json fixtures
// (checklist CONF-20, CONF-21) at the mode level. The core's part of a
// Commitment (authority, CONF-11 payload decoding) is emulated with
// policy.MayCommit; everything else is the mode's.
func TestConformanceFixtures(t *testing.T) {
	modetest.RunFixtures(t, decision.New(), modetest.FixtureOptions{
		Glob:          "decision_*.json",
		ModeID:        decision.ModeID,
		PayloadPrefix: "decision.",
		Payloads: map[string]func() proto.Message{
			"Proposal":   func() proto.Message { return &decisionv1.ProposalPayload{} },
			"Evaluation": func() proto.Message { return &decisionv1.EvaluationPayload{} },
			"Objection":  func() proto.Message { return &decisionv1.ObjectionPayload{} },
			"Vote":       func() proto.Message { return &decisionv1.VotePayload{} },
		},
	})
}
