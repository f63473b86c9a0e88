package modetest

import (
	"testing"

	"github.com/macpd/macpd/internal/policy"
)

// Binding uses policy.default for empty rules and the named policy
// otherwise; rules that do not parse panic when there is no test to fail.
func TestBinding(t *testing.T) {
	b := Binding(t, "macp.mode.decision.v1", "1.0.0", "policy.test.x", "", "agent://i", []string{"agent://a"})
	if b.PolicyVersion != policy.MustDefault().Descriptor.ID || b.Initiator != "agent://i" || b.SessionID != "s1" {
		t.Fatalf("default binding %+v", b)
	}
	b = Binding(t, "macp.mode.decision.v1", "1.0.0", "policy.test.x", `{"voting":{"algorithm":"majority"}}`, "agent://i", nil)
	if b.PolicyVersion != "policy.test.x" || b.Policy.Descriptor.Mode != "macp.mode.decision.v1" {
		t.Fatalf("policy binding %+v", b)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("bad rules without a test did not panic")
		}
	}()
	Binding(nil, "macp.mode.decision.v1", "1.0.0", "policy.test.x", `not json`, "agent://i", nil)
}
