package quorum_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/quorum"
)

// pinnedCodes are the codes macpd returns for each fixture message where the
// fixture gives none (checklist CONF-14 only asks for "reject"); they pin
// the decisions documented in quorum.go.
var pinnedCodes = map[string][]coord.Code{
	"quorum_happy_path.json":   {"", "", "", ""},
	"quorum_reject_paths.json": {coord.CodeInvalidEnvelope, "", "", coord.CodeInvalidEnvelope},
}

// pinnedState is matched against the final projection in addition to any
// expected_mode_state (the quorum fixtures carry none).
var pinnedState = map[string]map[string]any{
	"quorum_happy_path.json": {
		"phase":   "Committed",
		"request": map[string]any{"request_id": "r1", "action": "deploy", "required_approvals": 2, "requested_by": "agent://coordinator"},
		"ballots": map[string]any{
			"agent://alice": map[string]any{"choice": "Approve", "reason": "lgtm"},
			"agent://bob":   map[string]any{"choice": "Approve", "reason": "ship it"},
		},
		"approvals": 2, "remaining": 1, "threshold": 2,
	},
	"quorum_reject_paths.json": {
		"phase": "Voting", "approvals": 1, "ballot_order": []any{"agent://alice"},
		"eligible": map[string]any{"positive": false, "negative": false},
	},
}

// TestConformanceFixtures runs the spec's quorum_*.json fixtures (checklist
// CONF-28, CONF-29) at the mode level. The core's part of a Commitment
// (authority) is emulated with policy.MayCommit; everything else is the
// mode's.
func TestConformanceFixtures(t *testing.T) {
	modetest.RunFixtures(t, quorum.New(), modetest.FixtureOptions{
		Glob:          "quorum_*.json",
		ModeID:        quorum.ModeID,
		PayloadPrefix: "quorum.",
		Payloads: map[string]func() proto.Message{
			"ApprovalRequest": func() proto.Message { return &quorumv1.ApprovalRequestPayload{} },
			"Approve":         func() proto.Message { return &quorumv1.ApprovePayload{} },
			"Reject":          func() proto.Message { return &quorumv1.RejectPayload{} },
			"Abstain":         func() proto.Message { return &quorumv1.AbstainPayload{} },
		},
		NumberedIDs: true, // message i has id m<i>
		PinnedCodes: pinnedCodes,
		PinnedState: pinnedState,
	})
}
