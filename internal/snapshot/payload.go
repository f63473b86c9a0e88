package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gowebpki/jcs"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/protobuf/proto"
)

// Format names the payload layout; it is part of the payload, so a future
// layout gets other ids.
const Format Name = "macpd.session_snapshot.v1"

// Key is the ADR-029 session key.
type Key struct {
	EventSource ID `json:"event_source"`
	ServerID    ID `json:"server_id"`
	SessionID   ID `json:"session_id"`
}

// Window is the state window (ADR-029 §2). Subsequent lists, for a
// cross_session_decay window, the ids of up to DecayRuns sessions started
// by the same initiator after this one, in SessionStart acceptance order
// (docs/snapshots.md); it is informational and never read by admission.
type Window struct {
	Kind       Class `json:"window_kind"`
	DecayRuns  int   `json:"decay_runs,omitempty"`
	Subsequent []ID  `json:"subsequent_sessions,omitempty"`
}

// Entry is one accepted envelope. PayloadSHA256 is empty in the strict
// profile. MessageID is empty for envelopes the runtime emits itself (the
// SessionCancel of CancelSession, sender "_runtime"): the runtime draws
// their ids at random, so they would make equal sessions differ.
type Entry struct {
	Seq           uint64 `json:"seq"`
	MessageType   Name   `json:"message_type"`
	Sender        ID     `json:"sender"`
	MessageID     ID     `json:"message_id,omitempty"`
	PayloadSHA256 Hash   `json:"payload_sha256,omitempty"`
}

// Outcome is how a terminal session ended. CommitmentID, Action and
// OutcomePositive are set when EndedBy is commitment; Supersedes when
// that Commitment supersedes another (CommitmentPayload.supersedes).
type Outcome struct {
	EndedBy         Class       `json:"ended_by"`
	CommitmentID    ID          `json:"commitment_id,omitempty"`
	Action          Name        `json:"action,omitempty"`
	OutcomePositive bool        `json:"outcome_positive"`
	Supersedes      *Supersedes `json:"supersedes,omitempty"`
}

// Supersedes is the reference a superseding Commitment carries, as hashes
// only: SessionID is the Opaque digest of the referenced session id (equal
// to that session's own payload session.session_id under the same key),
// CommitmentHash the RFC-MACP-0013 commitment hash as it was sent when it
// is canonical ("sha256:" and 64 lowercase hex digits, a digest of the
// referenced commitment, never its content), else the Opaque digest of
// the value sent (profile 2026-04 accepted any non-empty string there).
type Supersedes struct {
	SessionID      ID   `json:"session_id"`
	CommitmentHash Hash `json:"commitment_hash"`
}

// Payload is the snapshot of one session: everything its state_snapshot_id
// covers. It holds only ids, names, classes, hashes, counts and flags (see
// Validate): never timestamps, intents, reasons, payload bytes, extension
// values, host names, runtime versions or rejected envelopes.
type Payload struct {
	Format         Name   `json:"format"`
	Session        Key    `json:"session"`
	Window         Window `json:"window"`
	PrivacyProfile Class  `json:"privacy_profile"`
	// ProtocolProfile is the protocol profile the session is bound to,
	// present only when it is not 2026-04 (so every 2026-04 payload, and
	// id, is what it was before profiles existed).
	ProtocolProfile      Class    `json:"protocol_profile,omitempty"`
	Mode                 Name     `json:"mode"`
	ModeVersion          ID       `json:"mode_version"`
	ConfigurationVersion ID       `json:"configuration_version"`
	PolicyVersion        ID       `json:"policy_version"`
	State                Class    `json:"state"`
	AcceptedCount        uint64   `json:"accepted_count"`
	Initiator            ID       `json:"initiator"`
	Participants         []ID     `json:"participants"`
	Entries              []Entry  `json:"entries"`
	Outcome              *Outcome `json:"outcome,omitempty"`
}

