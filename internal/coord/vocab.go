package coord

import "strings"

// ProtocolVersion is the only MACP protocol version this runtime speaks
// (RFC-MACP-0001 §5; every example and SDK uses "1.0").
const ProtocolVersion = "1.0"

// Well-known core message types (RFC-MACP-0001 §7, §11).
const (
	TypeSessionStart  = "SessionStart"
	TypeSessionCancel = "SessionCancel"
	// TypeSessionSuspend and TypeSessionResume are the runtime-emitted
	// annotations of SuspendSession and ResumeSession (RFC-MACP-0001 §7.5).
	TypeSessionSuspend = "SessionSuspend"
	TypeSessionResume  = "SessionResume"
	TypeCommitment     = "Commitment"
	TypeSignal         = "Signal"
	TypeProgress       = "Progress"
)

// RuntimeSender is the sender of envelopes the runtime itself emits into a
// session's history (the SessionCancel entry written by CancelSession).
// It can never be an authenticated identity: identities starting with '_'
// are refused by every authenticator.
const RuntimeSender = "_runtime"

// DefaultPolicyID is the always-registered policy that adds no constraints
// (RFC-MACP-0012 §4).
const DefaultPolicyID = "policy.default"

// Identity is an authenticated caller. Sender is the identity every envelope
// the caller submits is attributed to (RFC-MACP-0004 §3: the sender is
// derived from authentication, never self-asserted).
type Identity struct {
	Sender string
	// Capabilities granted by the authenticator. The zero value grants the
	// defaults of a dev identity (see internal/auth).
	Caps Capabilities
}

// Capabilities are deployment-level grants attached to an identity
// (RFC-MACP-0004 §5; the reference runtime's token capability names).
type Capabilities struct {
	// AllowedModes restricts the modes the identity may start sessions in;
	// nil means all modes.
	AllowedModes []string
	// CannotStartSessions forbids SessionStart (inverted so the zero value
	// is permissive for dev identities).
	CannotStartSessions bool
	// MaxOpenSessions caps OPEN sessions initiated by this identity; 0 means
	// the runtime default.
	MaxOpenSessions int
	// CanManageModeRegistry allows RegisterExtMode/UnregisterExtMode/
	// PromoteMode and policy registry mutations.
	CanManageModeRegistry bool
	// IsObserver may read every session (GetSession, subscribe, lists).
	IsObserver bool
}

// AllowsMode reports whether the identity may start sessions in mode.
func (c Capabilities) AllowsMode(mode string) bool {
	if c.AllowedModes == nil {
		return true
	}
	for _, m := range c.AllowedModes {
		if m == mode || m == "*" {
			return true
		}
	}
	return false
}

// ValidSessionID implements the session-id policy (RFC-MACP-0001 §6,
// RFC-MACP-0004 §6 unguessable ids): a lowercase canonical UUID of version 4
// or 7, or at least 22 characters of the base64url alphabet [A-Za-z0-9_-]
// (enough for 128 bits; ULIDs qualify). A 36-character hyphenated string
// that is not a lowercase v4/v7 UUID is rejected even though '-' is in the
// base64url alphabet, so malformed or uppercase UUIDs do not slip through.
func ValidSessionID(id string) bool {
	if len(id) == 36 && id[8] == '-' && id[13] == '-' && id[18] == '-' && id[23] == '-' {
		return validLowerUUID(id)
	}
	if len(id) < 22 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func validLowerUUID(id string) bool {
	for i := 0; i < 36; i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	if v := id[14]; v != '4' && v != '7' {
		return false
	}
	// RFC 9562 variant 10xx.
	return strings.IndexByte("89ab", id[19]) >= 0
}
