package sdk

import (
	"errors"
	"fmt"
	"slices"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
)

// A Projection folds a session's accepted envelopes, in history order,
// into the session's current state (RFC-MACP-0003: the accepted history
// determines the state). Feed it the envelopes of a [Subscription] (live
// or replayed from sequence 0) or of any stored history; the first must be
// the SessionStart.
//
// Projections are pure: no I/O, no clock. They trust their input to be an
// accepted history — they do not re-validate it, so a rejected envelope
// fed to one gives a wrong state — and return an error only for an
// envelope they cannot decode or that does not fit the fold (another
// session or mode, no SessionStart first, a message after the
// Commitment). Derived predictions (Eligible, Converged, Threshold, ...)
// follow the modes' base rules, which are the rules of policy.default; a
// session bound to another policy may be stricter, and the runtime's Ack
// is authoritative.
type Projection interface {
	Apply(env *macpv1.Envelope) error
}

// ApplyAll folds every envelope into p, stopping at the first error.
func ApplyAll(p Projection, envs ...*macpv1.Envelope) error {
	for _, e := range envs {
		if err := p.Apply(e); err != nil {
			return err
		}
	}
	return nil
}

// ErrNotStarted is returned by a projection given a session message
// before the SessionStart.
var ErrNotStarted = errors.New("sdk: projection: the first envelope must be the SessionStart")

// SessionView is the mode-independent part of every projection: what the
// SessionStart bound, and how the session ended.
type SessionView struct {
	SessionID, Mode string
	// Initiator is the SessionStart's sender.
	Initiator string
	// Participants are the declared participants, first occurrence of
	// each, in SessionStart order.
	Participants         []string
	Intent               string
	TTL                  time.Duration
	ModeVersion          string
	ConfigurationVersion string
	// PolicyVersion as bound ("" in the SessionStart means policy.default;
	// it is reported here as DefaultPolicy).
	PolicyVersion string
	ContextID     string
	// Messages counts the envelopes folded, SessionStart included.
	Messages int
	// Commitment is the accepted Commitment that resolved the session.
	Commitment *macpv1.CommitmentPayload
	// CommitmentSender sent it.
	CommitmentSender string
	// Cancelled is set by the runtime's SessionCancel record (the session
	// ended by cancellation: CANCELLED or EXPIRED by profile, see State);
	// CancelReason is its reason.
	Cancelled    bool
	CancelReason string
	// Suspended is set by the runtime's SessionSuspend record and cleared
	// by its SessionResume record (RFC-MACP-0001 §7.5): while it is set the
	// runtime accepts no message of the session.
	Suspended bool
	// Profile is the profile the session is bound to ([ProfileApril] or
	// [ProfileLatest]; "" is ProfileApril). The history does not carry
	// it: set it before folding, from [Client.Profile] of the runtime that
	// started the session. It decides what a cancellation ends as (see
	// State) and the profile-dependent rules of the modes
	// ([DecisionProjection.CanPropose]).
	Profile string
}

// Latest reports whether Profile is the 2026-09 (latest) profile.
func (v *SessionView) Latest() bool {
	p, _ := ResolveProfile(v.Profile)
	return p == ProfileLatest
}

// State is the session's state as its history shows it: UNSPECIFIED
// before the SessionStart, then OPEN, SUSPENDED between a SessionSuspend
// and the next SessionResume, RESOLVED after the Commitment, and after a
// SessionCancel CANCELLED under profile 2026-09 or EXPIRED under 2026-04.
// A TTL expiry appends no envelope: a projection of an OPEN history whose
// deadline passed still says OPEN (GetSession knows better).
func (v *SessionView) State() macpv1.SessionState {
	switch {
	case !v.Started():
		return macpv1.SessionState_SESSION_STATE_UNSPECIFIED
	case v.Resolved():
		return macpv1.SessionState_SESSION_STATE_RESOLVED
	case v.Cancelled && v.Latest():
		return macpv1.SessionState_SESSION_STATE_CANCELLED
	case v.Cancelled:
		return macpv1.SessionState_SESSION_STATE_EXPIRED
	case v.Suspended:
		return macpv1.SessionState_SESSION_STATE_SUSPENDED
	}
	return macpv1.SessionState_SESSION_STATE_OPEN
}

// Accepting reports whether the runtime accepts session messages now, as
// far as the history shows: started, not SUSPENDED, not ended.
func (v *SessionView) Accepting() bool { return v.Started() && !v.Suspended && !v.Ended() }

