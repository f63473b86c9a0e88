package session

import (
	"fmt"
	"math"
	"slices"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
	"google.golang.org/protobuf/proto"
)

// Modes resolves mode ids to implementations.
type Modes interface {
	Lookup(id string) (mode.Entry, bool)
}

// Deps are the read-only lookups and limits a SessionStart depends on.
type Deps struct {
	Modes    Modes
	Policies policy.Lookup
	Limits   Limits
}

// Session is the state of one session. It is not safe for concurrent use:
// the shell gives each session a single owner.
type Session struct {
	ID      string
	Binding mode.Binding
	Status  Status
	// StartedAtMs is when the runtime accepted the SessionStart.
	StartedAtMs int64
	// DeadlineMs is SessionStart timestamp + ttl_ms (RFC-MACP-0003 §2).
	DeadlineMs int64
	// ClosedAtMs is when the session became terminal (0 while OPEN).
	ClosedAtMs    int64
	Intent        string
	ContextID     string
	ExtensionKeys []string // sorted
	Roots         []*macpv1.Root
	// Seq is the sequence number of the last record.
	Seq uint64
	// Resolution is the accepted Commitment that resolved the session.
	Resolution *macpv1.CommitmentPayload
	// Cancellation is the SessionCancel payload when the session was cancelled.
	Cancellation *macpv1.SessionCancelPayload
	// MaxSuspendMs is the bound cap on cumulative suspended time
	// (RFC-MACP-0001 §7.5); SuspendedTotalMs is the suspended time of the
	// suspensions that ended; SuspendedAtMs is when the current suspension
	// began (0 unless SUSPENDED). While SUSPENDED, DeadlineMs is the
	// pre-suspension deadline and BankedMs the TTL left at suspension.
	MaxSuspendMs     int64
	SuspendedTotalMs int64
	SuspendedAtMs    int64
	BankedMs         int64

	// implicitKey identifies the mode's pending implicit action (""
	// when none) and implicitSince when it became pending (implicit.go).
	implicitKey   string
	implicitSince int64

	startMessageID string
	seen           map[string]struct{}
	activity       map[string]*Activity
	modeState      mode.State
	// msg is the mode.Message handed to modeState for one call, kept here
	// so that it is not allocated per envelope (a pointer passed to an
	// interface method escapes). It is cleared after each call. No mode
	// (internal/mode/...; extension modes are passthrough) keeps the
	// pointer past the call.
	msg mode.Message
}

// Start decides a SessionStart envelope whose sender is already the
// authenticated identity (RFC-MACP-0001 §7.2; checklist START-1..12). On
// success it returns the new session and its first record (sequence 1).
// The caller checks that the session id is not already taken
// (SESSION_ALREADY_EXISTS) and any deployment admission.
func Start(env *macpv1.Envelope, nowMs int64, deps Deps) (*Session, Record, error) {
	m, p, cerr := checkStart(env, deps.Modes, deps.Limits, false)
	if cerr != nil {
		return nil, Record{}, cerr
	}
	if ts := env.TimestampUnixMs; ts > 0 {
		if skew := deps.Limits.MaxStartSkewMs; skew > 0 && (ts > nowMs+skew || ts < nowMs-skew) {
			return nil, Record{}, coord.Errorf(coord.CodeInvalidEnvelope,
				"timestamp_unix_ms is more than %d ms away from the runtime clock; it determines the deadline", skew)
		}
	}
	deadline, ok := startDeadline(env.TimestampUnixMs, nowMs, p.TtlMs)
	if !ok {
		return nil, Record{}, coord.Errorf(coord.CodeInvalidEnvelope, "timestamp_unix_ms + ttl_ms overflows")
	}
	policyID := effectivePolicyID(p)
	pd, ok := deps.Policies.Policy(policyID)
	if !ok {
		return nil, Record{}, coord.Errorf(coord.CodeUnknownPolicyVersion, "policy %q is not registered", policyID)
	}
	if pd.Mode != "*" && pd.Mode != env.Mode {
		return nil, Record{}, coord.Errorf(coord.CodeInvalidPolicyDefinition, "policy %q targets mode %q, not %q", policyID, pd.Mode, env.Mode)
	}
	profile, ok := coord.ResolveProfile(deps.Limits.Profile)
	if !ok {
		return nil, Record{}, coord.Errorf(coord.CodeInternalError, "unknown profile %q", deps.Limits.Profile)
	}
	maxSuspend := p.MaxSuspendMs
	if maxSuspend == 0 {
		maxSuspend = deps.Limits.maxSuspend()
	}
	if maxSuspend > deps.Limits.maxSuspend() {
		return nil, Record{}, coord.Errorf(coord.CodeInvalidEnvelope, "max_suspend_ms must be at most %d", deps.Limits.maxSuspend())
	}
	info := &StartInfo{Policy: pd, DeadlineMs: deadline, Profile: profile, MaxSuspendMs: maxSuspend}
	bound := boundEnvelope(env)
	rec := Record{SessionID: env.SessionId, Seq: 1, Kind: KindStart, AcceptedAtMs: nowMs, Envelope: bound, Start: info, Status: Open}
	s, err := restore(rec, p, m)
	if err != nil {
		return nil, Record{}, err
	}
	return s, rec, nil
}