// Options select the key, window and profile of a snapshot.
type Options struct {
	EventSource string
	ServerID    string
	// Profile is ProfileDefault (zero value) or ProfileStrict.
	Profile Class
	// DecayRuns > 0 asks for a cross_session_decay window of that many
	// subsequent sessions; 0 is a session window.
	DecayRuns int
	// Subsequent are the subsequent sessions' ids (see Subsequent); only
	// with DecayRuns > 0, at most DecayRuns of them.
	Subsequent []string
}

// Input is a session as snapshots see it: its bound versions and state,
// and its accepted envelopes in sequence order (1 = SessionStart). It can
// be filled from stored records (FromRecords) or from what a client reads
// over the wire (GetSession metadata plus a passive StreamSession from
// sequence 0); both give the same Input for the same session.
type Input struct {
	SessionID            string
	Mode                 string
	ModeVersion          string
	ConfigurationVersion string
	PolicyVersion        string
	State                macpv1.SessionState
	Initiator            string
	Participants         []string
	// Profile is the protocol profile the session is bound to, as its
	// start record holds it: "" or coord.ProfileApril ("2026-04"), or
	// coord.ProfileLatest ("2026-09").
	Profile string
	// Envelopes are the accepted envelopes, Envelopes[i] with sequence
	// number i+1. A TTL expiry has no envelope and is not among them.
	Envelopes []*macpv1.Envelope
}

// ErrInput marks an Input that cannot be snapshotted (inconsistent or
// out of range).
var ErrInput = errors.New("snapshot: bad input")

