package session_test

// Shared fixtures for the session core tests: a tiny test-only coordination
// mode, a policy lookup, envelope builders and state snapshots.
//
// The test mode ("macp.mode.testing.v1", version 1.0.0) deliberately has
// the simplest rules that still exercise every hook the core calls:
//   - Start requires at least one declared participant (INVALID_ENVELOPE);
//   - "Note" is accepted from declared participants and the initiator, any
//     payload; anyone else is FORBIDDEN;
//   - "Block" is always rejected INVALID_ENVELOPE, as is any other type;
//   - Commit requires at least one accepted Note (INVALID_ENVELOPE) and, when
//     the bound policy has {"testing":{"min_notes":N}}, at least N Notes
//     (POLICY_DENIED).
// Its projection carries a running digest of every accepted message, so two
// states project equal only if they accepted the same messages in the same
// order.

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

const (
	testModeID      = "macp.mode.testing.v1"
	testModeVersion = "1.0.0"
	testConfig      = "cfg-1"

	typeNote  = "Note"
	typeBlock = "Block"

	// t0 is the runtime clock at SessionStart in most tests.
	t0 = int64(1_760_000_000_000)
	// defaultTTL is the ttl_ms of the standard fixture session.
	defaultTTL = int64(60_000)

	// Session ids: a lowercase UUID v4 (valid) and a second valid id.
	sid  = "3f2b8c1e-9a4d-4f6b-8c2e-1d5a7b9c0e3f"
	sid2 = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

	initiator = "coordinator"
	alice     = "alice"
	bob       = "bob"
	mallory   = "mallory" // never a participant

	policyAny      = "policy.testing.any"      // commitment.authority any_participant
	policyStrict   = "policy.testing.strict"   // testing.min_notes = 2
	policyOther    = "policy.other.mode"       // targets another mode
	policyDesig    = "policy.testing.desig"    // designated_role: carol
	policyBadRules = "policy.testing.badrules" // registered but malformed
)

// ---- test mode -------------------------------------------------------------

type testMode struct{ version string }

func (m testMode) Descriptor() *macpv1.ModeDescriptor {
	v := m.version
	if v == "" {
		v = testModeVersion
	}
	return &macpv1.ModeDescriptor{
		Mode:                 testModeID,
		ModeVersion:          v,
		Title:                "Testing",
		DeterminismClass:     "semantic-deterministic",
		ParticipantModel:     "declared",
		MessageTypes:         []string{coord.TypeSessionStart, typeNote, typeBlock, coord.TypeCommitment},
		TerminalMessageTypes: []string{coord.TypeCommitment},
	}
}

