package quorum

import (
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
)

// Threshold types of threshold.type (RFC-MACP-0012 §4.2,
// quorum-rules.schema.json).
const (
	ThresholdNOfM       = "n_of_m"
	ThresholdPercentage = "percentage"
	ThresholdWeighted   = "weighted"
)

// Abstention interpretations of abstention.interpretation.
const (
	AbstainNeutral        = "neutral"
	AbstainImplicitReject = "implicit_reject"
	AbstainIgnored        = "ignored"
)

// thresholdKind says where the approval threshold comes from.
type thresholdKind uint8

const (
	// fromRequest: ApprovalRequest.required_approvals (no policy override).
	fromRequest thresholdKind = iota
	nOfM
	percentage
	weighted
)

var thresholdSources = [...]string{"required_approvals", ThresholdNOfM, ThresholdPercentage, ThresholdWeighted}

// rules are the parsed quorum rules of the bound policy. The zero value is
// policy.default: the ApprovalRequest's required_approvals, neutral
// abstentions (RFC-MACP-0011 §5 rule 4a).
type rules struct {
	kind thresholdKind
	// count is the n_of_m threshold; fraction the percentage share in
	// (0, 1]; weightSum the weighted threshold.
	count     int
	fraction  float64
	weightSum float64
	// weights by participant index (weighted only).
	weights []float64

	interpretation     string // "" = neutral
	countsTowardQuorum bool
}

type rawThreshold struct {
	Type    *string            `json:"type"`
	Value   *float64           `json:"value"`
	Weights map[string]float64 `json:"weights"`
}

type rawAbstention struct {
	CountsTowardQuorum *bool   `json:"counts_toward_quorum"`
	Interpretation     *string `json:"interpretation"`
}

func badPolicy(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidPolicyDefinition, format, args...)
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// parseRules validates the quorum sections of p (nil = policy.default)
// against quorum-rules.schema.json for a session whose eligible
// participants are names. Errors carry INVALID_POLICY_DEFINITION.
//
// Decisions:
//   - threshold.value absent or 0 means "no override" (the schema has no
//     default, and a zero threshold would violate RFC-MACP-0011 §5 rule 2);
//     the SDK policy builders send {"type":"n_of_m","value":0} by default.
//   - n_of_m: value must be an integer (schema "type": "integer").
//   - percentage (⚠C13): value is a share in (0, 1] of the eligible
//     participants, as the schema's description says, although its "type"
//     is "integer"; any JSON number is accepted. Values above 1 are refused
//     rather than read as 0–100 (the reference runtime's reading), as
//     decision's percentage quorum does.
//   - weighted: value is a finite sum of weights. Weights live in
//     threshold.weights (RFC-MACP-0011 §5 rule 6 only says "in the policy
//     rules object"; this keeps them beside the threshold they serve, as
//     decision keeps voting.weights beside its algorithm) and are required;
//     each is a finite number >= 0, a declared participant without one
//     weighs 1, weights of undeclared ids are ignored. Weights are ignored
//     by the other threshold types.
//   - A threshold no session ballot could ever reach (n_of_m above the
//     number of eligible participants, weighted above their total weight)
//     is refused when the session starts, extending §5 rule 2 to the
//     override that replaces required_approvals (§5 rule 6).
func parseRules(p *policy.Policy, names []string) (rules, error) {
	return parseRulesFor(p, names, true)
}

// parseRulesFor is parseRules; withSession false skips the checks that
// compare the threshold with the session's eligible participants (no
// session exists yet: RegisterPolicy), and the rules it returns must then
// not be used.
func parseRulesFor(p *policy.Policy, names []string, withSession bool) (rules, error) {
	var r rules
	if p == nil {
		return r, nil
	}
	var (
		t rawThreshold
		a rawAbstention
	)
	if err := p.DecodeSection("threshold", &t); err != nil {
		return r, err
	}
	if err := p.DecodeSection("abstention", &a); err != nil {
		return r, err
	}

	typ := ThresholdNOfM
	if t.Type != nil {
		typ = *t.Type
	}
	switch typ {
	case ThresholdNOfM, ThresholdPercentage, ThresholdWeighted:
	default:
		return r, badPolicy("threshold.type %q is not one of n_of_m, percentage, weighted", typ)
	}
	for _, id := range slices.Sorted(maps.Keys(t.Weights)) { // sorted: same error every time
		if w := t.Weights[id]; !(w >= 0) || math.IsInf(w, 0) {
			return r, badPolicy("threshold.weights[%q] = %v must be a finite number >= 0", id, w)
		}
	}
	value := 0.0
	if t.Value != nil {
		value = *t.Value
		if !(value >= 0) || math.IsInf(value, 0) {
			return r, badPolicy("threshold.value %v must be a finite number >= 0", value)
		}
	}
	if value > 0 {
		n := len(names)
		switch typ {
		case ThresholdNOfM:
			if value != math.Trunc(value) {
				return r, badPolicy("threshold.value %v must be an integer for n_of_m", value)
			}
			if withSession && value > float64(n) {
				return r, badPolicy("threshold.value %v exceeds the %d eligible participant(s) (RFC-MACP-0011 §5 rule 2)", value, n)
			}
			r.kind, r.count = nOfM, int(value)
		case ThresholdPercentage:
			if value > 1 {
				return r, badPolicy("threshold.value %v: a percentage threshold is a share in (0, 1] (⚠C13)", value)
			}
			r.kind, r.fraction = percentage, value
		case ThresholdWeighted:
			if t.Weights == nil {
				return r, badPolicy("threshold.weights is required for the weighted threshold")
			}
			r.weights = make([]float64, n)
			total := 0.0
			for i, id := range names {
				r.weights[i] = 1
				if w, ok := t.Weights[id]; ok {
					r.weights[i] = w
				}
				total += r.weights[i]
			}
			if withSession && value > total {
				return r, badPolicy("threshold.value %v exceeds the eligible participants' total weight %v", value, total)
			}
			r.kind, r.weightSum = weighted, value
		}
	}

	if a.Interpretation != nil {
		switch i := *a.Interpretation; i {
		case AbstainNeutral, AbstainImplicitReject, AbstainIgnored:
			r.interpretation = i
		default:
			return r, badPolicy("abstention.interpretation %q is not one of neutral, implicit_reject, ignored", i)
		}
	}
	r.countsTowardQuorum = a.CountsTowardQuorum != nil && *a.CountsTowardQuorum
	return r, nil
}

// abstentionParticipates reports whether an Abstain counts toward the
// participation quorum (see state.tally).
func (r *rules) abstentionParticipates() bool {
	switch r.interpretation {
	case AbstainImplicitReject:
		return true
	case AbstainIgnored:
		return false
	}
	return r.countsTowardQuorum
}

// percentThreshold is the smallest k >= 1 with k/base >= f, comparing the
// exact ratio (so 7 of 10 meets 0.7, although 0.7*10 rounds up to 7.000…1).
func percentThreshold(f float64, base int) int {
	if base <= 0 {
		return 1
	}
	k := int(math.Ceil(f * float64(base)))
	for k > 1 && float64(k-1)/float64(base) >= f {
		k--
	}
	for k < base && float64(k)/float64(base) < f {
		k++
	}
	return max(k, 1)
}
