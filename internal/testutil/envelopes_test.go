package testutil_test

import (
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/testutil"
)

// The literals of envelopes.go are the core's names.
func TestNamesMatchTheCore(t *testing.T) {
	for _, c := range [][2]string{
		{testutil.ProtocolVersion, coord.ProtocolVersion},
		{testutil.DecisionMode, decision.ModeID},
		{testutil.DecisionVersion, decision.ModeVersion},
		{testutil.DecisionEnv("s", "m", "x", nil).MacpVersion, coord.ProtocolVersion},
		{testutil.DecisionStart("s", "m", 1, "a").MessageType, coord.TypeSessionStart},
		{testutil.DecisionProposal("s", "m").MessageType, decision.TypeProposal},
		{testutil.DecisionVote("s", "m", "p").MessageType, decision.TypeVote},
		{testutil.DecisionRejection("s", "m", "c").MessageType, coord.TypeCommitment},
	} {
		if c[0] != c[1] {
			t.Errorf("testutil says %q, the core %q", c[0], c[1])
		}
	}
}
