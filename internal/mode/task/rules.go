package task

import (
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
	if err := p.DecodeSection("assignment", &a); err != nil {
		return r, err
	}
	if err := p.DecodeSection("completion", &c); err != nil {
		return r, err
	}
	r.allowReassignment = a.AllowReassignmentOnReject != nil && *a.AllowReassignmentOnReject
	r.requireOutput = c.RequireOutput != nil && *c.RequireOutput
	return r, nil
}
