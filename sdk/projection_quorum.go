package sdk

import (
	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Quorum phases as projected (RFC-MACP-0011); Pending and Committed are
// shared with the other modes.
const PhaseQuorumVoting = "Voting"

// QuorumProjection is the state of a Quorum Mode session: the approval
// request and each declared participant's ballot.
type QuorumProjection struct {
	SessionView
	// Request is the session's ApprovalRequest (nil before it); its
	// sender is the Initiator.
	Request *quorumv1.ApprovalRequestPayload
	// Ballots in acceptance order, at most one per participant.
	Ballots []QuorumBallot
}

// QuorumBallot is one participant's ballot: Choice is Approve, Reject or
// Abstain (the message type).
type QuorumBallot struct{ Sender, Choice, Reason string }

// NewQuorumProjection returns an empty projection.
func NewQuorumProjection() *QuorumProjection { return &QuorumProjection{} }

// Apply folds one accepted envelope.
func (p *QuorumProjection) Apply(env *macpv1.Envelope) error {
	done, err := p.begin(QuorumMode, env)
	if err != nil || done {
		return err
	}
	var reason string
	switch env.MessageType {
	case TypeApprovalRequest:
		var m quorumv1.ApprovalRequestPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Request = &m
		p.Messages++
		return nil
	case TypeApprove:
		var m quorumv1.ApprovePayload
		if err := decode(env, &m); err != nil {
			return err
		}
		reason = m.Reason
	case TypeReject:
		var m quorumv1.RejectPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		reason = m.Reason
	case TypeAbstain:
		var m quorumv1.AbstainPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		reason = m.Reason
	default:
		return unknownType(env)
	}
	p.Ballots = append(p.Ballots, QuorumBallot{Sender: env.Sender, Choice: env.MessageType, Reason: reason})
	p.Messages++
	return nil
}

// BallotOf returns sender's choice ("" if it has not voted).
func (p *QuorumProjection) BallotOf(sender string) string {
	for _, b := range p.Ballots {
		if b.Sender == sender {
			return b.Choice
		}
	}
	return ""
}

// Counts returns the approvals, rejections and abstentions so far.
func (p *QuorumProjection) Counts() (approvals, rejections, abstentions int) {
	for _, b := range p.Ballots {
		switch b.Choice {
		case TypeApprove:
			approvals++
		case TypeReject:
			rejections++
		case TypeAbstain:
			abstentions++
		}
	}
	return
}

// Remaining is the number of declared participants yet to vote.
func (p *QuorumProjection) Remaining() int { return len(p.Participants) - len(p.Ballots) }

// Threshold is the approvals required (the request's required_approvals;
// 0 before the request). A bound policy's threshold may replace it.
func (p *QuorumProjection) Threshold() int {
	if p.Request == nil {
		return 0
	}
	return int(p.Request.RequiredApprovals)
}

// Phase is Pending, Voting or Committed.
func (p *QuorumProjection) Phase() string {
	switch {
	case p.Resolved():
		return PhaseCommitted
	case p.Request != nil:
		return PhaseQuorumVoting
	}
	return PhasePending
}

// Eligible reports which Commitment outcomes the base rules allow now
// (RFC-MACP-0011 §5 rule 4): positive once approvals reach the threshold,
// negative once approvals plus the participants yet to vote cannot.
func (p *QuorumProjection) Eligible() (positive, negative bool) {
	if !p.Accepting() || p.Request == nil {
		return false, false
	}
	a, _, _ := p.Counts()
	return a >= p.Threshold(), a+p.Remaining() < p.Threshold()
}