// checkStart applies the SessionStart rules that depend only on the
// envelope, the mode implementation and lim, and returns the mode and the
// decoded payload. On replay the session-id format (deployment-defined,
// START-2) is not re-checked and lim is zero: a start accepted under older
// deployment settings stays valid history.
func checkStart(env *macpv1.Envelope, modes Modes, lim Limits, replay bool) (mode.Mode, *macpv1.SessionStartPayload, *coord.Error) {
	if err := CheckEnvelope(env, lim); err != nil {
		return nil, nil, err
	}
	if env.MessageType != coord.TypeSessionStart {
		return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "not a SessionStart")
	}
	if env.Sender == "" {
		return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "sender is required")
	}
	if !replay && !coord.ValidSessionID(env.SessionId) {
		return nil, nil, coord.Errorf(coord.CodeInvalidSessionID,
			"session_id must be a lowercase UUID v4/v7 or at least 22 base64url characters")
	}
	entry, ok := modes.Lookup(env.Mode)
	if !ok {
		return nil, nil, coord.Errorf(coord.CodeModeNotSupported, "mode %q is not supported", env.Mode)
	}
	p := new(macpv1.SessionStartPayload)
	if len(env.Payload) == 0 {
		return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "SessionStart needs a SessionStartPayload")
	}
	if err := proto.Unmarshal(env.Payload, p); err != nil {
		return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "payload is not a SessionStartPayload")
	}
	desc := entry.Mode.Descriptor()
	if p.ModeVersion == "" {
		return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "mode_version is required")
	}
	if p.ModeVersion != desc.GetModeVersion() {
		return nil, nil, coord.Errorf(coord.CodeModeNotSupported,
			"mode %s version %q is not supported (this runtime has %q)", env.Mode, p.ModeVersion, desc.GetModeVersion())
	}
	if p.ConfigurationVersion == "" {
		return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "configuration_version is required")
	}
	if p.TtlMs <= 0 || (lim.MaxTTLMs > 0 && p.TtlMs > lim.MaxTTLMs) {
		return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "ttl_ms must be between 1 and %d", lim.MaxTTLMs)
	}
	if err := checkParticipants(p.Participants, lim.MaxParticipants, replay); err != nil {
		return nil, nil, err
	}
	// max_suspend_ms was an unknown field before macp-proto 0.1.5; a stored
	// start that carried a negative value stays valid history.
	if !replay && p.MaxSuspendMs < 0 {
		return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "max_suspend_ms must not be negative (0 = the runtime default)")
	}
	for _, r := range p.Roots {
		if r.GetUri() == "" {
			return nil, nil, coord.Errorf(coord.CodeInvalidEnvelope, "every root needs a uri")
		}
	}
	return entry.Mode, p, nil
}

// startDeadline is SessionStart timestamp + ttl_ms, with the acceptance
// time standing in for a missing (<= 0) timestamp (RFC-MACP-0003 §2;
// checklist TTL-1). ok is false when the sum overflows int64.
func startDeadline(ts, acceptedAtMs, ttlMs int64) (int64, bool) {
	if ts <= 0 {
		ts = acceptedAtMs
	}
	if ts > 0 && ttlMs > math.MaxInt64-ts {
		return 0, false
	}
	return ts + ttlMs, true
}