// CommitmentRef returns the reference that supersedes the Commitment that
// resolved this session (see [Supersedes]); nil before it resolved.
func (v *SessionView) CommitmentRef() (*macpv1.CommitmentRef, error) {
	if v.Commitment == nil {
		return nil, errors.New("sdk: the session is not resolved")
	}
	return CommitmentRefOf(v.SessionID, v.Commitment)
}

// Started reports whether the SessionStart was folded.
func (v *SessionView) Started() bool { return v.Messages > 0 }

// Resolved reports whether a Commitment resolved the session.
func (v *SessionView) Resolved() bool { return v.Commitment != nil }

// Ended reports whether the session is terminal as far as its history
// shows (resolved or cancelled; a TTL expiry appends no envelope).
func (v *SessionView) Ended() bool { return v.Resolved() || v.Cancelled }

// IsParticipant reports whether id is a declared participant.
func (v *SessionView) IsParticipant(id string) bool { return slices.Contains(v.Participants, id) }

// begin handles the envelope kinds common to every mode. It returns
// handled=true when the envelope was fully applied (SessionStart,
// Commitment, SessionCancel) and an error when it does not fit.
func (v *SessionView) begin(mode string, env *macpv1.Envelope) (handled bool, err error) {
	if env == nil {
		return false, errors.New("sdk: projection: nil envelope")
	}
	if v.Messages == 0 {
		if env.MessageType != TypeSessionStart {
			return false, ErrNotStarted
		}
		if env.Mode != mode {
			return false, fmt.Errorf("sdk: projection: a %s projection got a %s session", mode, env.Mode)
		}
		var p macpv1.SessionStartPayload
		if err := proto.Unmarshal(env.Payload, &p); err != nil {
			return false, fmt.Errorf("sdk: projection: SessionStart payload: %w", err)
		}
		v.SessionID, v.Mode, v.Initiator = env.SessionId, env.Mode, env.Sender
		v.Participants = nil
		for _, id := range p.Participants {
			if !slices.Contains(v.Participants, id) {
				v.Participants = append(v.Participants, id)
			}
		}
		v.Intent, v.TTL = p.Intent, time.Duration(p.TtlMs)*time.Millisecond
		v.ModeVersion, v.ConfigurationVersion, v.ContextID = p.ModeVersion, p.ConfigurationVersion, p.ContextId
		v.PolicyVersion = p.PolicyVersion
		if v.PolicyVersion == "" {
			v.PolicyVersion = DefaultPolicy
		}
		v.Messages = 1
		return true, nil
	}
	if env.SessionId != v.SessionID {
		return false, fmt.Errorf("sdk: projection: envelope of session %q in the projection of %q", env.SessionId, v.SessionID)
	}
	if v.Ended() {
		return false, fmt.Errorf("sdk: projection: %s after the session ended", env.MessageType)
	}
	switch env.MessageType {
	case TypeSessionStart:
		return false, errors.New("sdk: projection: a second SessionStart")
	case TypeCommitment:
		var c macpv1.CommitmentPayload
		if err := proto.Unmarshal(env.Payload, &c); err != nil {
			return false, fmt.Errorf("sdk: projection: Commitment payload: %w", err)
		}
		v.Commitment, v.CommitmentSender = &c, env.Sender
		v.Messages++
		return true, nil
	case TypeSessionSuspend, TypeSessionResume:
		v.Suspended = env.MessageType == TypeSessionSuspend
		v.Messages++
		return true, nil
	case TypeSessionCancel:
		var c macpv1.SessionCancelPayload
		if err := proto.Unmarshal(env.Payload, &c); err == nil {
			v.CancelReason = c.Reason
		}
		v.Cancelled = true
		v.Messages++
		return true, nil
	}
	if env.Mode != v.Mode {
		return false, fmt.Errorf("sdk: projection: %s envelope in a %s session", env.Mode, v.Mode)
	}
	return false, nil
}

// decode unmarshals a mode payload, naming the type on failure.
func decode(env *macpv1.Envelope, m proto.Message) error {
	if err := proto.Unmarshal(env.Payload, m); err != nil {
		return fmt.Errorf("sdk: projection: %s payload: %w", env.MessageType, err)
	}
	return nil
}

func unknownType(env *macpv1.Envelope) error {
	return fmt.Errorf("sdk: projection: message type %q is not defined by %s", env.MessageType, env.Mode)
}
