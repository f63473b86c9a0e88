package proposal

import (
	"math"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
)

// Acceptance criteria (RFC-MACP-0012 §4.3, proposal-rules.schema.json).
const (
	CriterionAllParties   = "all_parties"
	CriterionCounterparty = "counterparty"
	CriterionInitiator    = "initiator"
)

// criterion is the parsed acceptance.criterion.
type criterion uint8

const (
	allParties criterion = iota
	counterparty
	initiatorOnly
)

var criterionNames = [...]string{CriterionAllParties, CriterionCounterparty, CriterionInitiator}

func (c criterion) String() string { return criterionNames[c] }

// rules are the parsed proposal rules of the bound policy; the zero value is
// policy.default (all_parties, unlimited counter-proposals, only explicit
// terminal rejections).
type rules struct {
	criterion criterion
	// maxRounds bounds the number of accepted CounterProposals; 0 means
	// unlimited.
	maxRounds           int
	terminalOnAnyReject bool
}

type rawRules struct {
	Acceptance *struct {
		Criterion *string `json:"criterion"`
	} `json:"acceptance"`
	CounterProposal *struct {
		MaxRounds *float64 `json:"max_rounds"`
	} `json:"counter_proposal"`
	Rejection *struct {
		TerminalOnAnyReject *bool `json:"terminal_on_any_reject"`
	} `json:"rejection"`
}

func badPolicy(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidPolicyDefinition, format, args...)
}

// parseRules validates the proposal sections of p against
// proposal-rules.schema.json (RFC-MACP-0012 §4.3). The commitment section is
// the core's (policy.Parse). Errors carry INVALID_POLICY_DEFINITION.
func parseRules(p *policy.Policy) (rules, error) {
	var r rules
	if p == nil {
		return r, nil
	}
	var raw rawRules
	for _, s := range []struct {
		name string
		into any
	}{{"acceptance", &raw.Acceptance}, {"counter_proposal", &raw.CounterProposal}, {"rejection", &raw.Rejection}} {
		if err := p.DecodeSection(s.name, s.into); err != nil {
			return r, err
		}
	}
	if a := raw.Acceptance; a != nil && a.Criterion != nil {
		switch *a.Criterion {
		case CriterionAllParties:
			r.criterion = allParties
		case CriterionCounterparty:
			r.criterion = counterparty
		case CriterionInitiator:
			r.criterion = initiatorOnly
		default:
			return r, badPolicy("acceptance.criterion %q is not one of all_parties, counterparty, initiator", *a.Criterion)
		}
	}
	if c := raw.CounterProposal; c != nil && c.MaxRounds != nil {
		v := *c.MaxRounds
		if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
			return r, badPolicy("counter_proposal.max_rounds %v must be an integer >= 0", v)
		}
		r.maxRounds = int(v)
	}
	if x := raw.Rejection; x != nil && x.TerminalOnAnyReject != nil {
		r.terminalOnAnyReject = *x.TerminalOnAnyReject
	}
	return r, nil
}
