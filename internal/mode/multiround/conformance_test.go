package multiround_test

import (
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/multiround"
)

// pinnedCodes are the codes macpd returns for each fixture message where the
// fixture gives none (checklist CONF-14 only asks for "reject"); they pin
// the decisions documented in multiround.go. The non-initiator Commitment
// is refused by the core's authority check (emulated by modetest.RunFixtures).
var pinnedCodes = map[string][]coord.Code{
	"multi_round_happy_path.json":   {"", "", "", ""},
	"multi_round_reject_paths.json": {coord.CodeInvalidEnvelope, "", "", coord.CodeForbidden},
}

// pinnedState is matched against the final projection in addition to any
// expected_mode_state (the multi_round fixtures carry none).
var pinnedState = map[string]map[string]any{
	"multi_round_happy_path.json": {
		"phase": "Committed", "converged": true, "converged_value": "option_a", "round": 3,
		"values": map[string]any{"agent://alice": "option_a", "agent://bob": "option_a"},
	},
	"multi_round_reject_paths.json": {
		"phase": "Converged", "converged": true, "converged_value": "option_a", "round": 2, "contributions": 2,
	},
}

// TestConformanceFixtures runs the spec's multi_round_*.json fixtures
// (checklist CONF-30, CONF-31) at the mode level. The core's part of a Commitment
// (authority) is emulated with policy.MayCommit; everything else is the
// mode's.
func TestConformanceFixtures(t *testing.T) {
	modetest.RunFixtures(t, multiround.New(), modetest.FixtureOptions{
		Glob:   "multi_round_*.json",
		ModeID: multiround.ModeID,
		// CONF-11: multi_round.Contribute is UTF-8 JSON {"value": ...}, not
		// protobuf.
		JSONPayloads: []string{"multi_round.Contribute"},
		NumberedIDs:  true, // message i has id m<i>
		PinnedCodes:  pinnedCodes,
		PinnedState:  pinnedState,
	})
}
