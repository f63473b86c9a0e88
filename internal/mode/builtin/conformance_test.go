package builtin_test

import (
	"testing"

	_ "github.com/macpd/macpd/gen/macp/modes/multi_round/v1" // registers ContributePayload
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/testutil"
)

func lookup(t *testing.T) func(string) mode.Mode {
	reg := builtin.Modes()
	return func(id string) mode.Mode {
		e, ok := reg.Lookup(id)
		if !ok {
			return nil
		}
		return e.Mode
	}
}

// TestLatestConformance runs the newest spec's 33 transcript fixtures
// (../shared/conformance-latest) at the mode level under ProfileLatest,
// each with its inline policy parsed by policy.Parse.
func TestLatestConformance(t *testing.T) {
	passed, total := modetest.RunSpecFixtures(t, modetest.LatestConformanceDir(t), "*.json", coord.ProfileLatest, lookup(t))
	t.Logf("latest fixtures: %d of %d pass", passed, total)
	if total != 33 {
		t.Errorf("%d latest fixtures, want 33", total)
	}
}

// TestAprilConformance runs the April baseline's 12 fixtures
// (../shared/conformance) under ProfileApril with the same runner.
func TestAprilConformance(t *testing.T) {
	passed, total := modetest.RunSpecFixtures(t, testutil.ConformanceDir(t), "*.json", coord.ProfileApril, lookup(t))
	t.Logf("April fixtures: %d of %d pass", passed, total)
	if total != 12 {
		t.Errorf("%d April fixtures, want 12", total)
	}
}
