package session

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/policy"
)

// Status is a session's lifecycle state (RFC-MACP-0001 §7.2). Terminal
// states are final. The moves are OPEN -> RESOLVED | EXPIRED, OPEN <->
// SUSPENDED, SUSPENDED -> EXPIRED, and cancellation: OPEN | SUSPENDED ->
// EXPIRED under coord.ProfileApril, -> CANCELLED under coord.ProfileLatest.
type Status uint8

// Lifecycle states, numbered as macp.v1.SessionState.
const (
	Open      Status = 1
	Resolved  Status = 2
	Expired   Status = 3
	Suspended Status = 4
	Cancelled Status = 5
)

// Proto returns the wire enum.
func (s Status) Proto() macpv1.SessionState { return macpv1.SessionState(s) }

func (s Status) String() string {
	switch s {
	case Open:
		return "OPEN"
	case Resolved:
		return "RESOLVED"
	case Expired:
		return "EXPIRED"
	case Suspended:
		return "SUSPENDED"
	case Cancelled:
		return "CANCELLED"
	}
	return "UNSPECIFIED"
}

// Terminal reports whether the state is final.
func (s Status) Terminal() bool { return s == Resolved || s == Expired || s == Cancelled }

// Kind is the kind of a history record.
type Kind uint8

// Record kinds.
const (
	// KindStart is the accepted SessionStart (always sequence 1).
	KindStart Kind = 1
	// KindMessage is an accepted session-scoped envelope from a sender.
	KindMessage Kind = 2
	// KindCancel is the runtime-emitted SessionCancel envelope written by
	// CancelSession.
	KindCancel Kind = 3
	// KindExpire records TTL expiry (or a suspension past its cap). It
	// carries no envelope, is always the last record and takes the sequence number after the last envelope.
	KindExpire Kind = 4
	// KindSuspend is the runtime-emitted SessionSuspend envelope written by
	// SuspendSession (RFC-MACP-0001 §7.5).
	KindSuspend Kind = 5
	// KindResume is the runtime-emitted SessionResume envelope written by
	// ResumeSession; its payload records the banked TTL.
	KindResume Kind = 6
	// KindImplicit is a runtime-emitted action a mode takes for a
	// participant when its policy timeout passes: the handoff mode's
	// implicit HandoffAccept (implicit.go).
	KindImplicit Kind = 7
)

func (k Kind) String() string {
	switch k {
	case KindStart:
		return "start"
	case KindMessage:
		return "message"
	case KindCancel:
		return "cancel"
	case KindExpire:
		return "expire"
	case KindSuspend:
		return "suspend"
	case KindResume:
		return "resume"
	case KindImplicit:
		return "implicit"
	}
	return "unknown"
}

// Record is one entry of a session's append-only history. Records of a
// session are numbered 1..N without gaps. Every record but KindExpire holds
// the accepted envelope, so envelope sequence numbers are the record
// numbers.
type Record struct {
	SessionID    string
	Seq          uint64
	Kind         Kind
	AcceptedAtMs int64
	// Envelope is the accepted envelope with its sender bound to the
	// authenticated identity; nil for KindExpire. Never modified after the
	// record is produced.
	Envelope *macpv1.Envelope
	// Start holds what replay needs beyond the envelope; only KindStart.
	Start *StartInfo
	// Status is the session's lifecycle state after this record.
	Status Status
	// Final is the session's metadata after this record when the record
	// made the session terminal (nil otherwise). It is derived data — replay
	// recomputes it — kept so a store can list terminal sessions without
	// replaying them.
	Final *macpv1.SessionMetadata
	// Hash and PrevHash are the integrity chain (RFC-MACP-0003 §6): set by
	// the store when the record is appended and returned by Read; the core
	// neither sets nor reads them.
	Hash, PrevHash []byte
}

// StartInfo is the part of a session's binding that cannot be recomputed
// from the SessionStart envelope alone: the policy descriptor resolved from
// the registry at that moment and the deadline computed from the runtime
// clock (RFC-MACP-0003 §3: replay never consults live registries or the
// wall clock).
type StartInfo struct {
	Policy     policy.Descriptor
	DeadlineMs int64
	// Profile is the semantics profile the session is bound to; "" in
	// records written before profiles existed (coord.StoredProfile maps it
	// to coord.ProfileApril).
	Profile string
	// MaxSuspendMs is the bound cap on cumulative suspended time: the
	// payload's max_suspend_ms, or Limits.DefaultMaxSuspendMs when that was
	// 0. 0 in records written before suspension existed (such sessions
	// never hold a suspension).
	MaxSuspendMs int64
}

// Limits are the deployment parameters admission depends on. They are part
// of the core's input so that decisions stay a pure function of it.
type Limits struct {
	// MaxTTLMs caps SessionStart.ttl_ms (default 24 h).
	MaxTTLMs int64
	// MaxParticipants caps the declared participant list (default 1000).
	MaxParticipants int
	// MaxPayloadBytes caps Envelope.payload (default 1 MiB).
	MaxPayloadBytes int
	// MaxStartSkewMs rejects a SessionStart whose timestamp differs from the
	// runtime clock by more than this, because the timestamp determines the
	// deadline (RFC-MACP-0003 §2). 0 disables the check.
	MaxStartSkewMs int64
	// Profile is the profile new sessions are bound to (coord.ProfileApril
	// when empty). It is a deployment setting read only by Start; a
	// restored session uses the profile its start record holds.
	Profile string
	// MaxSuspendMs caps SessionStart.max_suspend_ms and is the cap bound
	// when a SessionStart leaves it 0 (DefaultMaxSuspend when 0), so a
	// client cannot keep a session alive without bound.
	MaxSuspendMs int64
}

// DefaultMaxSuspend is MaxSuspendMs when a deployment sets none: 7 days, as
// the reference runtime's MAX_SUSPEND_MS (RFC-MACP-0001 §7.5).
const DefaultMaxSuspend int64 = 7 * 24 * 60 * 60 * 1000

func (l Limits) maxSuspend() int64 {
	if l.MaxSuspendMs > 0 {
		return l.MaxSuspendMs
	}
	return DefaultMaxSuspend
}

// DefaultLimits are the documented defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxTTLMs:        24 * 60 * 60 * 1000,
		MaxParticipants: 1000,
		MaxPayloadBytes: 1 << 20,
		MaxStartSkewMs:  5 * 60 * 1000,
	}
}

// Activity is one sender's participation counters (ParticipantActivity).
type Activity struct {
	ParticipantID string
	LastMessageMs int64
	MessageCount  uint32
}
