package policy_test

import (
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
)

func TestValidID(t *testing.T) {
	for _, id := range []string{"policy.default", "policy.fraud.majority-veto", "test-policy-1700000000000", "a", "urn:x:y_z", strings.Repeat("p", policy.MaxIDLen)} {
		if !policy.ValidID(id) {
			t.Errorf("ValidID(%q) = false", id)
		}
	}
	for _, id := range []string{"", ".x", "-x", "_x", "a b", "a/b", "pólicy", "a\n", strings.Repeat("p", policy.MaxIDLen+1)} {
		if policy.ValidID(id) {
			t.Errorf("ValidID(%q) = true", id)
		}
	}
}

func TestCheckRegistration(t *testing.T) {
	ok := policy.Descriptor{ID: "policy.x.y", Mode: "*", Rules: `{"commitment":{"authority":"any_participant"}}`, SchemaVersion: 1}
	p, err := policy.CheckRegistration(ok)
	if err != nil || p.Commitment.Authority != policy.AuthorityAnyParticipant {
		t.Fatalf("CheckRegistration(%v) = %v, %v", ok, p, err)
	}
	for name, mut := range map[string]func(d *policy.Descriptor){
		"no id":            func(d *policy.Descriptor) { d.ID = "" },
		"bad id":           func(d *policy.Descriptor) { d.ID = "a b" },
		"no mode":          func(d *policy.Descriptor) { d.Mode = "" },
		"no rules":         func(d *policy.Descriptor) { d.Rules = "" },
		"rules not object": func(d *policy.Descriptor) { d.Rules = `"x"` },
		"schema 0":         func(d *policy.Descriptor) { d.SchemaVersion = 0 },
		"long description": func(d *policy.Descriptor) { d.Description = strings.Repeat("d", policy.MaxDescriptionLen+1) },
		"long rules":       func(d *policy.Descriptor) { d.Rules = `{"x":"` + strings.Repeat("r", policy.MaxRulesLen) + `"}` },
	} {
		d := ok
		mut(&d)
		if _, err := policy.CheckRegistration(d); coord.CodeOf(err) != coord.CodeInvalidPolicyDefinition {
			t.Errorf("%s: %v", name, err)
		}
	}
}