// effectivePolicyID is the payload's policy_version, or policy.default when
// it is empty (RFC-MACP-0012 §5).
func effectivePolicyID(p *macpv1.SessionStartPayload) string {
	if p.PolicyVersion == "" {
		return coord.DefaultPolicyID
	}
	return p.PolicyVersion
}

// checkParticipants checks the declared participants; ids follow the
// sender rule (coord.ValidAgentID) except on replay, where the record was
// accepted under the rules of its time.
func checkParticipants(ps []string, max int, replay bool) *coord.Error {
	if max > 0 && len(ps) > max {
		return coord.Errorf(coord.CodeInvalidEnvelope, "at most %d participants are allowed", max)
	}
	seen := make(map[string]struct{}, len(ps))
	for _, id := range ps {
		if strings.TrimSpace(id) == "" {
			return coord.Errorf(coord.CodeInvalidEnvelope, "participant ids must not be blank")
		}
		if !replay && !coord.ValidAgentID(id) {
			return coord.Errorf(coord.CodeInvalidEnvelope,
				"participant %.64q is not a valid agent id (1-%d bytes of printable UTF-8, no surrounding space, not starting with '_')", id, coord.MaxAgentIDBytes)
		}
		if _, dup := seen[id]; dup {
			return coord.Errorf(coord.CodeInvalidEnvelope, "participant %q is listed twice", id)
		}
		seen[id] = struct{}{}
	}
	return nil
}

// Restore rebuilds a session from its stored start record, using the mode
// implementation the record names. It re-runs the SessionStart checks that
// depend only on the record and the mode (envelope shape, payload rules,
// the mode version, the mode's start checks) and checks that the recorded
// deadline and policy descriptor are consistent with the envelope, but not
// the clock-, registry- or deployment-dependent ones (skew, policy lookup,
// session-id format, ttl/participant/payload caps): those were decided when
// the record was accepted. A mode that is missing or now has another
// version is MODE_NOT_SUPPORTED (RFC-MACP-0003 §3: replay only under the
// bound versions); any other inconsistency is INTERNAL_ERROR (divergence).
func Restore(rec Record, modes Modes) (*Session, error) {
	if rec.Kind != KindStart || rec.Envelope == nil || rec.Start == nil || rec.Seq != 1 {
		return nil, coord.Errorf(coord.CodeInternalError, "history does not begin with a SessionStart record")
	}
	env := rec.Envelope
	m, p, cerr := checkStart(env, modes, Limits{}, true)
	if cerr != nil {
		if cerr.Code == coord.CodeModeNotSupported {
			return nil, coord.Errorf(coord.CodeModeNotSupported, "cannot replay session %s: %s", rec.SessionID, cerr.Message)
		}
		return nil, diverged(rec, "%v", cerr)
	}
	if rec.SessionID != env.SessionId {
		return nil, diverged(rec, "record is filed under session %q", rec.SessionID)
	}
	if dl, ok := startDeadline(env.TimestampUnixMs, rec.AcceptedAtMs, p.TtlMs); !ok || dl != rec.Start.DeadlineMs {
		return nil, diverged(rec, "deadline %d is not timestamp + ttl_ms", rec.Start.DeadlineMs)
	}
	pd := rec.Start.Policy
	if pd.ID != effectivePolicyID(p) || (pd.Mode != "*" && pd.Mode != env.Mode) {
		return nil, diverged(rec, "policy descriptor %q (mode %q) does not fit the SessionStart", pd.ID, pd.Mode)
	}
	if prof := coord.StoredProfile(rec.Start.Profile); prof != coord.ProfileApril && prof != coord.ProfileLatest {
		return nil, coord.Errorf(coord.CodeModeNotSupported, "cannot replay session %s: profile %q is not served by this runtime", rec.SessionID, prof)
	}
	if rec.Start.MaxSuspendMs < 0 {
		return nil, diverged(rec, "max_suspend_ms %d is negative", rec.Start.MaxSuspendMs)
	}
	s, err := restore(rec, p, m)
	if err != nil {
		return nil, diverged(rec, "%v", err)
	}
	return s, nil
}