func (testMode) Start(b *mode.Binding) (mode.State, error) {
	if len(b.Participants) == 0 {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "the testing mode needs participants")
	}
	st := &testState{minNotes: 1, bySender: map[string]int{}, digest: fnvOffset}
	if raw := b.Policy.Section("testing"); raw != nil {
		var r struct {
			MinNotes int `json:"min_notes"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "testing: %v", err)
		}
		st.policyMin = r.MinNotes
	}
	return st, nil
}

type testState struct {
	minNotes  int
	policyMin int
	notes     int
	bySender  map[string]int
	digest    uint64
	committed string
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func (s *testState) mix(parts ...string) {
	h := s.digest
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			h ^= uint64(p[i])
			h *= fnvPrime
		}
		h ^= 0xff
		h *= fnvPrime
	}
	s.digest = h
}

func (s *testState) mixNote(m *mode.Message) {
	h := s.digest
	for _, p := range [...]string{m.ID, m.Sender} {
		for i := 0; i < len(p); i++ {
			h ^= uint64(p[i])
			h *= fnvPrime
		}
		h ^= 0xff
		h *= fnvPrime
	}
	for _, c := range m.Payload {
		h ^= uint64(c)
		h *= fnvPrime
	}
	s.digest = h
}

func (s *testState) Step(b *mode.Binding, m *mode.Message) error {
	switch m.Type {
	case typeNote:
		if m.Sender != b.Initiator && !b.IsParticipant(m.Sender) {
			return coord.Errorf(coord.CodeForbidden, "%s is not a participant", m.Sender)
		}
		s.notes++
		s.bySender[m.Sender]++
		s.mixNote(m)
		return nil
	case typeBlock:
		return coord.Errorf(coord.CodeInvalidEnvelope, "Block is always rejected")
	}
	return coord.Errorf(coord.CodeInvalidEnvelope, "unknown message type %q", m.Type)
}

func (s *testState) Commit(b *mode.Binding, m *mode.Message, c *macpv1.CommitmentPayload) error {
	if s.notes < s.minNotes {
		return coord.Errorf(coord.CodeInvalidEnvelope, "a Commitment needs at least %d Note", s.minNotes)
	}
	if s.notes < s.policyMin {
		return &coord.Error{Code: coord.CodePolicyDenied, Message: "not enough notes", Reasons: []string{"min_notes"}}
	}
	s.committed = c.Action
	s.mix(m.ID, m.Sender, c.Action)
	return nil
}

func (s *testState) Project() map[string]any {
	by := make(map[string]any, len(s.bySender))
	for k, v := range s.bySender {
		by[k] = v
	}
	return map[string]any{
		"notes":     s.notes,
		"by_sender": by,
		"digest":    strconv.FormatUint(s.digest, 16),
		"committed": s.committed,
	}
}

// ---- registries -------------------------------------------------------------

type testPolicies map[string]policy.Descriptor

func (p testPolicies) Policy(id string) (policy.Descriptor, bool) {
	d, ok := p[id]
	return d, ok
}

func policies() testPolicies {
	return testPolicies{
		coord.DefaultPolicyID: policy.Default(),
		policyAny: {ID: policyAny, Mode: testModeID, SchemaVersion: 1,
			Rules: `{"commitment":{"authority":"any_participant"}}`},
		policyStrict: {ID: policyStrict, Mode: "*", SchemaVersion: 1,
			Rules: `{"testing":{"min_notes":2}}`},
		policyOther: {ID: policyOther, Mode: "macp.mode.decision.v1", SchemaVersion: 1, Rules: `{}`},
		policyDesig: {ID: policyDesig, Mode: testModeID, SchemaVersion: 1,
			Rules: `{"commitment":{"authority":"designated_role","designated_roles":["carol"]}}`},
		policyBadRules: {ID: policyBadRules, Mode: testModeID, SchemaVersion: 1, Rules: `[1,2]`},
	}
}

func modes() *mode.Registry { return mode.NewRegistry(mode.Entry{Mode: testMode{}}) }

func deps() session.Deps {
	return session.Deps{Modes: modes(), Policies: policies(), Limits: session.DefaultLimits()}
}

// ---- envelope builders -------------------------------------------------------

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

func startPayload() *macpv1.SessionStartPayload {
	return &macpv1.SessionStartPayload{
		Intent:               "test the core",
		Participants:         []string{alice, bob},
		ModeVersion:          testModeVersion,
		ConfigurationVersion: testConfig,
		TtlMs:                defaultTTL,
	}
}

func startEnv(t testing.TB, p *macpv1.SessionStartPayload) *macpv1.Envelope {
	t.Helper()
	return &macpv1.Envelope{
		MacpVersion:     coord.ProtocolVersion,
		Mode:            testModeID,
		MessageType:     coord.TypeSessionStart,
		MessageId:       "m-start",
		SessionId:       sid,
		Sender:          initiator,
		TimestampUnixMs: t0,
		Payload:         marshal(t, p),
	}
}

// msg builds a session-scoped envelope for the fixture session.
func msg(typ, id, sender string, payload []byte) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion:     coord.ProtocolVersion,
		Mode:            testModeID,
		MessageType:     typ,
		MessageId:       id,
		SessionId:       sid,
		Sender:          sender,
		TimestampUnixMs: t0,
		Payload:         payload,
	}
}

func note(id, sender string) *macpv1.Envelope {
	return msg(typeNote, id, sender, []byte("note "+id))
}

func commitPayload() *macpv1.CommitmentPayload {
	return &macpv1.CommitmentPayload{
		CommitmentId:         "c-1",
		Action:               "testing.accepted",
		AuthorityScope:       "session",
		Reason:               "enough notes",
		ModeVersion:          testModeVersion,
		ConfigurationVersion: testConfig,
		OutcomePositive:      true,
	}
}

func commit(t testing.TB, id, sender string, c *macpv1.CommitmentPayload) *macpv1.Envelope {
	t.Helper()
	return msg(coord.TypeCommitment, id, sender, marshal(t, c))
}

// ---- session helpers ---------------------------------------------------------

// mustStart starts the fixture session (default policy) at t0.
func mustStart(t testing.TB) (*session.Session, session.Record) {
	t.Helper()
	return mustStartWith(t, startPayload())
}

func mustStartWith(t testing.TB, p *macpv1.SessionStartPayload) (*session.Session, session.Record) {
	t.Helper()
	s, rec, err := session.Start(startEnv(t, p), t0, deps())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s, rec
}

// mustAccept offers env and fails unless it is newly accepted.
func mustAccept(t testing.TB, s *session.Session, env *macpv1.Envelope, now int64) session.Record {
	t.Helper()
	out := s.Step(env, now, session.DefaultLimits())
	if !out.Accepted() || len(out.Records) != 1 {
		t.Fatalf("Step(%s %s from %s) = %+v (err %v), want accepted", env.MessageType, env.MessageId, env.Sender, out, out.Err)
	}
	return out.Records[0]
}

// wantStepErr offers env and checks it is rejected with code and, unless
// the deadline was crossed, changes nothing.
func wantStepErr(t testing.TB, s *session.Session, env *macpv1.Envelope, now int64, code coord.Code) session.Outcome {
	t.Helper()
	before := snap(s)
	out := s.Step(env, now, session.DefaultLimits())
	if out.Err == nil {
		t.Fatalf("Step(%s %s from %s) accepted (duplicate=%v), want %s", env.MessageType, env.MessageId, env.Sender, out.Duplicate, code)
	}
	if out.Err.Code != code {
		t.Fatalf("Step(%s %s from %s) = %v, want %s", env.MessageType, env.MessageId, env.Sender, out.Err, code)
	}
	if out.Duplicate || out.Resolved {
		t.Fatalf("rejected outcome has duplicate=%v resolved=%v", out.Duplicate, out.Resolved)
	}
	if len(out.Records) == 0 {
		if d := before.diff(snap(s)); d != "" {
			t.Fatalf("rejected Step(%s %s) changed the session: %s", env.MessageType, env.MessageId, d)
		}
	}
	return out
}

func wantCode(t testing.TB, err error, code coord.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %s", code)
	}
	if got := coord.CodeOf(err); got != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

// ---- snapshots -----------------------------------------------------------------

// state is everything observable about a session, for before/after and
// live/replay comparisons.
type state struct {
	md           *macpv1.SessionMetadata
	status       session.Status
	seq          uint64
	seen         []string
	proj         map[string]any
	resolution   *macpv1.CommitmentPayload
	cancellation *macpv1.SessionCancelPayload
	closedAt     int64
	deadline     int64
	activity     []session.Activity
}

func (st state) seenID(id string) bool {
	for _, x := range st.seen {
		if x == id {
			return true
		}
	}
	return false
}

func snap(s *session.Session) state {
	return state{
		md:           s.Metadata(),
		status:       s.Status,
		seq:          s.Seq,
		seen:         s.SeenIDs(),
		proj:         s.ModeProjection(),
		resolution:   clone(s.Resolution),
		cancellation: clone(s.Cancellation),
		closedAt:     s.ClosedAtMs,
		deadline:     s.DeadlineMs,
		activity:     s.Activity(),
	}
}

// clone deep-copies a message, keeping nil as nil.
func clone[M proto.Message](m M) M {
	var zero M
	if reflect.ValueOf(m).IsNil() {
		return zero
	}
	return proto.Clone(m).(M)
}

// diff returns "" when a and b are equal, else a description.
func (a state) diff(b state) string {
	var out []string
	if !proto.Equal(a.md, b.md) {
		out = append(out, fmt.Sprintf("metadata %v != %v", a.md, b.md))
	}
	if a.status != b.status {
		out = append(out, fmt.Sprintf("status %s != %s", a.status, b.status))
	}
	if a.seq != b.seq {
		out = append(out, fmt.Sprintf("seq %d != %d", a.seq, b.seq))
	}
	if !slices.Equal(a.seen, b.seen) {
		out = append(out, fmt.Sprintf("seen %v != %v", a.seen, b.seen))
	}
	if !reflect.DeepEqual(a.proj, b.proj) {
		out = append(out, fmt.Sprintf("projection %v != %v", a.proj, b.proj))
	}
	if !proto.Equal(a.resolution, b.resolution) || (a.resolution == nil) != (b.resolution == nil) {
		out = append(out, fmt.Sprintf("resolution %v != %v", a.resolution, b.resolution))
	}
	if !proto.Equal(a.cancellation, b.cancellation) || (a.cancellation == nil) != (b.cancellation == nil) {
		out = append(out, fmt.Sprintf("cancellation %v != %v", a.cancellation, b.cancellation))
	}
	if a.closedAt != b.closedAt {
		out = append(out, fmt.Sprintf("closedAt %d != %d", a.closedAt, b.closedAt))
	}
	if a.deadline != b.deadline {
		out = append(out, fmt.Sprintf("deadline %d != %d", a.deadline, b.deadline))
	}
	if !slices.Equal(a.activity, b.activity) {
		out = append(out, fmt.Sprintf("activity %v != %v", a.activity, b.activity))
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}

// replay rebuilds a session from records with Restore + Apply.
func replay(t testing.TB, recs []session.Record) (*session.Session, error) {
	t.Helper()
	if len(recs) == 0 {
		t.Fatalf("replay of an empty history")
	}
	s, err := session.Restore(recs[0], modes())
	if err != nil {
		return nil, err
	}
	for _, r := range recs[1:] {
		if err := s.Apply(r, session.DefaultLimits()); err != nil {
			return s, err
		}
	}
	return s, nil
}
