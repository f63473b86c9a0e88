package mode

import (
	"slices"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/policy"
)

// Binding is what a session was bound to at SessionStart. It is immutable
// for the life of the session and identical on replay.
type Binding struct {
	SessionID            string
	Mode                 string
	ModeVersion          string
	ConfigurationVersion string
	// PolicyVersion is the effective policy id ("policy.default" when the
	// SessionStart left it empty).
	PolicyVersion string
	Policy        *policy.Policy
	Initiator     string
	// Participants are the declared participants in SessionStart order.
	Participants []string
	// Profile is the semantics profile the session is bound to
	// (coord.ProfileApril or coord.ProfileLatest; never empty for a
	// session the core started or restored). Modes use it only where the
	// two profiles give different verdicts.
	Profile string
}

// IsParticipant reports whether id is a declared participant.
func (b *Binding) IsParticipant(id string) bool {
	return slices.Contains(b.Participants, id)
}

// Message is one session-scoped envelope as a mode sees it. The sender is
// the authenticated identity.
type Message struct {
	Type    string
	ID      string
	Sender  string
	Payload []byte
}

// Mode is a coordination mode implementation.
type Mode interface {
	// Descriptor describes the mode for discovery (ListModes, ListExtModes).
	// Callers must not modify the returned value.
	Descriptor() *macpv1.ModeDescriptor
	// Start checks the mode's SessionStart requirements on the binding
	// (e.g. participants required) and returns the initial state. Errors
	// carry INVALID_ENVELOPE, or INVALID_POLICY_DEFINITION for bound
	// policy rules the mode cannot use.
	Start(b *Binding) (State, error)
}

// RulesValidator is implemented by modes whose policy rules can be checked
// without a session, so a policy registry refuses rules a session of the
// mode could never use at RegisterPolicy (RFC-MACP-0012 §7 "rules MUST
// validate against the target mode's rule JSON Schema"; checklist POL-3)
// instead of at every SessionStart. Checks that depend on a session's
// participants stay in Start. Errors carry INVALID_POLICY_DEFINITION. A
// mode without it accepts any rules object (its Start may still refuse).
type RulesValidator interface {
	ValidateRules(p *policy.Policy) error
}

// ImplicitAccepter is implemented by mode states with an action the runtime
// takes on the mode's behalf when a policy timeout passes (the handoff
// mode's implicit acceptance, RFC-MACP-0010 §5.1, RFC-MACP-0012 §4.5). The
// core tracks since when the action has been pending (the acceptance time
// of the message that made it pending), and when ImplicitAcceptTimeoutMs
// has passed the runtime appends the returned message as a runtime-emitted
// record; replay applies the recorded one with StepImplicit.
type ImplicitAccepter interface {
	// ImplicitAcceptTimeoutMs is the bound policy's timeout (0: never).
	ImplicitAcceptTimeoutMs(b *Binding) uint64
	// PendingImplicitAccept returns the message the runtime would append
	// now (its Sender is the participant it acts for), or false.
	PendingImplicitAccept() (Message, bool)
	// StepImplicit applies that message; an error when it is not the
	// pending one.
	StepImplicit(b *Binding, m *Message) error
}

// State is the mode-specific state of one session.
type State interface {
	// Step validates and applies one non-Commitment message: authority
	// first (FORBIDDEN), then decoding, references and phase
	// (INVALID_ENVELOPE; also for a type the mode does not define), then
	// policy knobs that act on this message (POLICY_DENIED); after the
	// session committed, SESSION_NOT_OPEN. On error nothing changed. The
	// Message (and its Payload) is only valid during the call: the core
	// reuses it, so a mode must copy what it keeps.
	Step(b *Binding, m *Message) error
	// Commit validates and applies a Commitment whose authority, payload
	// shape and version binding the core has already checked: session
	// eligibility (INVALID_ENVELOPE) and the bound policy's rules
	// (POLICY_DENIED). On error nothing changed; on nil the session
	// resolves.
	Commit(b *Binding, m *Message, c *macpv1.CommitmentPayload) error
	// Project returns a JSON-compatible view of the state (string-keyed
	// maps, slices, strings, numbers, bools) used by conformance checks,
	// replay-equivalence checks and diagnostics.
	Project() map[string]any
}