// Reserve sizes the session's dedup set for a history of n records, so
// that replaying a long history (Apply record by record) does not grow the
// set step by step. Call it after Restore when the history's length is
// known (a store's SessionInfo.LastSeq); it changes no decision, and a
// wrong n only costs memory or growth.
func (s *Session) Reserve(n int) {
	n = min(n, maxReserve)
	if n <= 8 || n <= len(s.seen) { // a map holds 8 entries before it first grows
		return
	}
	seen := make(map[string]struct{}, n)
	for id := range s.seen {
		seen[id] = struct{}{}
	}
	s.seen = seen
}

// maxReserve caps Reserve's hint (a corrupt or hostile summary must not
// make replay allocate without bound; a longer history just grows the set).
const maxReserve = 1 << 20

// diverged reports that a stored record is not what the core would accept
// now (RFC-MACP-0003 §1).
func diverged(rec Record, format string, args ...any) *coord.Error {
	return coord.Errorf(coord.CodeInternalError, "replay diverged at %s record %d of session %s: %s",
		rec.Kind, rec.Seq, rec.SessionID, fmt.Sprintf(format, args...))
}

func restore(rec Record, p *macpv1.SessionStartPayload, m mode.Mode) (*Session, error) {
	env := rec.Envelope
	pol, err := policy.Parse(rec.Start.Policy)
	if err != nil {
		return nil, err
	}
	s := &Session{
		ID: env.SessionId,
		Binding: mode.Binding{
			SessionID:            env.SessionId,
			Mode:                 env.Mode,
			ModeVersion:          p.ModeVersion,
			ConfigurationVersion: p.ConfigurationVersion,
			PolicyVersion:        rec.Start.Policy.ID,
			Policy:               pol,
			Initiator:            env.Sender,
			Participants:         slices.Clone(p.Participants),
			Profile:              coord.StoredProfile(rec.Start.Profile),
		},
		MaxSuspendMs:   rec.Start.MaxSuspendMs,
		Status:         Open,
		StartedAtMs:    rec.AcceptedAtMs,
		DeadlineMs:     rec.Start.DeadlineMs,
		Intent:         p.Intent,
		ContextID:      p.ContextId,
		Roots:          p.Roots,
		Seq:            1,
		startMessageID: env.MessageId,
		seen:           map[string]struct{}{env.MessageId: {}},
		activity:       make(map[string]*Activity, len(p.Participants)+1),
	}
	for k := range p.Extensions {
		s.ExtensionKeys = append(s.ExtensionKeys, k)
	}
	slices.Sort(s.ExtensionKeys)
	st, err := m.Start(&s.Binding)
	if err != nil {
		return nil, err
	}
	s.modeState = st
	if s.MaxSuspendMs == 0 {
		s.MaxSuspendMs = DefaultMaxSuspend
	}
	s.trackImplicit(rec.AcceptedAtMs)
	s.touch(env.Sender, rec.AcceptedAtMs)
	return s, nil
}

// Latest reports whether the session is bound to coord.ProfileLatest.
func (s *Session) Latest() bool { return coord.IsLatest(s.Binding.Profile) }

// boundEnvelope returns the envelope as it enters history. The caller has
// already replaced the sender with the authenticated identity; the copy
// protects history from later mutation of the request message.
func boundEnvelope(env *macpv1.Envelope) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion:     env.MacpVersion,
		Mode:            env.Mode,
		MessageType:     env.MessageType,
		MessageId:       env.MessageId,
		SessionId:       env.SessionId,
		Sender:          env.Sender,
		TimestampUnixMs: env.TimestampUnixMs,
		Payload:         env.Payload,
	}
}

func (s *Session) touch(sender string, atMs int64) {
	a := s.activity[sender]
	if a == nil {
		a = &Activity{ParticipantID: sender}
		s.activity[sender] = a
	}
	a.MessageCount++
	a.LastMessageMs = atMs
}

