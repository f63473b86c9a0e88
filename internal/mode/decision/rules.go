package decision

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
)

// Voting algorithms (RFC-MACP-0012 §4.1, decision-rules.schema.json).
const (
	AlgNone          = "none"
	AlgMajority      = "majority"
	AlgSupermajority = "supermajority"
	AlgUnanimous     = "unanimous"
	AlgWeighted      = "weighted"
	AlgPlurality     = "plurality"
)

// Quorum types.
const (
	QuorumCount      = "count"
	QuorumPercentage = "percentage"
)

// defaultSupermajority is the supermajority threshold when the policy sets
// none. Decision: the schema's generic default (0.5) contradicts its own
// "supermajority threshold > 0.5" constraint; two thirds is the
// registries/policies.md policy.supermajority value and the reference
// runtime's fallback.
const defaultSupermajority = 2.0 / 3.0

// rules are the parsed decision rules of the bound policy. A nil *rules
// means the policy constrains nothing (policy.default, or every knob at its
// permissive default): the initiator's Commitment is taken at face value
// (checklist DEC-8).
type rules struct {
	algorithm string // "" for none
	threshold float64
	// Quorum: voters >= quorumValue (count) or voters/participants >=
	// quorumValue (percentage, a 0..1 share).
	quorumPct   bool
	quorumValue float64
	// weights by participant index; nil when every weight is 1.
	weights              []float64
	vetoes               bool
	vetoThreshold        int
	minConfidence        float64
	requiredBeforeVoting bool
	requireVoteQuorum    bool

	// latest selects the newest evaluation (evaluateLatest): sessions bound
	// to coord.ProfileLatest, and policies of schema_version 2 or 3 under
	// any profile (no April session could bind one). Otherwise the April
	// rules (deny) apply unchanged.
	latest bool
	// failClosed: schema_version 3, an empty decisive tally fails every
	// algorithm other than none (RFC-MACP-0012 §4.1 "Empty tally").
	failClosed bool
	// schema_version >= 2 knobs (RFC-MACP-0012 §4.1, RFC-MACP-0007 §6.2).
	allowDeclineOverApproval bool
	objectionAction          string
	// distinct declared participants (unanimous quantifies over them).
	declared int
}

// Critical-objection actions (objection_handling.critical_objection_action).
const (
	ObjectionDeny            = "deny"
	ObjectionFinalizeDecline = "finalize_decline"
	ObjectionHold            = "hold"
)

type rawVoting struct {
	Algorithm *string  `json:"algorithm"`
	Threshold *float64 `json:"threshold"`
	Quorum    *struct {
		Type  *string  `json:"type"`
		Value *float64 `json:"value"`
	} `json:"quorum"`
	Weights map[string]float64 `json:"weights"`
}

type rawObjections struct {
	CriticalSeverityVetoes  *bool    `json:"critical_severity_vetoes"`
	VetoThreshold           *float64 `json:"veto_threshold"`
	CriticalObjectionAction *string  `json:"critical_objection_action"`
}

type rawEvaluation struct {
	MinimumConfidence    *float64 `json:"minimum_confidence"`
	RequiredBeforeVoting *bool    `json:"required_before_voting"`
}

type rawCommitment struct {
	RequireVoteQuorum        *bool `json:"require_vote_quorum"`
	AllowDeclineOverApproval *bool `json:"allow_decline_over_approval"`
}

func badPolicy(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidPolicyDefinition, format, args...)
}

func in01(v float64) bool { return v >= 0 && v <= 1 }

// ValidateRules checks a policy's decision rules against
// decision-rules.schema.json without a session, so a policy registry can
// refuse bad rules at RegisterPolicy (RFC-MACP-0012 §7, checklist POL-3)
// rather than at SessionStart. Errors carry INVALID_POLICY_DEFINITION.
func ValidateRules(p *policy.Policy) error {
	_, err := parseRules(p, nil, "")
	return err
}

