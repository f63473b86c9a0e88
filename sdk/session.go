package sdk

import (
	"cmp"
	"context"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
)

// Session is one session of any mode seen by one Client: the part every
// mode helper ([DecisionSession], [ProposalSession], [TaskSession],
// [HandoffSession], [QuorumSession], [MultiRoundSession]) shares. Use it
// directly for extension modes. Set the exported fields before Start to
// bind other versions or a context. Its methods are safe for concurrent
// use only if the fields are not changed meanwhile.
type Session struct {
	// ID is the session id.
	ID string
	// Mode is the mode id (macp.mode.decision.v1, ...).
	Mode string
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

// Session returns a Session of mode for sessionID, or for a new session
// id if sessionID is empty, binding modeVersion and
// DefaultConfigurationVersion.
func (c *Client) Session(mode, modeVersion, sessionID string) *Session {
	if sessionID == "" {
		sessionID = NewSessionID()
	}
	return &Session{ID: sessionID, Mode: mode, ModeVersion: modeVersion, ConfigurationVersion: DefaultConfigurationVersion, c: c}
}

// Client returns the Client the session sends with.
func (s *Session) Client() *Client { return s.c }

// Start sends the SessionStart: the caller becomes the initiator (the
// default Commitment authority). ttl is the session's time to live.
func (s *Session) Start(ctx context.Context, intent string, participants []string, ttl time.Duration) (*macpv1.Ack, error) {
	return s.StartWith(ctx, StartPayload{Intent: intent, Participants: participants, TTL: ttl})
}

// StartWith is Start with every SessionStart field; empty version fields
// and ContextID are taken from the Session, and the Session's fields are
// updated to the bound values on success.
func (s *Session) StartWith(ctx context.Context, p StartPayload) (*macpv1.Ack, error) {
	p.ModeVersion = cmp.Or(p.ModeVersion, s.ModeVersion)
	p.ConfigurationVersion = cmp.Or(p.ConfigurationVersion, s.ConfigurationVersion)
	p.PolicyVersion = cmp.Or(p.PolicyVersion, s.PolicyVersion)
	p.ContextID = cmp.Or(p.ContextID, s.ContextID)
	env, err := NewSessionStart(s.ID, s.Mode, p)
	if err != nil {
		return nil, err
	}
	ack, err := s.c.Send(ctx, env)
	if err == nil {
		s.ModeVersion, s.ConfigurationVersion, s.PolicyVersion, s.ContextID = p.ModeVersion, p.ConfigurationVersion, p.PolicyVersion, p.ContextID
		s.started = true
	}
	return ack, err
}

// Send sends one mode message of type typ with payload (a mode payload
// message; nil for an empty payload).
func (s *Session) Send(ctx context.Context, typ string, payload proto.Message) (*macpv1.Ack, error) {
	env, err := NewEnvelope(s.ID, s.Mode, typ, payload)
	if err != nil {
		return nil, err
	}
	return s.c.Send(ctx, env)
}

// SendRaw sends one mode message whose payload is already encoded (for
// modes with non-protobuf payloads, such as ext.multi_round.v1's JSON).
func (s *Session) SendRaw(ctx context.Context, typ string, payload []byte) (*macpv1.Ack, error) {
	env, err := NewEnvelope(s.ID, s.Mode, typ, nil)
	if err != nil {
		return nil, err
	}
	env.Payload = payload
	return s.c.Send(ctx, env)
}

// Commit sends the terminal Commitment. c needs action, authority_scope,
// reason and outcome_positive; an empty commitment_id gets a new id and
// empty mode_version, configuration_version and policy_version get the
// session's binding (from Start, or else from GetSession). opts then
// adjust it ([Supersedes], ...). c is not modified.
func (s *Session) Commit(ctx context.Context, c *macpv1.CommitmentPayload, opts ...CommitOption) (*macpv1.Ack, error) {
	if c == nil {
		c = &macpv1.CommitmentPayload{}
	} else {
		c = proto.CloneOf(c)
	}
	for _, o := range opts {
		if err := o(ctx, c); err != nil {
			return nil, err
		}
	}
	if c.CommitmentId == "" {
		c.CommitmentId = NewMessageID()
	}
	if c.ModeVersion == "" || c.ConfigurationVersion == "" || c.PolicyVersion == "" {
		mv, cv, pv := s.ModeVersion, s.ConfigurationVersion, s.PolicyVersion
		if !s.started {
			md, err := s.Metadata(ctx)
			if err != nil {
				return nil, err
			}
			mv, cv, pv = md.GetModeVersion(), md.GetConfigurationVersion(), md.GetPolicyVersion()
		}
		c.ModeVersion = cmp.Or(c.ModeVersion, mv)
		c.ConfigurationVersion = cmp.Or(c.ConfigurationVersion, cv)
		c.PolicyVersion = cmp.Or(c.PolicyVersion, pv)
	}
	env, err := NewCommitment(s.ID, s.Mode, c)
	if err != nil {
		return nil, err
	}
	return s.c.Send(ctx, env)
}

// CommitOutcome commits with the given action and outcome, authority scope
// "session" and reason; opts as for Commit.
func (s *Session) CommitOutcome(ctx context.Context, action string, positive bool, reason string, opts ...CommitOption) (*macpv1.Ack, error) {
	return s.Commit(ctx, &macpv1.CommitmentPayload{Action: action, AuthorityScope: "session", Reason: reason, OutcomePositive: positive}, opts...)
}

// Cancel ends an OPEN or SUSPENDED session (initiator only): CANCELLED
// under profile 2026-09 (latest), EXPIRED under 2026-04. The Ack's
// session_state is the state reached.
func (s *Session) Cancel(ctx context.Context, reason string) (*macpv1.Ack, error) {
	return s.c.CancelSession(ctx, s.ID, reason)
}

// Metadata returns the session's metadata.
func (s *Session) Metadata(ctx context.Context) (*macpv1.SessionMetadata, error) {
	return s.c.GetSession(ctx, s.ID)
}

// Subscribe follows the session's accepted history after sequence number
// after (see [Client.Subscribe]).
func (s *Session) Subscribe(ctx context.Context, after uint64, opts ...SubscribeOption) *Subscription {
	return s.c.Subscribe(ctx, s.ID, after, opts...)
}