// Outcome is the result of offering an envelope to a session.
type Outcome struct {
	// Records to append durably, in order. Empty for duplicates and for
	// rejections, except that a rejection caused by a passed deadline
	// carries the Expire record that the caller must still persist.
	Records []Record
	// Duplicate is set when the message_id was already accepted.
	Duplicate bool
	// Err is the rejection, nil when accepted or duplicate.
	Err *coord.Error
	// Resolved is set when this envelope resolved the session.
	Resolved bool
}

// Accepted reports whether the envelope was newly accepted.
func (o Outcome) Accepted() bool { return o.Err == nil && !o.Duplicate }

// Step offers a session-scoped envelope (sender already bound) to the
// session at time nowMs. See the package doc for the order of checks.
func (s *Session) Step(env *macpv1.Envelope, nowMs int64, lim Limits) Outcome {
	return s.step(env, nowMs, lim, false)
}

// step is Step; with replaying set (Apply) it decides exactly the same way
// but builds no record: the record already exists.
func (s *Session) step(env *macpv1.Envelope, nowMs int64, lim Limits, replaying bool) Outcome {
	if err := CheckEnvelope(env, lim); err != nil {
		return Outcome{Err: err}
	}
	if env.Sender == "" {
		return Outcome{Err: coord.Errorf(coord.CodeInvalidEnvelope, "sender is required")}
	}
	if env.SessionId != s.ID {
		return Outcome{Err: coord.Errorf(coord.CodeInvalidEnvelope, "envelope is for session %q, not %q", env.SessionId, s.ID)}
	}
	if _, dup := s.seen[env.MessageId]; dup {
		return Outcome{Duplicate: true}
	}
	switch env.MessageType {
	case coord.TypeSessionStart:
		return Outcome{Err: coord.Errorf(coord.CodeSessionAlreadyExists, "session %s already exists", s.ID)}
	case coord.TypeSessionCancel:
		return Outcome{Err: coord.Errorf(coord.CodeForbidden, "SessionCancel is emitted by the runtime; use CancelSession")}
	case coord.TypeSessionSuspend, coord.TypeSessionResume:
		// Under 2026-04 these names were ordinary message types (an
		// extension mode could accept them), so stored April histories
		// replay as they were decided.
		if !replaying || s.Latest() {
			return Outcome{Err: coord.Errorf(coord.CodeForbidden, "%s is emitted by the runtime; use %sSession", env.MessageType, strings.TrimPrefix(env.MessageType, "Session"))}
		}
	case coord.TypeSignal, coord.TypeProgress:
		return Outcome{Err: coord.Errorf(coord.CodeInvalidEnvelope, "%s is not a session message", env.MessageType)}
	}
	if env.Mode != s.Binding.Mode {
		return Outcome{Err: coord.Errorf(coord.CodeInvalidEnvelope, "envelope mode %q does not match session mode %q", env.Mode, s.Binding.Mode)}
	}
	if rec, ok := s.ExpireIfDue(nowMs); ok {
		return Outcome{Records: []Record{rec}, Err: coord.Errorf(coord.CodeSessionNotOpen, "session %s expired", s.ID)}
	}
	if s.Status != Open {
		return Outcome{Err: coord.Errorf(coord.CodeSessionNotOpen, "session %s is %s", s.ID, s.Status)}
	}
	resolved := false
	if env.MessageType == coord.TypeCommitment {
		c, err := s.checkCommitment(env, replaying)
		if err != nil {
			return Outcome{Err: err}
		}
		if err := s.modeCall(env, c); err != nil {
			return Outcome{Err: coord.AsError(err)}
		}
		s.Resolution = c
		resolved = true
	} else if err := s.modeCall(env, nil); err != nil {
		return Outcome{Err: coord.AsError(err)}
	}
	s.Seq++
	s.seen[env.MessageId] = struct{}{}
	s.touch(env.Sender, nowMs)
	s.trackImplicit(nowMs)
	if resolved {
		s.Status = Resolved
		s.ClosedAtMs = nowMs
	}
	if replaying {
		return Outcome{Resolved: resolved}
	}
	rec := Record{SessionID: s.ID, Seq: s.Seq, Kind: KindMessage, AcceptedAtMs: nowMs, Envelope: boundEnvelope(env), Status: s.Status}
	if resolved {
		rec.Final = s.Metadata()
	}
	return Outcome{Records: []Record{rec}, Resolved: resolved}
}

