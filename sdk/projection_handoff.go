package sdk

import (
	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Handoff Mode phases and offer dispositions as projected (RFC-MACP-0010).
const (
	PhaseIdle         = "Idle"
	PhaseOfferPending = "OfferPending"
	PhaseDeclined     = "Declined"
	PhaseAccepted     = "Accepted"

	OfferPending  = "Pending"
	OfferAccepted = "Accepted"
	OfferDeclined = "Declined"
)

// HandoffProjection is the state of a Handoff Mode session.
type HandoffProjection struct {
	SessionView
	// Owner holds the responsibility: the initiator, or the accepted
	// target once a positive Commitment bound the transfer.
	Owner string
	// Offers in acceptance order.
	Offers   []*HandoffOffer
	Contexts []HandoffContext
}

// HandoffOffer is one offer and its answer.
type HandoffOffer struct {
	ID, Target, Scope, Reason, OfferedBy string
	// Disposition is Pending, Accepted or Declined.
	Disposition                 string
	RespondedBy, ResponseReason string
	// Contexts counts the HandoffContext messages attached to it.
	Contexts int
}

// HandoffContext is one HandoffContext message; Late marks context sent
// after the offer was answered (only runtimes that accept late context).
type HandoffContext struct {
	HandoffID, ContentType, Sender string
	Context                        []byte
	Late                           bool
}

// NewHandoffProjection returns an empty projection.
func NewHandoffProjection() *HandoffProjection { return &HandoffProjection{} }

// Apply folds one accepted envelope.
func (p *HandoffProjection) Apply(env *macpv1.Envelope) error {
	first := p.Messages == 0
	done, err := p.begin(HandoffMode, env)
	if err != nil {
		return err
	}
	if done {
		if first {
			p.Owner = p.Initiator
		}
		if p.Resolved() && p.Commitment.OutcomePositive {
			if o := p.AcceptedOffer(); o != nil {
				p.Owner = o.Target
			}
		}
		return nil
	}
	switch env.MessageType {
	case TypeHandoffOffer:
		var m handoffv1.HandoffOfferPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Offers = append(p.Offers, &HandoffOffer{ID: m.HandoffId, Target: m.TargetParticipant, Scope: m.Scope, Reason: m.Reason, OfferedBy: env.Sender, Disposition: OfferPending})
	case TypeHandoffContext:
		var m handoffv1.HandoffContextPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		late := false
		if o := p.Offer(m.HandoffId); o != nil {
			o.Contexts++
			late = o.Disposition != OfferPending
		}
		p.Contexts = append(p.Contexts, HandoffContext{HandoffID: m.HandoffId, ContentType: m.ContentType, Sender: env.Sender, Context: m.Context, Late: late})
	case TypeHandoffAccept, TypeHandoffDecline:
		var id, reason string
		if env.MessageType == TypeHandoffAccept {
			var m handoffv1.HandoffAcceptPayload
			if err := decode(env, &m); err != nil {
				return err
			}
			id, reason = m.HandoffId, m.Reason
		} else {
			var m handoffv1.HandoffDeclinePayload
			if err := decode(env, &m); err != nil {
				return err
			}
			id, reason = m.HandoffId, m.Reason
		}
		if o := p.Offer(id); o != nil {
			o.Disposition = OfferDeclined
			if env.MessageType == TypeHandoffAccept {
				o.Disposition = OfferAccepted
			}
			o.RespondedBy, o.ResponseReason = env.Sender, reason
		}
	default:
		return unknownType(env)
	}
	p.Messages++
	return nil
}

// Offer returns the offer with id, nil if none.
func (p *HandoffProjection) Offer(id string) *HandoffOffer {
	for _, o := range p.Offers {
		if o.ID == id {
			return o
		}
	}
	return nil
}

func (p *HandoffProjection) withDisposition(d string) *HandoffOffer {
	for _, o := range p.Offers {
		if o.Disposition == d {
			return o
		}
	}
	return nil
}

// PendingOffer returns the offer awaiting an answer, nil if none.
func (p *HandoffProjection) PendingOffer() *HandoffOffer { return p.withDisposition(OfferPending) }

// AcceptedOffer returns the accepted offer, nil if none.
func (p *HandoffProjection) AcceptedOffer() *HandoffOffer { return p.withDisposition(OfferAccepted) }

// Phase is Idle, OfferPending, Declined, Accepted or Committed.
func (p *HandoffProjection) Phase() string {
	switch {
	case p.Resolved():
		return PhaseCommitted
	case p.AcceptedOffer() != nil:
		return PhaseAccepted
	case p.PendingOffer() != nil:
		return PhaseOfferPending
	case len(p.Offers) > 0:
		return PhaseDeclined
	}
	return PhaseIdle
}

// Eligible reports which Commitment outcomes the mode allows now
// (RFC-MACP-0010 §6): positive once an offer was accepted, negative when
// the latest offer was declined.
func (p *HandoffProjection) Eligible() (positive, negative bool) {
	if !p.Accepting() {
		return false, false
	}
	ph := p.Phase()
	return ph == PhaseAccepted, ph == PhaseDeclined
}
