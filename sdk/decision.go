package sdk

import (
	"context"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Decision Mode (RFC-MACP-0007) identifiers and message types.
const (
	DecisionMode        = "macp.mode.decision.v1"
	DecisionModeVersion = "1.0.0"

	TypeProposal   = "Proposal"
	TypeEvaluation = "Evaluation"
	TypeObjection  = "Objection"
	TypeVote       = "Vote"
)

// DefaultConfigurationVersion is the configuration_version a
// DecisionSession binds unless told otherwise; the runtime treats it as
// opaque.
const DefaultConfigurationVersion = "v1"

// DecisionSession is one Decision Mode session (RFC-MACP-0007) seen by one
// Client: a [Session] with the mode's messages. Make it with
// Client.Decision.
type DecisionSession struct{ *Session }

// Decision returns a DecisionSession for sessionID, or for a new session id
// if sessionID is empty. Participants of a session someone else started use
// the same id and skip Start. The initiator must be listed among
// participants to Evaluate, Object or Vote.
func (c *Client) Decision(sessionID string) *DecisionSession {
	return &DecisionSession{c.Session(DecisionMode, DecisionModeVersion, sessionID)}
}

// Propose submits option under proposalID (unique within the session).
func (d *DecisionSession) Propose(ctx context.Context, proposalID, option, rationale string) (*macpv1.Ack, error) {
	return d.Send(ctx, TypeProposal, &decisionv1.ProposalPayload{ProposalId: proposalID, Option: option, Rationale: rationale})
}

// Evaluate records an analysis of a proposal; recommendation is APPROVE,
// REVIEW, BLOCK or REJECT and confidence is in [0, 1].
func (d *DecisionSession) Evaluate(ctx context.Context, proposalID, recommendation string, confidence float64, reason string) (*macpv1.Ack, error) {
	return d.Send(ctx, TypeEvaluation, &decisionv1.EvaluationPayload{ProposalId: proposalID, Recommendation: recommendation, Confidence: confidence, Reason: reason})
}

// Object raises an objection against a proposal; severity is low, medium,
// high or critical ("" means medium).
func (d *DecisionSession) Object(ctx context.Context, proposalID, severity, reason string) (*macpv1.Ack, error) {
	return d.Send(ctx, TypeObjection, &decisionv1.ObjectionPayload{ProposalId: proposalID, Severity: severity, Reason: reason})
}

// Vote casts the caller's one vote on a proposal: APPROVE, REJECT or
// ABSTAIN.
func (d *DecisionSession) Vote(ctx context.Context, proposalID, vote, reason string) (*macpv1.Ack, error) {
	return d.Send(ctx, TypeVote, &decisionv1.VotePayload{ProposalId: proposalID, Vote: vote, Reason: reason})
}