// Build derives the payload. It reads only in and o: no clock, no host.
func Build(in Input, o Options) (*Payload, error) {
	if o.Profile == "" {
		o.Profile = ProfileDefault
	}
	if o.Profile != ProfileDefault && o.Profile != ProfileStrict {
		return nil, fmt.Errorf("%w: unknown profile %q", ErrInput, o.Profile)
	}
	if o.EventSource == "" || o.ServerID == "" {
		return nil, fmt.Errorf("%w: event source and server id must not be empty", ErrInput)
	}
	if o.DecayRuns < 0 || len(o.Subsequent) > o.DecayRuns {
		return nil, fmt.Errorf("%w: decay_runs %d with %d subsequent sessions", ErrInput, o.DecayRuns, len(o.Subsequent))
	}
	profile := coord.StoredProfile(in.Profile)
	if profile != coord.ProfileApril && profile != coord.ProfileLatest {
		return nil, fmt.Errorf("%w: unknown protocol profile %q", ErrInput, in.Profile)
	}
	if len(in.Envelopes) == 0 || in.Envelopes[0].GetMessageType() != coord.TypeSessionStart {
		return nil, fmt.Errorf("%w: history does not begin with a SessionStart", ErrInput)
	}
	// Client-chosen identifiers are opaque digests (Opaque), never
	// verbatim: the session id, sender, initiator, participants, message
	// and commitment ids, commitment action, configuration version and
	// subsequent sessions. Protocol names (mode, message types), the
	// registered mode and policy versions and the key's event source and
	// server id stay as they are.
	op := func(raw string) ID { return Opaque(o.EventSource, o.ServerID, raw) }
	ops := func(raw []string) []ID {
		out := make([]ID, len(raw))
		for i, r := range raw {
			out[i] = op(r)
		}
		return out
	}
	p := &Payload{
		Format:               Format,
		Session:              Key{EventSource: NewID(o.EventSource), ServerID: NewID(o.ServerID), SessionID: op(in.SessionID)},
		Window:               Window{Kind: WindowSession},
		PrivacyProfile:       o.Profile,
		Mode:                 NewName(in.Mode),
		ModeVersion:          NewID(in.ModeVersion),
		ConfigurationVersion: op(in.ConfigurationVersion),
		PolicyVersion:        NewID(in.PolicyVersion),
		AcceptedCount:        uint64(len(in.Envelopes)),
		Initiator:            op(in.Initiator),
		Participants:         ops(in.Participants),
		Entries:              make([]Entry, len(in.Envelopes)),
	}
	if profile != coord.ProfileApril {
		p.ProtocolProfile = ProtocolLatest
	}
	if o.DecayRuns > 0 {
		p.Window = Window{Kind: WindowCrossSessionDecay, DecayRuns: o.DecayRuns, Subsequent: ops(o.Subsequent)}
	}
	for i, env := range in.Envelopes {
		if env.GetSessionId() != in.SessionID {
			return nil, fmt.Errorf("%w: envelope %d is for another session", ErrInput, i+1)
		}
		e := Entry{Seq: uint64(i + 1), MessageType: NewName(env.GetMessageType()), Sender: NewID(env.GetSender())}
		if env.GetSender() != coord.RuntimeSender {
			e.Sender = op(env.GetSender())
			e.MessageID = op(env.GetMessageId())
		}
		if o.Profile == ProfileDefault {
			e.PayloadSHA256 = payloadHash(env)
		}
		p.Entries[i] = e
	}
	last := in.Envelopes[len(in.Envelopes)-1]
	switch in.State {
	case macpv1.SessionState_SESSION_STATE_OPEN:
		p.State = StateOpen
	case macpv1.SessionState_SESSION_STATE_RESOLVED:
		p.State = StateResolved
		if last.GetMessageType() != coord.TypeCommitment {
			return nil, fmt.Errorf("%w: a RESOLVED session must end with its Commitment", ErrInput)
		}
		var c macpv1.CommitmentPayload
		if err := proto.Unmarshal(last.GetPayload(), &c); err != nil {
			return nil, fmt.Errorf("%w: the resolving Commitment does not decode", ErrInput)
		}
		p.Outcome = &Outcome{EndedBy: EndedByCommitment, CommitmentID: op(c.CommitmentId), Action: Name(op(c.Action)), OutcomePositive: c.OutcomePositive}
		if ref := c.GetSupersedes(); ref != nil {
			h := Hash(ref.GetCommitmentHash())
			if !cmthash.WellFormedHash(string(h)) {
				h = Hash(op(ref.GetCommitmentHash()))
			}
			p.Outcome.Supersedes = &Supersedes{SessionID: op(ref.GetSessionId()), CommitmentHash: h}
		}
	case macpv1.SessionState_SESSION_STATE_EXPIRED:
		p.State = StateExpired
		p.Outcome = &Outcome{EndedBy: EndedByTTL}
		if last.GetMessageType() == coord.TypeSessionCancel {
			if profile != coord.ProfileApril {
				return nil, fmt.Errorf("%w: a cancel ends a %s session CANCELLED, not EXPIRED", ErrInput, profile)
			}
			p.Outcome.EndedBy = EndedByCancel
		}
	case macpv1.SessionState_SESSION_STATE_SUSPENDED:
		// Not ended: a SUSPENDED session is snapshotted like an OPEN one
		// (no outcome); its last envelope is the runtime's SessionSuspend.
		p.State = StateSuspended
		if last.GetMessageType() != coord.TypeSessionSuspend {
			return nil, fmt.Errorf("%w: a SUSPENDED session must end with its SessionSuspend", ErrInput)
		}
	case macpv1.SessionState_SESSION_STATE_CANCELLED:
		p.State = StateCancelled
		p.Outcome = &Outcome{EndedBy: EndedByCancel}
		if profile != coord.ProfileLatest || last.GetMessageType() != coord.TypeSessionCancel {
			return nil, fmt.Errorf("%w: only a %s session ends CANCELLED, by its SessionCancel", ErrInput, coord.ProfileLatest)
		}
	default:
		return nil, fmt.Errorf("%w: state %v", ErrInput, in.State)
	}
	if err := Validate(p); err != nil {
		return nil, err
	}
	return p, nil
}

