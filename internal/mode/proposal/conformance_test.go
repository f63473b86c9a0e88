package proposal_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/proposal"
)

// TestConformanceFixtures runs the spec's proposal_*.json fixtures
// (checklist CONF-22, CONF-23) at the mode level. The core's part of a
// Commitment (authority, CONF-11 payload decoding) is emulated with
// policy.MayCommit; everything else is the mode's.
func TestConformanceFixtures(t *testing.T) {
	modetest.RunFixtures(t, proposal.New(), modetest.FixtureOptions{
		Glob:   "proposal_*.json",
		ModeID: proposal.ModeID,
		Payloads: map[string]func() proto.Message{
			"proposal.Proposal":        func() proto.Message { return &proposalv1.ProposalPayload{} },
			"proposal.CounterProposal": func() proto.Message { return &proposalv1.CounterProposalPayload{} },
			"proposal.Accept":          func() proto.Message { return &proposalv1.AcceptPayload{} },
			"proposal.Reject":          func() proto.Message { return &proposalv1.RejectPayload{} },
			"proposal.Withdraw":        func() proto.Message { return &proposalv1.WithdrawPayload{} },
		},
	})
}