// parseRules validates the decision sections of p against
// decision-rules.schema.json (RFC-MACP-0012 §4.1) and returns the rules,
// nil when they constrain nothing. profile is the session's (rules differ
// by profile only in evaluation, never in validation). Errors carry
// INVALID_POLICY_DEFINITION.
func parseRules(p *policy.Policy, participants []string, profile string) (*rules, error) {
	if p == nil {
		return nil, nil
	}
	var (
		v  rawVoting
		o  rawObjections
		e  rawEvaluation
		c  rawCommitment
		r  rules
		on bool // some knob is not at its permissive default
	)
	for _, s := range []struct {
		name string
		into any
	}{{"voting", &v}, {"objection_handling", &o}, {"evaluation", &e}, {"commitment", &c}} {
		if err := p.DecodeSection(s.name, s.into); err != nil {
			return nil, err
		}
	}

	if v.Algorithm != nil {
		switch a := *v.Algorithm; a {
		case AlgNone:
		case AlgMajority, AlgSupermajority, AlgUnanimous, AlgWeighted, AlgPlurality:
			r.algorithm, on = a, true
		default:
			return nil, badPolicy("voting.algorithm %q is not one of none, majority, supermajority, unanimous, weighted, plurality", a)
		}
	}
	r.threshold = 0.5
	if v.Threshold != nil {
		if !in01(*v.Threshold) {
			return nil, badPolicy("voting.threshold %v is outside [0, 1]", *v.Threshold)
		}
		r.threshold = *v.Threshold
	}
	if r.algorithm == AlgSupermajority {
		if v.Threshold == nil {
			r.threshold = defaultSupermajority
		} else if r.threshold <= 0.5 {
			return nil, badPolicy("voting.threshold %v must exceed 0.5 for supermajority", r.threshold)
		}
	}
	if q := v.Quorum; q != nil {
		if q.Type != nil {
			switch *q.Type {
			case QuorumCount:
			case QuorumPercentage:
				r.quorumPct = true
			default:
				return nil, badPolicy("voting.quorum.type %q is not count or percentage", *q.Type)
			}
		}
		if q.Value != nil {
			val := *q.Value
			if !(val >= 0) || math.IsInf(val, 0) {
				return nil, badPolicy("voting.quorum.value %v must be >= 0", val)
			}
			// Decision (⚠C8): a percentage quorum is a 0..1 share of the
			// declared participants, as the schema says; the reference
			// runtime's 0..100 reading is refused loudly rather than guessed.
			if r.quorumPct && val > 1 {
				return nil, badPolicy("voting.quorum.value %v: a percentage quorum is a share in [0, 1]", val)
			}
			r.quorumValue = val
			if val > 0 {
				on = true
			}
		}
	}
	if r.algorithm == AlgWeighted && v.Weights == nil {
		return nil, badPolicy("voting.weights is required for the weighted algorithm")
	}
	for _, id := range slices.Sorted(maps.Keys(v.Weights)) { // sorted: same error every time
		if w := v.Weights[id]; !(w >= 0) || math.IsInf(w, 0) {
			return nil, badPolicy("voting.weights[%q] = %v must be a finite number >= 0", id, v.Weights[id])
		}
	}
	version := p.SchemaVersion()
	r.latest = coord.IsLatest(profile) || version >= 2
	r.failClosed = version >= 3
	if r.algorithm == AlgWeighted {
		// Decision: weights apply only to the weighted algorithm (schema
		// text); weights of undeclared ids are ignored. A declared
		// participant missing from weights weighs 1 under the April rules
		// (as the reference runtime) and 0 under the newest ones
		// (RFC-MACP-0012 §4.1 weighted electorate; spec fixtures
		// decision_weighted_zero_weight*.json, every schema_version).
		unlisted := 1.0
		if r.latest {
			unlisted = 0
		}
		r.weights = make([]float64, len(participants))
		for i, id := range participants {
			r.weights[i] = unlisted
			if w, ok := v.Weights[id]; ok {
				r.weights[i] = w
			}
		}
	}
	seen := make(map[string]bool, len(participants))
	for _, id := range participants {
		if !seen[id] {
			seen[id] = true
			r.declared++
		}
	}

	r.vetoThreshold = 1
	if o.VetoThreshold != nil {
		t := *o.VetoThreshold
		if t != math.Trunc(t) || t < 1 || t > math.MaxInt32 {
			return nil, badPolicy("objection_handling.veto_threshold %v must be an integer >= 1", t)
		}
		r.vetoThreshold = int(t)
	}
	if o.CriticalSeverityVetoes != nil && *o.CriticalSeverityVetoes {
		r.vetoes, on = true, true
	}
	// The schema_version 2 knobs are read only from policies declaring
	// version 2 or 3; a stored version 1 policy is evaluated under version
	// 1 semantics (RFC-MACP-0012 §8), where they do not exist.
	r.objectionAction = ObjectionDeny
	if version >= 2 {
		if a := o.CriticalObjectionAction; a != nil {
			switch *a {
			case ObjectionDeny, ObjectionFinalizeDecline, ObjectionHold:
				r.objectionAction = *a
			default:
				return nil, badPolicy("objection_handling.critical_objection_action %q is not one of deny, finalize_decline, hold", *a)
			}
		}
		if c.AllowDeclineOverApproval != nil {
			r.allowDeclineOverApproval = *c.AllowDeclineOverApproval
		}
	}

	if e.MinimumConfidence != nil {
		if !in01(*e.MinimumConfidence) {
			return nil, badPolicy("evaluation.minimum_confidence %v is outside [0, 1]", *e.MinimumConfidence)
		}
		r.minConfidence = *e.MinimumConfidence
	}
	if e.RequiredBeforeVoting != nil && *e.RequiredBeforeVoting {
		r.requiredBeforeVoting, on = true, true
	}
	if c.RequireVoteQuorum != nil && *c.RequireVoteQuorum {
		r.requireVoteQuorum, on = true, true
	}
	if !on {
		return nil, nil
	}
	return &r, nil
}

