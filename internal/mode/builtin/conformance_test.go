package builtin_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
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

// TestFixturePolicyMisspelled: an inline policy with a misspelled key is
// refused when the fixture binds it, at schema_version 2 and 3 (version 1
// is refused at registration, see internal/policy), naming the key.
func TestFixturePolicyMisspelled(t *testing.T) {
	fx, err := modetest.ReadSpecFixture(filepath.Join(modetest.LatestConformanceDir(t), "decision_majority_empty_tally.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := lookup(t)(fx.Mode)
	for _, v := range []uint32{2, 3} {
		fx.Policy.SchemaVersion = v
		fx.Policy.Rules = json.RawMessage(`{"votin":{"algorithm":"majority"}}`)
		res := modetest.RunSpecFixture(m, fx, coord.ProfileLatest)
		if len(res.Failures) == 0 || !strings.Contains(res.Failures[0], `unknown key "votin"`) {
			t.Errorf("v%d: failures %v, want the binding refused for \"votin\"", v, res.Failures)
		}
		// Corrected, the fixture passes at its own version 3; at version 2
		// the legacy fail-open empty tally accepts the first Commitment.
		fx.Policy.Rules = json.RawMessage(`{"voting":{"algorithm":"majority"}}`)
		res = modetest.RunSpecFixture(m, fx, coord.ProfileLatest)
		switch {
		case v == 3 && len(res.Failures) != 0:
			t.Errorf("v3 corrected: %v", res.Failures)
		case v == 2 && (len(res.Failures) == 0 || !strings.HasPrefix(res.Failures[0], "message 2 (Commitment from agent://orchestrator): accepted")):
			t.Errorf("v2 corrected: %v, want the empty-tally Commitment accepted (legacy fail-open)", res.Failures)
		}
	}
}
