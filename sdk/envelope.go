package sdk

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
)

// Core message types (RFC-MACP-0001).
const (
	TypeSessionStart = "SessionStart"
	TypeCommitment   = "Commitment"
	TypeSignal       = "Signal"
	TypeProgress     = "Progress"
	// TypeSessionCancel is the runtime-emitted record of a CancelSession.
	TypeSessionCancel = "SessionCancel"
	// TypeSessionSuspend and TypeSessionResume are the runtime-emitted
	// records of SuspendSession and ResumeSession.
	TypeSessionSuspend = "SessionSuspend"
	TypeSessionResume  = "SessionResume"
)

// NewSessionID returns a new session id: a lowercase UUID v4, which is
// unguessable as RFC-MACP-0004 asks.
func NewSessionID() string { return uuid.NewString() }

// NewMessageID returns a new message id (a lowercase UUID v4).
func NewMessageID() string { return uuid.NewString() }

// NewEnvelope returns an envelope of the given type carrying payload
// (marshalled deterministically; nil means an empty payload), with
// macp_version 1.0, a new message_id and the current timestamp. The sender
// is left empty: the runtime binds it to the caller's identity. sessionID
// and mode are empty for ambient messages (Signal).
func NewEnvelope(sessionID, mode, messageType string, payload proto.Message) (*macpv1.Envelope, error) {
	var b []byte
	if payload != nil {
		var err error
		if b, err = (proto.MarshalOptions{Deterministic: true}).Marshal(payload); err != nil {
			return nil, fmt.Errorf("sdk: encoding %s payload: %w", messageType, err)
		}
	}
	return &macpv1.Envelope{
		MacpVersion:     ProtocolVersion,
		Mode:            mode,
		MessageType:     messageType,
		MessageId:       NewMessageID(),
		SessionId:       sessionID,
		TimestampUnixMs: time.Now().UnixMilli(),
		Payload:         b,
	}, nil
}

// StartPayload is what a SessionStart binds (RFC-MACP-0001 §7.1).
type StartPayload struct {
	Intent       string
	Participants []string
	// TTL is the session's time to live; it travels as ttl_ms, rounded up
	// to a whole millisecond.
	TTL                  time.Duration
	ModeVersion          string
	ConfigurationVersion string
	// PolicyVersion may be empty: the runtime resolves it to policy.default.
	PolicyVersion string
	ContextID     string
	Roots         []*macpv1.Root
	Extensions    map[string][]byte
}

// Proto returns the SessionStartPayload message.
func (p StartPayload) Proto() *macpv1.SessionStartPayload {
	return &macpv1.SessionStartPayload{
		Intent:               p.Intent,
		Participants:         p.Participants,
		ModeVersion:          p.ModeVersion,
		ConfigurationVersion: p.ConfigurationVersion,
		PolicyVersion:        p.PolicyVersion,
		TtlMs:                (p.TTL + time.Millisecond - 1).Milliseconds(),
		Roots:                p.Roots,
		ContextId:            p.ContextID,
		Extensions:           p.Extensions,
	}
}

// NewSessionStart returns the SessionStart envelope creating session
// sessionID in mode.
func NewSessionStart(sessionID, mode string, p StartPayload) (*macpv1.Envelope, error) {
	return NewEnvelope(sessionID, mode, TypeSessionStart, p.Proto())
}

// NewCommitment returns a Commitment envelope, the terminal message of most
// modes. The payload's mode_version and configuration_version must match the
// session's binding.
func NewCommitment(sessionID, mode string, c *macpv1.CommitmentPayload) (*macpv1.Envelope, error) {
	return NewEnvelope(sessionID, mode, TypeCommitment, c)
}

// NewSignal returns an ambient Signal envelope (no session, no mode).
func NewSignal(s *macpv1.SignalPayload) (*macpv1.Envelope, error) {
	return NewEnvelope("", "", TypeSignal, s)
}

// NewProposal returns a Decision Mode Proposal envelope.
func NewProposal(sessionID string, p *decisionv1.ProposalPayload) (*macpv1.Envelope, error) {
	return NewEnvelope(sessionID, DecisionMode, TypeProposal, p)
}

// NewEvaluation returns a Decision Mode Evaluation envelope.
func NewEvaluation(sessionID string, p *decisionv1.EvaluationPayload) (*macpv1.Envelope, error) {
	return NewEnvelope(sessionID, DecisionMode, TypeEvaluation, p)
}

// NewObjection returns a Decision Mode Objection envelope.
func NewObjection(sessionID string, p *decisionv1.ObjectionPayload) (*macpv1.Envelope, error) {
	return NewEnvelope(sessionID, DecisionMode, TypeObjection, p)
}

// NewVote returns a Decision Mode Vote envelope.
func NewVote(sessionID string, p *decisionv1.VotePayload) (*macpv1.Envelope, error) {
	return NewEnvelope(sessionID, DecisionMode, TypeVote, p)
}