// qualifies reports whether an Evaluation satisfies
// evaluation.required_before_voting. Decision: minimum_confidence ("minimum
// confidence level for evaluations to be considered valid") does not
// reject Evaluations — they stay on record — it decides which ones count
// for required_before_voting; REVIEW never counts, being "informational
// analysis records only" (RFC-MACP-0007 §4; as the reference runtime).
// minimum_confidence therefore has no effect without required_before_voting.
func (r *rules) qualifies(recommendation string, confidence float64) bool {
	if recommendation == RecReview {
		return false
	}
	return r == nil || confidence >= r.minConfidence
}

// voteAllowed enforces evaluation.required_before_voting on a Vote.
// Decision (⚠C15, checklist POL-31): this knob acts when the Vote arrives
// ("at least one evaluation must exist before votes are counted"): a Vote on
// a proposal with no qualifying Evaluation is refused with POLICY_DENIED —
// the envelope is well-formed; the bound policy forbids it. The evaluation
// must be of the proposal voted on.
func (r *rules) voteAllowed(p *proposal) error {
	if r == nil || !r.requiredBeforeVoting || p.qualified {
		return nil
	}
	reason := fmt.Sprintf("evaluation.required_before_voting: proposal %q has no evaluation other than REVIEW with confidence >= %v",
		p.id, r.minConfidence)
	return &coord.Error{Code: coord.CodePolicyDenied, Message: "policy denies the vote: " + reason, Reasons: []string{reason}}
}

func (r *rules) weight(idx int) float64 {
	if r == nil || r.weights == nil {
		return 1
	}
	return r.weights[idx]
}

// subject picks the proposal a Commitment is judged on. CommitmentPayload
// names no proposal, so, Decision: it is the proposal with the most APPROVE
// votes (by weight under the weighted algorithm), ties going to the
// earliest accepted proposal. All rules below are evaluated on that one
// proposal's votes and objections.
func (r *rules) subject(ps []*proposal) *proposal {
	best := ps[0]
	for _, p := range ps[1:] {
		if r.approvals(p) > r.approvals(best) {
			best = p
		}
	}
	return best
}

func (r *rules) approvals(p *proposal) float64 {
	if r.algorithm == AlgWeighted {
		return p.approveW
	}
	return float64(p.approve)
}

