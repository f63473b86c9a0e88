package builtin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/testutil"
)

// TestExamplePolicies: every examples/policies/*.json is a policy
// descriptor RegisterPolicy accepts (policy.CheckRegistration, then the
// target mode's rules), so the README's what-if replay can use it.
func TestExamplePolicies(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testutil.RepoRoot(t), "examples", "policies", "*.json"))
	if len(files) == 0 {
		t.Fatal("no examples/policies/*.json")
	}
	reg := builtin.Modes()
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p modetest.SpecFixturePolicy
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		d, err := p.Descriptor()
		if err != nil {
			t.Fatal(err)
		}
		pol, err := policy.CheckRegistration(d)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		e, ok := reg.Lookup(d.Mode)
		if !ok {
			t.Fatalf("%s: mode %q", filepath.Base(f), d.Mode)
		}
		if v, ok := e.Mode.(mode.RulesValidator); ok {
			if err := v.ValidateRules(pol); err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
		}
	}
}
