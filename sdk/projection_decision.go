package sdk

import (
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Decision phases as projected (RFC-MACP-0007; checklist DEC-10).
const (
	PhaseProposal   = "Proposal"
	PhaseEvaluation = "Evaluation"
	PhaseVoting     = "Voting"
	PhaseCommitted  = "Committed"
)

// DecisionProjection is the state of a Decision Mode session: proposals,
// evaluations, objections and each participant's vote per proposal.
type DecisionProjection struct {
	SessionView
	// Proposals in acceptance order.
	Proposals   []*DecisionProposal
	Evaluations []DecisionEvaluation
	Objections  []DecisionObjection
}

// DecisionProposal is one proposal and its votes.
type DecisionProposal struct {
	ID, Option, Rationale, Sender string
	// Votes in acceptance order, one per voter.
	Votes []DecisionVote
}

// DecisionVote is one participant's vote on a proposal.
type DecisionVote struct{ Sender, Vote, Reason string }

// DecisionEvaluation is one Evaluation.
type DecisionEvaluation struct {
	ProposalID, Recommendation, Reason, Sender string
	Confidence                                 float64
}

// DecisionObjection is one Objection; an empty severity is recorded as
// "medium", as the runtime does.
type DecisionObjection struct{ ProposalID, Reason, Severity, Sender string }

// NewDecisionProjection returns an empty projection.
func NewDecisionProjection() *DecisionProjection { return &DecisionProjection{} }

// Apply folds one accepted envelope.
func (p *DecisionProjection) Apply(env *macpv1.Envelope) error {
	done, err := p.begin(DecisionMode, env)
	if err != nil || done {
		return err
	}
	switch env.MessageType {
	case TypeProposal:
		var m decisionv1.ProposalPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Proposals = append(p.Proposals, &DecisionProposal{ID: m.ProposalId, Option: m.Option, Rationale: m.Rationale, Sender: env.Sender})
	case TypeEvaluation:
		var m decisionv1.EvaluationPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Evaluations = append(p.Evaluations, DecisionEvaluation{ProposalID: m.ProposalId, Recommendation: m.Recommendation, Reason: m.Reason, Sender: env.Sender, Confidence: m.Confidence})
	case TypeObjection:
		var m decisionv1.ObjectionPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		if m.Severity == "" {
			m.Severity = "medium"
		}
		p.Objections = append(p.Objections, DecisionObjection{ProposalID: m.ProposalId, Reason: m.Reason, Severity: m.Severity, Sender: env.Sender})
	case TypeVote:
		var m decisionv1.VotePayload
		if err := decode(env, &m); err != nil {
			return err
		}
		if pr := p.Proposal(m.ProposalId); pr != nil {
			pr.Votes = append(pr.Votes, DecisionVote{Sender: env.Sender, Vote: m.Vote, Reason: m.Reason})
		}
	default:
		return unknownType(env)
	}
	p.Messages++
	return nil
}

// Phase is Proposal (none yet), Evaluation (after the first proposal),
// Voting (after the first vote; proposals, evaluations and objections are
// closed) or Committed.
func (p *DecisionProjection) Phase() string {
	switch {
	case p.Resolved():
		return PhaseCommitted
	case p.voted():
		return PhaseVoting
	case len(p.Proposals) > 0:
		return PhaseEvaluation
	}
	return PhaseProposal
}

func (p *DecisionProjection) voted() bool {
	for _, pr := range p.Proposals {
		if len(pr.Votes) > 0 {
			return true
		}
	}
	return false
}

// Proposal returns the proposal with id, nil if none.
func (p *DecisionProjection) Proposal(id string) *DecisionProposal {
	for _, pr := range p.Proposals {
		if pr.ID == id {
			return pr
		}
	}
	return nil
}

// VoteOf returns sender's vote on a proposal ("" if none).
func (p *DecisionProposal) VoteOf(sender string) string {
	for _, v := range p.Votes {
		if v.Sender == sender {
			return v.Vote
		}
	}
	return ""
}

// Tally counts the APPROVE, REJECT and ABSTAIN votes on the proposal.
func (p *DecisionProposal) Tally() (approve, reject, abstain int) {
	for _, v := range p.Votes {
		switch v.Vote {
		case "APPROVE":
			approve++
		case "REJECT":
			reject++
		case "ABSTAIN":
			abstain++
		}
	}
	return
}

// Leading returns the proposal with the most APPROVE votes, ties going to
// the earliest (the proposal macpd judges a positive Commitment on); nil
// before the first proposal.
func (p *DecisionProjection) Leading() *DecisionProposal {
	var best *DecisionProposal
	bestN := -1
	for _, pr := range p.Proposals {
		if n, _, _ := pr.Tally(); n > bestN {
			best, bestN = pr, n
		}
	}
	return best
}

// Eligible reports which Commitment outcomes the mode's base rules allow
// now: both once a proposal exists (RFC-MACP-0007 §5.5), neither while
// the session is SUSPENDED or after it ended.
func (p *DecisionProjection) Eligible() (positive, negative bool) {
	ok := p.Accepting() && len(p.Proposals) > 0
	return ok, ok
}

// CanPropose reports whether sender may submit a Proposal now: while the
// session accepts messages and before voting started, a declared
// participant may; so may the initiator who is not one under profile
// 2026-04 (macpd's reading of RFC-MACP-0007, decision C3), but not under
// 2026-09, where only declared participants propose (§2.1).
func (p *DecisionProjection) CanPropose(sender string) bool {
	if !p.Accepting() || p.voted() {
		return false
	}
	return p.IsParticipant(sender) || (sender == p.Initiator && !p.Latest())
}