// deny returns the reasons the rules refuse a positive Commitment, none if
// they allow it. participants is the number of declared participants.
//
// Decisions (⚠C8), all on the subject proposal:
//   - "Cast votes" for thresholds are APPROVE + REJECT: ABSTAIN counts toward
//     the quorum (the participant took part) but toward no threshold
//     (RFC-MACP-0007 §4: absent a rule, abstentions count toward nothing).
//   - majority: strictly more than half of cast votes approve (RFC-MACP-0012
//     §4.1 "more than 50%"; the reference runtime's >= 0.5 is not followed),
//     so exactly 50% fails; voting.threshold is ignored.
//   - supermajority: approve/cast >= threshold; weighted: approve weight /
//     (approve + reject weight) >= threshold. Ratios are compared exactly,
//     without rounding (2/3 does not reach 0.67).
//   - unanimous: every cast vote approves, at least one does (RFC text "all
//     cast votes", not registries/policies.md "all participants").
//   - plurality: the subject has at least one APPROVE and strictly more than
//     any other proposal (a tie for first has no winner); rejections do not
//     count ("no threshold").
//   - Quorum is "participation required before votes are counted": under
//     any algorithm other than none, a missed quorum fails the vote; with
//     commitment.require_vote_quorum it is required even under none.
//   - Veto: critical_severity_vetoes counts distinct participants with a
//     critical Objection on the subject; veto_threshold of them veto. Only
//     Objections count (BLOCK evaluations are advisory, RFC-MACP-0007 §4).
//   - Zero cast votes fail every algorithm other than none.
func (r *rules) deny(ps []*proposal, participants int) []string {
	if r == nil {
		return nil
	}
	p := r.subject(ps)
	var reasons []string
	if r.vetoes && p.criticalCount >= r.vetoThreshold {
		reasons = append(reasons, fmt.Sprintf("objection_handling: proposal %q is vetoed by %d participant(s) with critical objections (veto_threshold %d)",
			p.id, p.criticalCount, r.vetoThreshold))
	}
	voters := p.approve + p.reject + p.abstain
	quorum := r.quorumMet(voters, participants)
	if !quorum && (r.requireVoteQuorum || r.algorithm != "") {
		reasons = append(reasons, fmt.Sprintf("voting.quorum: %d of %d declared participant(s) voted on proposal %q, quorum is %s",
			voters, participants, p.id, r.quorumString()))
	}
	if quorum && r.algorithm != "" {
		if why := r.tally(p, ps); why != "" {
			reasons = append(reasons, why)
		}
	}
	return reasons
}

func (r *rules) quorumMet(voters, participants int) bool {
	if r.quorumValue == 0 {
		return true
	}
	if r.quorumPct {
		// Compare the exact ratio: 7/10 meets 0.7, whereas 0.7*10 rounds up.
		return participants > 0 && float64(voters)/float64(participants) >= r.quorumValue
	}
	return float64(voters) >= r.quorumValue
}

func (r *rules) quorumString() string {
	if r.quorumPct {
		return "a " + strconv.FormatFloat(r.quorumValue, 'g', -1, 64) + " share of the declared participants"
	}
	return strconv.FormatFloat(r.quorumValue, 'g', -1, 64) + " vote(s)"
}

// tally applies the voting algorithm to p, returning why it fails or "".
func (r *rules) tally(p *proposal, ps []*proposal) string {
	cast := p.approve + p.reject
	switch r.algorithm {
	case AlgMajority:
		if 2*p.approve > cast {
			return ""
		}
		return fmt.Sprintf("voting.algorithm majority: %d of %d cast vote(s) approve proposal %q; more than half must", p.approve, cast, p.id)
	case AlgSupermajority:
		if cast > 0 && float64(p.approve)/float64(cast) >= r.threshold {
			return ""
		}
		return fmt.Sprintf("voting.algorithm supermajority: %d of %d cast vote(s) approve proposal %q; at least %v must",
			p.approve, cast, p.id, r.threshold)
	case AlgUnanimous:
		if p.approve > 0 && p.reject == 0 {
			return ""
		}
		return fmt.Sprintf("voting.algorithm unanimous: %d of %d cast vote(s) approve proposal %q; all must, and at least one",
			p.approve, cast, p.id)
	case AlgWeighted:
		total := p.approveW + p.rejectW
		if total > 0 && p.approveW/total >= r.threshold {
			return ""
		}
		return fmt.Sprintf("voting.algorithm weighted: approve weight %v of %v cast on proposal %q; at least %v of it must approve",
			p.approveW, total, p.id, r.threshold)
	case AlgPlurality:
		if p.approve == 0 {
			return fmt.Sprintf("voting.algorithm plurality: proposal %q has no APPROVE vote", p.id)
		}
		for _, q := range ps {
			if q != p && q.approve == p.approve {
				return fmt.Sprintf("voting.algorithm plurality: proposals %q and %q tie with %d APPROVE vote(s)", p.id, q.id, p.approve)
			}
		}
		return ""
	}
	return ""
}

