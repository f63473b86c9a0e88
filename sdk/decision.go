package sdk

import (
	"cmp"
	"context"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
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

// DecisionSession is one Decision Mode session seen by one Client. Make it
// with Client.Decision; set the exported fields before Start to bind other
// versions or a context. Its methods are safe for concurrent use only if
// the fields are not changed meanwhile.
type DecisionSession struct {
	// ID is the session id.
	ID string
	// ModeVersion, ConfigurationVersion and PolicyVersion are bound by
	// Start (PolicyVersion "" means policy.default).
	ModeVersion          string
	ConfigurationVersion string
	PolicyVersion        string
	// ContextID is an opaque context reference bound by Start.
	ContextID string

	c       *Client
	started bool // Start succeeded, so the version fields are the binding
}

// Decision returns a DecisionSession for sessionID, or for a new session id
// if sessionID is empty. Participants of a session someone else started use
// the same id and skip Start.
func (c *Client) Decision(sessionID string) *DecisionSession {
	if sessionID == "" {
		sessionID = NewSessionID()
	}
	return &DecisionSession{ID: sessionID, ModeVersion: DecisionModeVersion, ConfigurationVersion: DefaultConfigurationVersion, c: c}
}

// Start sends the SessionStart: the caller becomes the initiator (the
// default Commitment authority). The initiator must be listed among
// participants to Evaluate, Object or Vote.
func (d *DecisionSession) Start(ctx context.Context, intent string, participants []string, ttl time.Duration) (*macpv1.Ack, error) {
	env, err := NewSessionStart(d.ID, DecisionMode, StartPayload{
		Intent:               intent,
		Participants:         participants,
		TTL:                  ttl,
		ModeVersion:          d.ModeVersion,
		ConfigurationVersion: d.ConfigurationVersion,
		PolicyVersion:        d.PolicyVersion,
		ContextID:            d.ContextID,
	})
	if err != nil {
		return nil, err
	}
	ack, err := d.c.Send(ctx, env)
	if err == nil {
		d.started = true
	}
	return ack, err
}

func (d *DecisionSession) send(ctx context.Context, typ string, payload proto.Message) (*macpv1.Ack, error) {
	env, err := NewEnvelope(d.ID, DecisionMode, typ, payload)
	if err != nil {
		return nil, err
	}
	return d.c.Send(ctx, env)
}

// Propose submits option under proposalID (unique within the session).
func (d *DecisionSession) Propose(ctx context.Context, proposalID, option, rationale string) (*macpv1.Ack, error) {
	return d.send(ctx, TypeProposal, &decisionv1.ProposalPayload{ProposalId: proposalID, Option: option, Rationale: rationale})
}

// Evaluate records an analysis of a proposal; recommendation is APPROVE,
// REVIEW, BLOCK or REJECT and confidence is in [0, 1].
func (d *DecisionSession) Evaluate(ctx context.Context, proposalID, recommendation string, confidence float64, reason string) (*macpv1.Ack, error) {
	return d.send(ctx, TypeEvaluation, &decisionv1.EvaluationPayload{ProposalId: proposalID, Recommendation: recommendation, Confidence: confidence, Reason: reason})
}

// Object raises an objection against a proposal; severity is low, medium,
// high or critical ("" means medium).
func (d *DecisionSession) Object(ctx context.Context, proposalID, severity, reason string) (*macpv1.Ack, error) {
	return d.send(ctx, TypeObjection, &decisionv1.ObjectionPayload{ProposalId: proposalID, Severity: severity, Reason: reason})
}

// Vote casts the caller's one vote on a proposal: APPROVE, REJECT or
// ABSTAIN.
func (d *DecisionSession) Vote(ctx context.Context, proposalID, vote, reason string) (*macpv1.Ack, error) {
	return d.send(ctx, TypeVote, &decisionv1.VotePayload{ProposalId: proposalID, Vote: vote, Reason: reason})
}

// Commit sends the terminal Commitment. c needs action, authority_scope,
// reason and outcome_positive; an empty commitment_id gets a new id and
// empty mode_version, configuration_version and policy_version get the
// session's binding (from Start, or else from GetSession). c is not
// modified.
func (d *DecisionSession) Commit(ctx context.Context, c *macpv1.CommitmentPayload) (*macpv1.Ack, error) {
	if c == nil {
		c = &macpv1.CommitmentPayload{}
	} else {
		c = proto.CloneOf(c)
	}
	if c.CommitmentId == "" {
		c.CommitmentId = NewMessageID()
	}
	if c.ModeVersion == "" || c.ConfigurationVersion == "" || c.PolicyVersion == "" {
		mv, cv, pv := d.ModeVersion, d.ConfigurationVersion, d.PolicyVersion
		if !d.started {
			md, err := d.Metadata(ctx)
			if err != nil {
				return nil, err
			}
			mv, cv, pv = md.GetModeVersion(), md.GetConfigurationVersion(), md.GetPolicyVersion()
		}
		c.ModeVersion = cmp.Or(c.ModeVersion, mv)
		c.ConfigurationVersion = cmp.Or(c.ConfigurationVersion, cv)
		c.PolicyVersion = cmp.Or(c.PolicyVersion, pv)
	}
	env, err := NewCommitment(d.ID, DecisionMode, c)
	if err != nil {
		return nil, err
	}
	return d.c.Send(ctx, env)
}

// Cancel ends the session as EXPIRED (initiator only).
func (d *DecisionSession) Cancel(ctx context.Context, reason string) (*macpv1.Ack, error) {
	return d.c.CancelSession(ctx, d.ID, reason)
}

// Metadata returns the session's metadata.
func (d *DecisionSession) Metadata(ctx context.Context) (*macpv1.SessionMetadata, error) {
	return d.c.GetSession(ctx, d.ID)
}