// payloadHash is an entry's payload_sha256: the SHA-256 of the payload
// bytes, except for the runtime's SessionResume, whose banked_ms is
// derived from acceptance times (the deadline minus the suspension's
// time), which payloads never hold: its hash is over the payload with
// banked_ms cleared (deterministic protobuf), so the reason and the
// caller still count and the clock does not.
func payloadHash(env *macpv1.Envelope) Hash {
	if env.GetMessageType() == coord.TypeSessionResume && env.GetSender() == coord.RuntimeSender {
		var rp macpv1.SessionResumePayload
		if proto.Unmarshal(env.GetPayload(), &rp) == nil {
			rp.BankedMs = 0
			if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(&rp); err == nil {
				return HashBytes(b)
			}
		}
	}
	return HashBytes(env.GetPayload())
}

// Canonical returns the RFC 8785 (JCS) bytes of p, after Validate. The
// JSON text produced by encoding/json is only an intermediate: JCS parses
// it and writes the canonical form (sorted keys by UTF-16 code units,
// ECMAScript number form, minimal string escapes).
func Canonical(p *Payload) ([]byte, error) {
	if err := Validate(p); err != nil {
		return nil, err
	}
	return canonicalJSON(p)
}

func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}

// Sealed is a payload with its canonical bytes and id.
type Sealed struct {
	Payload *Payload
	// Bytes are the RFC 8785 bytes; ID = HashBytes(Bytes) is both the
	// state_snapshot_id and the content address the payload is stored
	// and served under.
	Bytes []byte
	ID    Hash
}

// Seal canonicalizes p and computes its id.
func Seal(p *Payload) (Sealed, error) {
	b, err := Canonical(p)
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{Payload: p, Bytes: b, ID: HashBytes(b)}, nil
}

// Start is what Subsequent needs of a session: its id, initiator and
// declared participants (who may observe it, with observer identities),
// and the acceptance time and id that order SessionStarts.
type Start struct {
	SessionID    string
	Initiator    string
	Participants []string
	AcceptedAtMs int64
}

// Viewer is the identity a cross_session_decay window is computed for:
// its candidates are the sessions it may observe (the runtime's read
// matrix: observer identities see every session, others the ones they
// initiated or are declared participants of), so one caller gets one id
// for one state on every path (docs/snapshots.md).
type Viewer struct {
	Sender   string
	Observer bool
}

// MayObserve reports whether v may observe the session st.
func (v Viewer) MayObserve(st Start) bool {
	return v.Observer || (v.Sender != "" && (st.Initiator == v.Sender || slices.Contains(st.Participants, v.Sender)))
}

// startLess orders SessionStarts: acceptance time, then session id.
func startLess(a, b Start) bool {
	return a.AcceptedAtMs < b.AcceptedAtMs || (a.AcceptedAtMs == b.AcceptedAtMs && a.SessionID < b.SessionID)
}

func CompareStarts(a, b Start) int {
	switch {
	case startLess(a, b):
		return -1
	case startLess(b, a):
		return 1
	}
	return 0
}

// Subsequent returns the ids of up to n sessions started by the same
// initiator as session `of`, after it, that v may observe, in
// SessionStart acceptance order (acceptance time, then session id for
// starts accepted in the same millisecond). It returns nil when `of` is
// not among starts.
func Subsequent(starts []Start, of string, n int, v Viewer) []string {
	i := slices.IndexFunc(starts, func(s Start) bool { return s.SessionID == of })
	if i < 0 || n <= 0 {
		return nil
	}
	me := starts[i]
	var after []Start
	for _, s := range starts {
		if s.Initiator == me.Initiator && startLess(me, s) && v.MayObserve(s) {
			after = append(after, s)
		}
	}
	slices.SortFunc(after, CompareStarts)
	out := make([]string, 0, min(n, len(after)))
	for _, s := range after[:min(n, len(after))] {
		out = append(out, s.SessionID)
	}
	return out
}