// Voting results of the newest rules (RFC-MACP-0007 §6.2).
type result uint8

const (
	resultPassed result = iota
	resultFailed
	resultNoVotes
)

// evaluateLatest returns the reasons the newest rules refuse a Commitment
// of the given polarity, none if they allow it (RFC-MACP-0007 §6.2,
// RFC-MACP-0012 §4.1), on the subject proposal. Decisions (see
// docs/spec-decisions.md "Decision Mode: newest rules"):
//   - The decisive tally is the APPROVE and REJECT votes of positive
//     weight (every vote weighs 1 outside the weighted algorithm; an
//     unlisted participant weighs 0 under it). ABSTAIN and weight-0 votes
//     are accepted and kept but decide nothing. An empty decisive tally is
//     NoVotes, never Failed, and no ratio is computed on it.
//   - A critical-objection veto (critical_severity_vetoes, veto_threshold)
//     refuses every Commitment under critical_objection_action deny and
//     hold (hold: the session stays open); under finalize_decline it
//     refuses the positive direction and authorizes a negative one, which
//     then needs nothing else: the decline guard, its require_vote_quorum
//     conjunct and the tally are waived whole (spec fixtures
//     decision_finalize_decline_*.json).
//   - commitment.require_vote_quorum: voting.quorum must be met (voters on
//     the subject, abstentions included) for any other Commitment, either
//     polarity, under any algorithm. voting.quorum alone gates nothing.
//   - algorithm none (face-value exception): outcome_positive is taken at
//     face value, no decline guard.
//   - Otherwise Passed allows positive, and negative only with
//     allow_decline_over_approval and the decline guard (the guard "applies
//     across all three voting results"); Failed refuses positive and
//     allows negative iff the decline guard holds (a decisive REJECT on
//     the subject); NoVotes refuses negative, and positive under
//     schema_version 3 (fail-closed) or, under 1 and 2 (legacy fail-open),
//     only when require_vote_quorum is set.
func (r *rules) evaluateLatest(ps []*proposal, positive bool, participants int) []string {
	if r == nil {
		return nil
	}
	p := r.subjectLatest(ps)
	var reasons []string
	if r.vetoes && p.criticalCount >= r.vetoThreshold {
		veto := fmt.Sprintf("proposal %q has critical objections from %d participant(s) (veto_threshold %d)", p.id, p.criticalCount, r.vetoThreshold)
		switch r.objectionAction {
		case ObjectionFinalizeDecline:
			if !positive {
				return nil // objection-authorized decline
			}
			reasons = append(reasons, "objection_handling: the veto blocks a positive commitment: "+veto+" (critical_objection_action finalize_decline)")
		case ObjectionHold:
			reasons = append(reasons, "objection_handling: held: "+veto+" (critical_objection_action hold)")
		default:
			reasons = append(reasons, "objection_handling: vetoed: "+veto)
		}
	}
	voters := p.approve + p.reject + p.abstain
	quorum := r.quorumMet(voters, participants)
	if r.requireVoteQuorum && !quorum {
		reasons = append(reasons, fmt.Sprintf("commitment.require_vote_quorum: %d of %d declared participant(s) voted on proposal %q, quorum is %s",
			voters, participants, p.id, r.quorumString()))
	}
	if r.algorithm == "" {
		return reasons
	}
	res, why := r.resultLatest(p, ps)
	guard := func() {
		if p.rejectD == 0 {
			reasons = append(reasons, fmt.Sprintf("decline guard: no decisive REJECT vote on proposal %q backs a negative commitment (RFC-MACP-0007 §6.2)", p.id))
		}
	}
	switch res {
	case resultPassed:
		if !positive {
			if !r.allowDeclineOverApproval {
				reasons = append(reasons, why+"; a negative commitment over a passing vote needs commitment.allow_decline_over_approval")
			} else {
				guard()
			}
		}
	case resultFailed:
		if positive {
			reasons = append(reasons, why)
		} else {
			guard()
		}
	case resultNoVotes:
		switch {
		case !positive:
			reasons = append(reasons, fmt.Sprintf("voting.algorithm %s: no decisive vote on proposal %q; a negative commitment needs a decisive REJECT (RFC-MACP-0007 §6.2)", r.algorithm, p.id))
		case r.failClosed:
			reasons = append(reasons, fmt.Sprintf("voting.algorithm %s: no decisive vote on proposal %q; an empty tally fails (schema_version 3, RFC-MACP-0012 §4.1)", r.algorithm, p.id))
		case r.requireVoteQuorum:
			if quorum { // else already reported
				reasons = append(reasons, fmt.Sprintf("commitment.require_vote_quorum: no decisive vote on proposal %q", p.id))
			}
		}
	}
	return reasons
}

