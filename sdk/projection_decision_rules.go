package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// DecisionRules are the Decision Mode rules of a policy (RFC-MACP-0012
// §4.1, decision-rules.schema.json) as the newest rules evaluate a
// Commitment (RFC-MACP-0007 §6.2). Make them with [ParseDecisionRules]
// from a registered policy descriptor and ask
// [DecisionProjection.EligibleUnder].
type DecisionRules struct {
	// SchemaVersion is the policy's schema_version (1, 2 or 3).
	SchemaVersion int
	// Algorithm is voting.algorithm; "" for none.
	Algorithm string
	// Threshold is voting.threshold (0.5 by default, 2/3 for
	// supermajority).
	Threshold float64
	// QuorumPercentage says voting.quorum.type is percentage (QuorumValue
	// is then a share of the declared participants); QuorumValue 0 is no
	// quorum.
	QuorumPercentage bool
	QuorumValue      float64
	// Weights are voting.weights (the weighted algorithm only; a declared
	// participant missing from them weighs 0 under the newest rules).
	Weights map[string]float64
	// CriticalSeverityVetoes, VetoThreshold (1 by default) and
	// CriticalObjectionAction (deny by default; finalize_decline and hold
	// from schema_version 2) are objection_handling.
	CriticalSeverityVetoes  bool
	VetoThreshold           int
	CriticalObjectionAction string
	// RequireVoteQuorum and AllowDeclineOverApproval (schema_version 2 and
	// later) are the commitment section's.
	RequireVoteQuorum        bool
	AllowDeclineOverApproval bool
	// constrains is false when every knob the Commitment check reads is at
	// its permissive default: the policy then gates nothing.
	constrains bool
}

// ErrAprilDecisionRules is returned by [DecisionProjection.EligibleUnder]
// for a session the runtime judges by the April rules (profile 2026-04
// with a schema_version 1 policy), which the SDK does not model.
var ErrAprilDecisionRules = errors.New("sdk: a 2026-04 session bound to a schema_version 1 policy is judged by the April Decision rules, which the SDK does not model")

// ParseDecisionRules reads the Decision rules of a policy from its rules
// JSON and schema_version (a [*macpv1.PolicyDescriptor]'s Rules and
// SchemaVersion). It assumes a policy the runtime accepted at
// registration: it applies the schema's defaults and does not repeat the
// runtime's validation beyond what it needs to read the values.
func ParseDecisionRules(rulesJSON string, schemaVersion uint32) (*DecisionRules, error) {
	var raw struct {
		Voting *struct {
			Algorithm *string  `json:"algorithm"`
			Threshold *float64 `json:"threshold"`
			Quorum    *struct {
				Type  *string  `json:"type"`
				Value *float64 `json:"value"`
			} `json:"quorum"`
			Weights map[string]float64 `json:"weights"`
		} `json:"voting"`
		Objections *struct {
			CriticalSeverityVetoes  *bool    `json:"critical_severity_vetoes"`
			VetoThreshold           *float64 `json:"veto_threshold"`
			CriticalObjectionAction *string  `json:"critical_objection_action"`
		} `json:"objection_handling"`
		Evaluation *struct {
			RequiredBeforeVoting *bool `json:"required_before_voting"`
		} `json:"evaluation"`
		Commitment *struct {
			RequireVoteQuorum        *bool `json:"require_vote_quorum"`
			AllowDeclineOverApproval *bool `json:"allow_decline_over_approval"`
		} `json:"commitment"`
	}
	if rulesJSON == "" {
		rulesJSON = "{}"
	}
	if err := json.Unmarshal([]byte(rulesJSON), &raw); err != nil {
		return nil, fmt.Errorf("sdk: decision rules: %w", err)
	}
	v := int(max(schemaVersion, 1))
	r := &DecisionRules{SchemaVersion: v, Threshold: 0.5, VetoThreshold: 1, CriticalObjectionAction: "deny"}
	if vt := raw.Voting; vt != nil {
		if a := vt.Algorithm; a != nil && *a != "none" {
			r.Algorithm, r.constrains = *a, true
		}
		if vt.Threshold != nil {
			r.Threshold = *vt.Threshold
		} else if r.Algorithm == "supermajority" {
			r.Threshold = 2.0 / 3.0
		}
		if q := vt.Quorum; q != nil {
			r.QuorumPercentage = q.Type != nil && *q.Type == "percentage"
			if q.Value != nil {
				r.QuorumValue = *q.Value
				r.constrains = r.constrains || *q.Value > 0
			}
		}
		r.Weights = vt.Weights
	}
	if o := raw.Objections; o != nil {
		if o.VetoThreshold != nil {
			r.VetoThreshold = int(*o.VetoThreshold)
		}
		if o.CriticalSeverityVetoes != nil && *o.CriticalSeverityVetoes {
			r.CriticalSeverityVetoes, r.constrains = true, true
		}
		if v >= 2 && o.CriticalObjectionAction != nil {
			r.CriticalObjectionAction = *o.CriticalObjectionAction
		}
	}
	if e := raw.Evaluation; e != nil && e.RequiredBeforeVoting != nil && *e.RequiredBeforeVoting {
		r.constrains = true
	}
	if c := raw.Commitment; c != nil {
		if c.RequireVoteQuorum != nil && *c.RequireVoteQuorum {
			r.RequireVoteQuorum, r.constrains = true, true
		}
		if v >= 2 && c.AllowDeclineOverApproval != nil {
			r.AllowDeclineOverApproval = *c.AllowDeclineOverApproval
		}
	}
	return r, nil
}