// modeCall offers env to the mode state: Commit with c when c is not nil,
// else Step. The message lives in s.msg for the call only.
func (s *Session) modeCall(env *macpv1.Envelope, c *macpv1.CommitmentPayload) error {
	s.msg = mode.Message{Type: env.MessageType, ID: env.MessageId, Sender: env.Sender, Payload: env.Payload}
	var err error
	if c != nil {
		err = s.modeState.Commit(&s.Binding, &s.msg, c)
	} else {
		err = s.modeState.Step(&s.Binding, &s.msg)
	}
	s.msg = mode.Message{}
	return err
}

// outcomeSuffixes maps Commitment action suffixes to the outcome they imply
// (checklist MODE-5).
var (
	positiveSuffixes = []string{".selected", ".accepted", ".completed", ".approved", ".converged"}
	negativeSuffixes = []string{".rejected", ".failed", ".declined"}
)

func (s *Session) checkCommitment(env *macpv1.Envelope, replaying bool) (*macpv1.CommitmentPayload, *coord.Error) {
	b := &s.Binding
	if !b.Policy.MayCommit(env.Sender, b.Initiator, b.Participants) {
		return nil, coord.Errorf(coord.CodeForbidden, "%s may not commit this session", env.Sender)
	}
	var c macpv1.CommitmentPayload
	if err := proto.Unmarshal(env.Payload, &c); err != nil {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "payload is not a CommitmentPayload")
	}
	switch {
	case c.CommitmentId == "":
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "commitment_id is required")
	case c.Action == "":
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "action is required")
	case c.AuthorityScope == "":
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "authority_scope is required")
	case c.Reason == "":
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "reason is required")
	case c.ModeVersion != b.ModeVersion:
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "commitment mode_version %q does not match the session's %q", c.ModeVersion, b.ModeVersion)
	case c.ConfigurationVersion != b.ConfigurationVersion:
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "commitment configuration_version %q does not match the session's %q", c.ConfigurationVersion, b.ConfigurationVersion)
	case c.PolicyVersion != "" && c.PolicyVersion != b.PolicyVersion:
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "commitment policy_version %q does not match the session's %q", c.PolicyVersion, b.PolicyVersion)
	}
	// supersedes (macp-proto 0.1.3) was an unknown field before; stored
	// April histories replay as they were decided.
	if ref := c.Supersedes; ref != nil && (!replaying || s.Latest()) {
		if err := cmthash.ValidateRef(ref, s.Binding.Profile); err != nil {
			return nil, err
		}
	}
	for _, suf := range positiveSuffixes {
		if strings.HasSuffix(c.Action, suf) && !c.OutcomePositive {
			return nil, coord.Errorf(coord.CodeInvalidEnvelope, "action %q needs outcome_positive=true", c.Action)
		}
	}
	for _, suf := range negativeSuffixes {
		if strings.HasSuffix(c.Action, suf) && c.OutcomePositive {
			return nil, coord.Errorf(coord.CodeInvalidEnvelope, "action %q needs outcome_positive=false", c.Action)
		}
	}
	return &c, nil
}

// CancelEnvelope builds the runtime-emitted SessionCancel envelope.
func (s *Session) CancelEnvelope(messageID, cancelledBy, reason string, nowMs int64) *macpv1.Envelope {
	return s.ControlEnvelope(coord.TypeSessionCancel, messageID, &macpv1.SessionCancelPayload{Reason: reason, CancelledBy: cancelledBy}, nowMs)
}

// Cancel ends an OPEN or SUSPENDED session on behalf of caller
// (RFC-MACP-0001 §7.3; checklist CANCEL-1..4): EXPIRED under
// coord.ProfileApril, CANCELLED under coord.ProfileLatest. Only the
// initiator may cancel. The returned Outcome carries the runtime-emitted
// SessionCancel record; cancelling a session that is already terminal is
// idempotent (no records, no error). messageID must be unique within the
// session; the shell generates it.
func (s *Session) Cancel(caller, reason, messageID string, nowMs int64) Outcome {
	if caller != s.Binding.Initiator {
		return Outcome{Err: coord.Errorf(coord.CodeForbidden, "only the initiator may cancel session %s", s.ID)}
	}
	if rec, ok := s.ExpireIfDue(nowMs); ok {
		return Outcome{Records: []Record{rec}}
	}
	if s.Status.Terminal() {
		return Outcome{}
	}
	if _, dup := s.seen[messageID]; dup || messageID == "" {
		return Outcome{Err: coord.Errorf(coord.CodeInternalError, "cancel message id is not unique")}
	}
	env := s.CancelEnvelope(messageID, caller, reason, nowMs)
	return s.applyCancel(env, nowMs)
}

