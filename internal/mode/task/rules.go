package task

import (
	"bytes"
	"encoding/json"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
)

// rules are the Task Mode governance rules of the bound policy
// (RFC-MACP-0012 §4.4, task-rules.schema.json). The zero value is
// policy.default: no reassignment, no output requirement. The commitment
// section belongs to the core (policy.Policy.Commitment).
type rules struct {
	// allowReassignment is assignment.allow_reassignment_on_reject
	// (RFC-MACP-0009 §5 rule 3c).
	allowReassignment bool
	// requireOutput is completion.require_output.
	requireOutput bool
}

type rawAssignment struct {
	AllowReassignmentOnReject *bool `json:"allow_reassignment_on_reject"`
}

type rawCompletion struct {
	RequireOutput *bool `json:"require_output"`
}

func badPolicy(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidPolicyDefinition, format, args...)
}

// section decodes the rules section name of p into into. An absent or null
// section leaves into untouched; anything but an object, or a field of the
// wrong JSON type, is INVALID_POLICY_DEFINITION. Unknown keys are allowed
// (the schema does not forbid additional properties).
func section(p *policy.Policy, name string, into any) error {
	raw := bytes.TrimSpace(p.Section(name))
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] != '{' {
		return badPolicy("%s must be an object", name)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return badPolicy("%s: %v", name, err)
	}
	return nil
}

// parseRules validates the task sections of p (nil = policy.default).
func parseRules(p *policy.Policy) (rules, error) {
	var r rules
	if p == nil {
		return r, nil
	}
	var (
		a rawAssignment
		c rawCompletion
	)
	if err := section(p, "assignment", &a); err != nil {
		return r, err
	}
	if err := section(p, "completion", &c); err != nil {
		return r, err
	}
	r.allowReassignment = a.AllowReassignmentOnReject != nil && *a.AllowReassignmentOnReject
	r.requireOutput = c.RequireOutput != nil && *c.RequireOutput
	return r, nil
}