// decisionTally is one proposal's tally under the newest rules.
type decisionTally struct {
	p                         *DecisionProposal
	voters, approveD, rejectD int
	approveW, rejectW         float64
	critical                  int // distinct declared participants with a critical objection
}

func (r *DecisionRules) weight(sender string) float64 {
	if r.Algorithm != "weighted" {
		return 1
	}
	return r.Weights[sender] // missing: 0 under the newest rules
}

func (p *DecisionProjection) tally(r *DecisionRules, pr *DecisionProposal) decisionTally {
	t := decisionTally{p: pr, voters: len(pr.Votes)}
	for _, v := range pr.Votes {
		w := r.weight(v.Sender)
		switch {
		case v.Vote == "APPROVE" && w > 0:
			t.approveD++
			t.approveW += w
		case v.Vote == "REJECT" && w > 0:
			t.rejectD++
			t.rejectW += w
		}
	}
	var seen []string
	for _, o := range p.Objections {
		if o.ProposalID == pr.ID && o.Severity == "critical" && p.IsParticipant(o.Sender) && !slices.Contains(seen, o.Sender) {
			seen = append(seen, o.Sender)
		}
	}
	t.critical = len(seen)
	return t
}

// EligibleUnder reports which Commitment outcomes the newest Decision
// rules (RFC-MACP-0007 §6.2, RFC-MACP-0012 §4.1; docs/spec-decisions.md
// "Newest Decision rules") allow now for a session bound to a policy with
// rules r: the base rules of [DecisionProjection.Eligible] and, on the
// subject proposal (most decisive approvals, by weight under weighted,
// ties to the earliest), the critical-objection veto and its action,
// require_vote_quorum, the algorithm's verdict (majority, supermajority and
// weighted inclusive of the threshold; unanimous over the declared
// participants; plurality strictly ahead of REJECT and of every other
// proposal), and the decline guard (a negative outcome needs a decisive
// REJECT). The runtime applies these rules to sessions of profile 2026-09
// and to every session bound to a schema_version 2 or 3 policy; for the
// others it returns [ErrAprilDecisionRules]. The Ack remains
// authoritative.
func (p *DecisionProjection) EligibleUnder(r *DecisionRules) (positive, negative bool, err error) {
	if r == nil {
		positive, negative = p.Eligible()
		return positive, negative, nil
	}
	if !p.Latest() && r.SchemaVersion < 2 {
		return false, false, ErrAprilDecisionRules
	}
	positive, negative = p.Eligible()
	if !positive && !negative || !r.constrains {
		return positive, negative, nil
	}
	return positive && r.allows(p, true), negative && r.allows(p, false), nil
}

// allows is the runtime's evaluateLatest for one polarity.
func (r *DecisionRules) allows(p *DecisionProjection, positive bool) bool {
	subject := p.tally(r, p.Proposals[0])
	for _, pr := range p.Proposals[1:] {
		if t := p.tally(r, pr); r.approvals(t) > r.approvals(subject) {
			subject = t
		}
	}
	ok := true
	if r.CriticalSeverityVetoes && subject.critical >= r.VetoThreshold {
		if r.CriticalObjectionAction == "finalize_decline" && !positive {
			return true // an objection-authorized decline needs nothing else
		}
		ok = false
	}
	participants := len(p.Participants)
	quorum := r.QuorumValue == 0 ||
		(r.QuorumPercentage && participants > 0 && float64(subject.voters)/float64(participants) >= r.QuorumValue) ||
		(!r.QuorumPercentage && float64(subject.voters) >= r.QuorumValue)
	if r.RequireVoteQuorum && !quorum {
		ok = false
	}
	if r.Algorithm == "" {
		return ok
	}
	guard := subject.rejectD > 0
	switch r.result(p, subject) {
	case resultPassed:
		if !positive {
			ok = ok && r.AllowDeclineOverApproval && guard
		}
	case resultFailed:
		if positive {
			ok = false
		} else {
			ok = ok && guard
		}
	default: // no decisive vote
		switch {
		case !positive:
			ok = false
		case r.SchemaVersion >= 3:
			ok = false
		case r.RequireVoteQuorum:
			ok = false
		}
	}
	return ok
}

func (r *DecisionRules) approvals(t decisionTally) float64 {
	if r.Algorithm == "weighted" {
		return t.approveW
	}
	return float64(t.approveD)
}

const (
	resultNoVotes = iota
	resultPassed
	resultFailed
)

func (r *DecisionRules) result(p *DecisionProjection, t decisionTally) int {
	cast := t.approveD + t.rejectD
	if cast == 0 || (r.Algorithm == "weighted" && !(t.approveW+t.rejectW > 0)) {
		return resultNoVotes
	}
	pass := false
	switch r.Algorithm {
	case "majority", "supermajority":
		pass = float64(t.approveD)/float64(cast) >= r.Threshold
	case "weighted":
		pass = t.approveW/(t.approveW+t.rejectW) >= r.Threshold
	case "unanimous":
		pass = len(p.Participants) > 0 && t.rejectD == 0 && t.approveD == len(p.Participants)
	case "plurality":
		pass = t.approveD > t.rejectD
		for _, q := range p.Proposals {
			if pass && q != t.p && p.tally(r, q).approveD >= t.approveD {
				pass = false
			}
		}
	}
	if pass {
		return resultPassed
	}
	return resultFailed
}
