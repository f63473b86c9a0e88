package sdk

import (
	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Proposal Mode phases as projected (RFC-MACP-0008).
const (
	PhaseNegotiating      = "Negotiating"
	PhaseConverged        = "Converged"
	PhaseTerminalRejected = "TerminalRejected"
)

// ProposalProjection is the state of a Proposal Mode session: the
// proposals, each participant's latest Accept and the rejections.
type ProposalProjection struct {
	SessionView
	// Proposals in acceptance order (counter-proposals included).
	Proposals []*ProposalRecord
	// Accepts maps a participant to the proposal its latest Accept
	// targets, while that proposal is live and not since rejected by it.
	Accepts    map[string]string
	Rejections []ProposalRejection
}

// ProposalRecord is one proposal or counter-proposal.
type ProposalRecord struct {
	ID, Proposer string
	// Supersedes is set for a counter-proposal.
	Supersedes     string
	Counter        bool
	Title, Summary string
	Tags           []string
	Withdrawn      bool
}

// ProposalRejection is one Reject.
type ProposalRejection struct {
	ProposalID, Sender, Reason string
	Terminal                   bool
}

// NewProposalProjection returns an empty projection.
func NewProposalProjection() *ProposalProjection {
	return &ProposalProjection{Accepts: map[string]string{}}
}

// Apply folds one accepted envelope.
func (p *ProposalProjection) Apply(env *macpv1.Envelope) error {
	if p.Accepts == nil {
		p.Accepts = map[string]string{}
	}
	done, err := p.begin(ProposalMode, env)
	if err != nil || done {
		return err
	}
	switch env.MessageType {
	case TypeProposal:
		var m proposalv1.ProposalPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Proposals = append(p.Proposals, &ProposalRecord{ID: m.ProposalId, Proposer: env.Sender, Title: m.Title, Summary: m.Summary, Tags: m.Tags})
	case TypeCounterProposal:
		var m proposalv1.CounterProposalPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Proposals = append(p.Proposals, &ProposalRecord{ID: m.ProposalId, Proposer: env.Sender, Supersedes: m.SupersedesProposalId, Counter: true, Title: m.Title, Summary: m.Summary})
	case TypeAccept:
		var m proposalv1.AcceptPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Accepts[env.Sender] = m.ProposalId
	case TypeReject:
		var m proposalv1.RejectPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Rejections = append(p.Rejections, ProposalRejection{ProposalID: m.ProposalId, Sender: env.Sender, Reason: m.Reason, Terminal: m.Terminal})
		if p.Accepts[env.Sender] == m.ProposalId {
			delete(p.Accepts, env.Sender)
		}
	case TypeWithdraw:
		var m proposalv1.WithdrawPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		if r := p.Proposal(m.ProposalId); r != nil {
			r.Withdrawn = true
		}
		for who, id := range p.Accepts {
			if id == m.ProposalId {
				delete(p.Accepts, who)
			}
		}
	default:
		return unknownType(env)
	}
	p.Messages++
	return nil
}

// Proposal returns the proposal with id, nil if none.
func (p *ProposalProjection) Proposal(id string) *ProposalRecord {
	for _, r := range p.Proposals {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// AcceptedBy returns the participants whose latest Accept targets id, in
// declared-participant order.
func (p *ProposalProjection) AcceptedBy(id string) []string {
	var out []string
	for _, who := range p.Participants {
		if a, ok := p.Accepts[who]; ok && a == id {
			out = append(out, who)
		}
	}
	return out
}

// Converged returns the live proposals every declared participant
// accepts (the base acceptance criterion, all_parties), in acceptance
// order.
func (p *ProposalProjection) Converged() []string {
	var out []string
	for _, r := range p.Proposals {
		if !r.Withdrawn && len(p.Participants) > 0 && len(p.AcceptedBy(r.ID)) == len(p.Participants) {
			out = append(out, r.ID)
		}
	}
	return out
}

// TerminalRejected reports whether a terminal Reject was accepted.
func (p *ProposalProjection) TerminalRejected() bool {
	for _, r := range p.Rejections {
		if r.Terminal {
			return true
		}
	}
	return false
}

// Phase is Negotiating, Converged, TerminalRejected or Committed.
func (p *ProposalProjection) Phase() string {
	switch {
	case p.Resolved():
		return PhaseCommitted
	case p.TerminalRejected():
		return PhaseTerminalRejected
	case len(p.Converged()) > 0:
		return PhaseConverged
	}
	return PhaseNegotiating
}

// Eligible reports which Commitment outcomes the base rules allow now:
// positive once a live proposal converged, negative after a terminal
// Reject (RFC-MACP-0008 §5.6).
func (p *ProposalProjection) Eligible() (positive, negative bool) {
	if !p.Accepting() {
		return false, false
	}
	return len(p.Converged()) > 0, p.TerminalRejected()
}