func (s *Session) applyCancel(env *macpv1.Envelope, nowMs int64) Outcome {
	var p macpv1.SessionCancelPayload
	_ = proto.Unmarshal(env.Payload, &p)
	s.Seq++
	s.seen[env.MessageId] = struct{}{}
	s.endSuspension(nowMs)
	s.Status = Expired
	if s.Latest() {
		s.Status = Cancelled
	}
	s.ClosedAtMs = nowMs
	s.Cancellation = &p
	return Outcome{Records: []Record{{SessionID: s.ID, Seq: s.Seq, Kind: KindCancel, AcceptedAtMs: nowMs, Envelope: env, Status: s.Status, Final: s.Metadata()}}}
}

// ExpireIfDue expires an OPEN session whose deadline has passed, or a
// SUSPENDED session whose cumulative suspended time exceeds its cap, and
// returns the Expire record (RFC-MACP-0001 §7.1 TTL, §7.5 MAX_SUSPEND_MS).
func (s *Session) ExpireIfDue(nowMs int64) (Record, bool) {
	due, ok := s.ExpiryMs()
	if !ok || nowMs < due {
		return Record{}, false
	}
	return s.expire(nowMs), true
}

// ExpiryMs is the earliest time at which the session expires unless a
// message changes it first: the deadline while OPEN, the first instant the
// suspension cap is exceeded while SUSPENDED. ok is false once terminal.
// The shell arms its timer for it.
func (s *Session) ExpiryMs() (int64, bool) {
	switch s.Status {
	case Open:
		return s.DeadlineMs, true
	case Suspended:
		left := s.MaxSuspendMs - s.SuspendedTotalMs
		if left < 0 {
			left = 0
		}
		if s.SuspendedAtMs > math.MaxInt64-left-1 {
			return math.MaxInt64, true
		}
		return s.SuspendedAtMs + left + 1, true
	}
	return 0, false
}

// endSuspension closes the current suspension (if any) at nowMs.
func (s *Session) endSuspension(nowMs int64) {
	if s.Status == Suspended {
		s.SuspendedTotalMs += max(0, nowMs-s.SuspendedAtMs)
		s.SuspendedAtMs = 0
	}
}

func (s *Session) expire(nowMs int64) Record {
	s.Seq++
	s.endSuspension(nowMs)
	s.Status = Expired
	s.ClosedAtMs = nowMs
	return Record{SessionID: s.ID, Seq: s.Seq, Kind: KindExpire, AcceptedAtMs: nowMs, Status: Expired, Final: s.Metadata()}
}