// subjectLatest is subject with decisive approvals.
func (r *rules) subjectLatest(ps []*proposal) *proposal {
	best := ps[0]
	for _, p := range ps[1:] {
		if r.approvalsLatest(p) > r.approvalsLatest(best) {
			best = p
		}
	}
	return best
}

func (r *rules) approvalsLatest(p *proposal) float64 {
	if r.algorithm == AlgWeighted {
		return p.approveW
	}
	return float64(p.approveD)
}

// resultLatest applies the algorithm to p's decisive tally. Every
// threshold comparison is inclusive (RFC-MACP-0012 §4.1): majority and
// supermajority compare the approve share of decisive votes with
// voting.threshold (0.5 and 2/3 by default); weighted the approve share of
// decisive weight; unanimous needs an APPROVE from every declared
// participant and no REJECT (zero declared participants fail); plurality
// needs strictly more APPROVE than REJECT votes and strictly more APPROVE
// votes than any other proposal.
func (r *rules) resultLatest(p *proposal, ps []*proposal) (result, string) {
	cast := p.approveD + p.rejectD
	if cast == 0 || (r.algorithm == AlgWeighted && !(p.approveW+p.rejectW > 0)) {
		return resultNoVotes, ""
	}
	pass := false
	var why string
	switch r.algorithm {
	case AlgMajority, AlgSupermajority:
		pass = float64(p.approveD)/float64(cast) >= r.threshold
		why = fmt.Sprintf("voting.algorithm %s: %d of %d decisive vote(s) approve proposal %q; at least %v must",
			r.algorithm, p.approveD, cast, p.id, r.threshold)
	case AlgWeighted:
		total := p.approveW + p.rejectW
		pass = p.approveW/total >= r.threshold
		why = fmt.Sprintf("voting.algorithm weighted: approve weight %v of %v on proposal %q; at least %v of it must approve",
			p.approveW, total, p.id, r.threshold)
	case AlgUnanimous:
		pass = r.declared > 0 && p.rejectD == 0 && p.approveD == r.declared
		why = fmt.Sprintf("voting.algorithm unanimous: %d of %d declared participant(s) approve proposal %q, %d reject; all must approve",
			p.approveD, r.declared, p.id, p.rejectD)
	case AlgPlurality:
		pass = p.approveD > p.rejectD
		why = fmt.Sprintf("voting.algorithm plurality: proposal %q has %d APPROVE and %d REJECT vote(s); strictly more must approve",
			p.id, p.approveD, p.rejectD)
		for _, q := range ps {
			if pass && q != p && q.approveD >= p.approveD {
				pass = false
				why = fmt.Sprintf("voting.algorithm plurality: proposals %q and %q tie with %d APPROVE vote(s)", p.id, q.id, p.approveD)
			}
		}
	}
	if pass {
		return resultPassed, fmt.Sprintf("voting.algorithm %s passes on proposal %q", r.algorithm, p.id)
	}
	return resultFailed, why
}