// Apply replays one stored record (sequence Seq+1) into the session,
// re-deciding it with the recorded time. It returns an error when the
// record does not follow, or when the core would not accept it now: the
// history and this code disagree (divergence). After an error the session
// must be discarded.
func (s *Session) Apply(rec Record, lim Limits) error {
	if rec.Seq != s.Seq+1 {
		return coord.Errorf(coord.CodeInternalError, "record %d does not follow %d", rec.Seq, s.Seq)
	}
	if rec.SessionID != s.ID {
		return diverged(rec, "record is filed under session %q, not %q", rec.SessionID, s.ID)
	}
	switch rec.Kind {
	case KindMessage:
		before := s.Seq
		out := s.step(rec.Envelope, rec.AcceptedAtMs, replayLimits(lim), true)
		if !out.Accepted() || s.Seq != before+1 {
			return diverged(rec, "%v", out.Err)
		}
	case KindCancel:
		// Re-decide the cancellation the record claims, with Cancel's own
		// rules (authority, OPEN, deadline, unique message id).
		env := rec.Envelope
		if env == nil || env.MessageType != coord.TypeSessionCancel || env.Sender != coord.RuntimeSender ||
			env.SessionId != s.ID || env.Mode != s.Binding.Mode || env.MacpVersion != coord.ProtocolVersion {
			return diverged(rec, "not a runtime SessionCancel envelope for this session")
		}
		var p macpv1.SessionCancelPayload
		if err := proto.Unmarshal(env.Payload, &p); err != nil {
			return diverged(rec, "payload is not a SessionCancelPayload")
		}
		out := s.Cancel(p.CancelledBy, p.Reason, env.MessageId, rec.AcceptedAtMs)
		if out.Err != nil || len(out.Records) != 1 || out.Records[0].Kind != KindCancel {
			return diverged(rec, "the cancellation would not be accepted: %v", out.Err)
		}
	case KindSuspend, KindResume:
		if err := s.applyControl(rec); err != nil {
			return err
		}
	case KindImplicit:
		if err := s.applyImplicit(rec); err != nil {
			return err
		}
	case KindExpire:
		if rec.Envelope != nil {
			return diverged(rec, "an expire record carries no envelope")
		}
		if _, ok := s.ExpireIfDue(rec.AcceptedAtMs); !ok {
			return diverged(rec, "the session is %s with deadline %d", s.Status, s.DeadlineMs)
		}
	default:
		return coord.Errorf(coord.CodeInternalError, "unexpected %s record at %d", rec.Kind, rec.Seq)
	}
	if rec.Status != 0 && rec.Status != s.Status {
		return diverged(rec, "the record says the session became %s, replay says %s", rec.Status, s.Status)
	}
	return nil
}

// replayLimits drops the limits that are deployment settings rather than
// protocol rules: a payload accepted under an older, larger limit stays
// valid history.
func replayLimits(lim Limits) Limits {
	lim.MaxPayloadBytes = 0
	return lim
}

// ModeState exposes the mode state's projection (RFC-MACP-0003 replay
// checks, conformance expected_mode_state).
func (s *Session) ModeProjection() map[string]any { return s.modeState.Project() }

// Seen reports whether message_id was accepted in this session.
func (s *Session) Seen(messageID string) bool {
	_, ok := s.seen[messageID]
	return ok
}

// SeenIDs returns the dedup set, sorted.
func (s *Session) SeenIDs() []string {
	out := make([]string, 0, len(s.seen))
	for id := range s.seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Activity returns participant activity sorted by participant id. The
// runtime's own emitted envelopes are not participant activity.
func (s *Session) Activity() []Activity {
	out := make([]Activity, 0, len(s.activity))
	for _, a := range s.activity {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Activity) int { return strings.Compare(a.ParticipantID, b.ParticipantID) })
	return out
}

// Metadata renders the session as macp.v1.SessionMetadata (checklist OBS-1).
func (s *Session) Metadata() *macpv1.SessionMetadata {
	md := &macpv1.SessionMetadata{
		SessionId:            s.ID,
		Mode:                 s.Binding.Mode,
		State:                s.Status.Proto(),
		StartedAtUnixMs:      s.StartedAtMs,
		ExpiresAtUnixMs:      s.DeadlineMs,
		ModeVersion:          s.Binding.ModeVersion,
		ConfigurationVersion: s.Binding.ConfigurationVersion,
		PolicyVersion:        s.Binding.PolicyVersion,
		Participants:         slices.Clone(s.Binding.Participants),
		Initiator:            s.Binding.Initiator,
		ContextId:            s.ContextID,
		ExtensionKeys:        slices.Clone(s.ExtensionKeys),
	}
	for _, a := range s.Activity() {
		md.ParticipantActivity = append(md.ParticipantActivity, &macpv1.ParticipantActivity{
			ParticipantId:       a.ParticipantID,
			LastMessageAtUnixMs: a.LastMessageMs,
			MessageCount:        a.MessageCount,
		})
	}
	return md
}

// MayObserve reports whether id may read this session (GetSession,
// subscribe): its initiator and declared participants. Observer identities
// are decided by the caller.
func (s *Session) MayObserve(id string) bool {
	return id == s.Binding.Initiator || s.Binding.IsParticipant(id)
}
