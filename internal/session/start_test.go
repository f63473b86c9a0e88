package session_test

// SessionStart admission and binding (RFC-MACP-0001 §7.1, §7.4; RFC-MACP-0003
// §2-3; checklist START-1..12, TTL-1, TTL-4).

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// checklist START-2: "lowercase canonical UUID v4/v7 or ≥22 chars of
// [A-Za-z0-9_-] (ULIDs pass, uppercase UUIDs fail; [RT] rejects any 36-char
// hyphenated non-v4/v7 string)" -> INVALID_SESSION_ID.
func TestStartSessionIDPolicy(t *testing.T) {
	cases := []struct {
		id string
		ok bool
	}{
		{"3f2b8c1e-9a4d-4f6b-8c2e-1d5a7b9c0e3f", true},  // v4
		{"01890a5d-ac96-774b-bcce-b302099a8057", true},  // v7
		{"01890a5d-ac96-774b-9cce-b302099a8057", true},  // v7, variant 9
		{"01890a5d-ac96-774b-acce-b302099a8057", true},  // v7, variant a
		{"6ba7b810-9dad-11d1-80b4-00c04fd430c8", false}, // v1
		{"6ba7b810-9dad-31d1-80b4-00c04fd430c8", false}, // v3
		{"6ba7b810-9dad-51d1-80b4-00c04fd430c8", false}, // v5
		{"3F2B8C1E-9A4D-4F6B-8C2E-1D5A7B9C0E3F", false}, // uppercase v4
		{"3f2b8c1e-9a4d-4f6b-8c2E-1d5a7b9c0e3f", false}, // one uppercase digit
		{"3f2b8c1e-9a4d-4f6b-0c2e-1d5a7b9c0e3f", false}, // wrong variant
		{"3f2b8c1e-9a4d-4f6b-cc2e-1d5a7b9c0e3f", false}, // wrong variant (c)
		{"zzzzzzzz-zzzz-4zzz-8zzz-zzzzzzzzzzzz", false}, // 36-char hyphenated non-UUID
		{"00000000-0000-0000-0000-000000000000", false}, // nil UUID
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV", true},            // ULID (26)
		{strings.Repeat("A", 22), true},                 // exactly 22 base64url
		{"abc_DEF-123_456-789_xyz", true},               // 23 with _ and -
		{strings.Repeat("A", 21), false},                // 21: too short
		{strings.Repeat("a", 128), true},                // upper bound
		{strings.Repeat("a", 129), false},               // too long
		{strings.Repeat("a", 21) + "+", false},          // '+' is not base64url
		{strings.Repeat("a", 21) + "=", false},          // padding
		{strings.Repeat("a", 21) + ".", false},
		{strings.Repeat("a", 21) + "é", false}, // non-ASCII
		{"session 1 with spaces okay", false},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			e := startEnv(t, startPayload())
			e.SessionId = tc.id
			_, rec, err := session.Start(e, t0, deps())
			if tc.ok {
				if err != nil {
					t.Fatalf("START-2: %q rejected: %v", tc.id, err)
				}
				if rec.SessionID != tc.id {
					t.Fatalf("record session id %q", rec.SessionID)
				}
				return
			}
			wantCode(t, err, coord.CodeInvalidSessionID)
		})
	}
}

// RFC-MACP-0001 §7.1: a valid SessionStart has non-empty session_id, mode and
// sender and a SessionStartPayload (START-1); structural checks come first.
func TestStartEnvelopeShape(t *testing.T) {
	run := func(name string, mod func(e *macpv1.Envelope), code coord.Code) {
		t.Run(name, func(t *testing.T) {
			e := startEnv(t, startPayload())
			mod(e)
			_, _, err := session.Start(e, t0, deps())
			wantCode(t, err, code)
		})
	}
	run("empty session_id", func(e *macpv1.Envelope) { e.SessionId = "" }, coord.CodeInvalidEnvelope)
	run("empty mode", func(e *macpv1.Envelope) { e.Mode = "" }, coord.CodeInvalidEnvelope)
	run("empty sender", func(e *macpv1.Envelope) { e.Sender = "" }, coord.CodeInvalidEnvelope)
	run("bad version", func(e *macpv1.Envelope) { e.MacpVersion = "2.0" }, coord.CodeUnsupportedProtocolVersion)
	run("payload too large", func(e *macpv1.Envelope) {
		e.Payload = append(e.Payload, make([]byte, session.DefaultLimits().MaxPayloadBytes)...)
	}, coord.CodePayloadTooLarge)
	run("not a SessionStart", func(e *macpv1.Envelope) { e.MessageType = typeNote }, coord.CodeInvalidEnvelope)
	// START-1: "payload SessionStartPayload (empty/undecodable → INVALID_ENVELOPE)".
	run("empty payload", func(e *macpv1.Envelope) { e.Payload = nil }, coord.CodeInvalidEnvelope)
	run("undecodable payload", func(e *macpv1.Envelope) { e.Payload = []byte{0xff, 0xff, 0xff, 0xff} }, coord.CodeInvalidEnvelope)
	run("truncated payload", func(e *macpv1.Envelope) { e.Payload = e.Payload[:len(e.Payload)-1] }, coord.CodeInvalidEnvelope)
	// START-3: "Unknown mode → MODE_NOT_SUPPORTED".
	run("unknown mode", func(e *macpv1.Envelope) { e.Mode = "macp.mode.nope.v1" }, coord.CodeModeNotSupported)
	// The session id is checked before the mode (an invalid id is never looked up).
	run("invalid id before unknown mode", func(e *macpv1.Envelope) {
		e.SessionId, e.Mode = "short", "macp.mode.nope.v1"
	}, coord.CodeInvalidSessionID)
}

// RFC-MACP-0001 §7.1 "A valid SessionStart ... MUST bind mode_version,
// configuration_version, ttl_ms (MUST be greater than zero), participants";
// checklist START-3..6, C11.
func TestStartPayloadRules(t *testing.T) {
	maxTTL := session.DefaultLimits().MaxTTLMs
	manyIDs := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("agent-%04d", i)
		}
		return out
	}
	cases := []struct {
		name string
		cite string
		mod  func(p *macpv1.SessionStartPayload)
		want coord.Code
	}{
		{"valid", "RFC-MACP-0001 §7.1", func(p *macpv1.SessionStartPayload) {}, ""},
		{"wrong mode_version", "checklist START-3, C11: unsupported mode_version -> MODE_NOT_SUPPORTED",
			func(p *macpv1.SessionStartPayload) { p.ModeVersion = "2.0.0" }, coord.CodeModeNotSupported},
		{"prefix mode_version", "checklist START-3: exact version match",
			func(p *macpv1.SessionStartPayload) { p.ModeVersion = "1.0" }, coord.CodeModeNotSupported},
		{"missing mode_version", "checklist START-4: mode_version non-empty",
			func(p *macpv1.SessionStartPayload) { p.ModeVersion = "" }, coord.CodeInvalidEnvelope},
		{"missing configuration_version", "checklist START-4: configuration_version non-empty",
			func(p *macpv1.SessionStartPayload) { p.ConfigurationVersion = "" }, coord.CodeInvalidEnvelope},
		{"ttl 0", "RFC-MACP-0001 §7.1: ttl_ms MUST be greater than zero; START-5",
			func(p *macpv1.SessionStartPayload) { p.TtlMs = 0 }, coord.CodeInvalidEnvelope},
		{"ttl negative", "RFC-MACP-0001 §7.1; START-5",
			func(p *macpv1.SessionStartPayload) { p.TtlMs = -1 }, coord.CodeInvalidEnvelope},
		{"ttl min int64", "RFC-MACP-0001 §7.1; START-5",
			func(p *macpv1.SessionStartPayload) { p.TtlMs = math.MinInt64 }, coord.CodeInvalidEnvelope},
		{"ttl exactly 1", "RFC-MACP-0001 §7.1: > 0",
			func(p *macpv1.SessionStartPayload) { p.TtlMs = 1 }, ""},
		{"ttl exactly 24h", "checklist START-5: cap 86,400,000 ms",
			func(p *macpv1.SessionStartPayload) { p.TtlMs = maxTTL }, ""},
		{"ttl 24h + 1", "checklist START-5: cap 86,400,000 ms",
			func(p *macpv1.SessionStartPayload) { p.TtlMs = maxTTL + 1 }, coord.CodeInvalidEnvelope},
		{"ttl max int64", "checklist START-5",
			func(p *macpv1.SessionStartPayload) { p.TtlMs = math.MaxInt64 }, coord.CodeInvalidEnvelope},
		{"blank participant", "checklist START-6: none blank",
			func(p *macpv1.SessionStartPayload) { p.Participants = []string{alice, ""} }, coord.CodeInvalidEnvelope},
		{"whitespace participant", "checklist START-6: none blank",
			func(p *macpv1.SessionStartPayload) { p.Participants = []string{" \t", alice} }, coord.CodeInvalidEnvelope},
		{"duplicate participant", "checklist START-6: no duplicates",
			func(p *macpv1.SessionStartPayload) { p.Participants = []string{alice, bob, alice} }, coord.CodeInvalidEnvelope},
		{"1000 participants", "checklist START-6: ≤1000",
			func(p *macpv1.SessionStartPayload) { p.Participants = manyIDs(1000) }, ""},
		{"1001 participants", "checklist START-6: ≤1000",
			func(p *macpv1.SessionStartPayload) { p.Participants = manyIDs(1001) }, coord.CodeInvalidEnvelope},
		{"no participants (mode rule)", "checklist START-4, START-12 mode start hook",
			func(p *macpv1.SessionStartPayload) { p.Participants = nil }, coord.CodeInvalidEnvelope},
		{"root without uri", "checklist START-4 roots",
			func(p *macpv1.SessionStartPayload) { p.Roots = []*macpv1.Root{{Uri: "file:///a"}, {Name: "nameless"}} }, coord.CodeInvalidEnvelope},
		{"roots ok", "checklist START-4 roots",
			func(p *macpv1.SessionStartPayload) { p.Roots = []*macpv1.Root{{Uri: "file:///a", Name: "a"}} }, ""},
		{"unknown policy", "checklist START-9, POL-20: UNKNOWN_POLICY_VERSION",
			func(p *macpv1.SessionStartPayload) { p.PolicyVersion = "policy.nope" }, coord.CodeUnknownPolicyVersion},
		{"policy for another mode", "checklist ERR-16: SessionStart whose policy targets another mode",
			func(p *macpv1.SessionStartPayload) { p.PolicyVersion = policyOther }, coord.CodeInvalidPolicyDefinition},
		{"malformed registered policy", "checklist ERR-16: bad policy JSON",
			func(p *macpv1.SessionStartPayload) { p.PolicyVersion = policyBadRules }, coord.CodeInvalidPolicyDefinition},
		{"policy for this mode", "checklist START-9",
			func(p *macpv1.SessionStartPayload) { p.PolicyVersion = policyAny }, ""},
		{"wildcard policy", "checklist START-9",
			func(p *macpv1.SessionStartPayload) { p.PolicyVersion = policyStrict }, ""},
		{"explicit policy.default", "RFC-MACP-0012 §4",
			func(p *macpv1.SessionStartPayload) { p.PolicyVersion = coord.DefaultPolicyID }, ""},
		{"unknown extension keys never rejected", "RFC-MACP-0001 §7.4.2 forward compatibility (MUST)",
			func(p *macpv1.SessionStartPayload) {
				p.Extensions = map[string][]byte{"zz.unknown.v9": {0xff, 0x00}, "": nil}
			}, ""},
		{"odd context_id never rejected", "RFC-MACP-0001 §7.4.1: MUST NOT interpret or validate",
			func(p *macpv1.SessionStartPayload) { p.ContextId = "\x00 not a uri ✓ %%% ../.." }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startPayload()
			tc.mod(p)
			s, rec, err := session.Start(startEnv(t, p), t0, deps())
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%s: Start = %v, want ok", tc.cite, err)
				}
				if s == nil || rec.Seq != 1 {
					t.Fatalf("%s: no session/record", tc.cite)
				}
				return
			}
			if s != nil {
				t.Fatalf("%s: rejected Start returned a session", tc.cite)
			}
			wantCode(t, err, tc.want)
		})
	}
}

// RFC-MACP-0003 §2 "the session's absolute expiration deadline is computed as
// SessionStart_envelope.timestamp_unix_ms + SessionStartPayload.ttl_ms";
// checklist TTL-1 ("[RT]: accept time if timestamp ≤ 0"), TTL-4
// (expires_at = deadline, started_at = accept time).
func TestStartDeadline(t *testing.T) {
	skew := session.DefaultLimits().MaxStartSkewMs
	cases := []struct {
		name     string
		ts       int64
		wantDL   int64
		wantCode coord.Code
	}{
		{"timestamp = now", t0, t0 + defaultTTL, ""},
		{"timestamp earlier", t0 - 1234, t0 - 1234 + defaultTTL, ""},
		{"timestamp later", t0 + 999, t0 + 999 + defaultTTL, ""},
		{"timestamp 0 -> now", 0, t0 + defaultTTL, ""},
		{"timestamp negative -> now", -5, t0 + defaultTTL, ""},
		{"skew exactly +max", t0 + skew, t0 + skew + defaultTTL, ""},
		{"skew exactly -max", t0 - skew, t0 - skew + defaultTTL, ""},
		// TTL-4 ⚠ "client timestamps can shift the deadline at will —
		// consider clamping": Limits.MaxStartSkewMs rejects far timestamps.
		{"skew +max+1", t0 + skew + 1, 0, coord.CodeInvalidEnvelope},
		{"skew -max-1", t0 - skew - 1, 0, coord.CodeInvalidEnvelope},
		{"far future", math.MaxInt64, 0, coord.CodeInvalidEnvelope},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t, startPayload())
			e.TimestampUnixMs = tc.ts
			s, rec, err := session.Start(e, t0, deps())
			if tc.wantCode != "" {
				wantCode(t, err, tc.wantCode)
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if s.DeadlineMs != tc.wantDL || rec.Start.DeadlineMs != tc.wantDL {
				t.Fatalf("deadline = %d / record %d, want %d", s.DeadlineMs, rec.Start.DeadlineMs, tc.wantDL)
			}
			md := s.Metadata()
			if md.ExpiresAtUnixMs != tc.wantDL || md.StartedAtUnixMs != t0 || s.StartedAtMs != t0 {
				t.Fatalf("metadata started=%d expires=%d, want %d / %d", md.StartedAtUnixMs, md.ExpiresAtUnixMs, t0, tc.wantDL)
			}
			// The envelope keeps the client's timestamp verbatim.
			if rec.Envelope.TimestampUnixMs != tc.ts {
				t.Fatalf("record timestamp %d, want %d", rec.Envelope.TimestampUnixMs, tc.ts)
			}
		})
	}
}

// Limits are inputs: MaxStartSkewMs 0 disables the skew check, MaxTTLMs 0
// the cap. The deadline must still never overflow int64 (a wrapped, negative
// deadline would expire the session on its first message).
func TestStartDeadlineNoOverflow(t *testing.T) {
	d := deps()
	d.Limits = session.Limits{} // every limit disabled
	for _, tc := range []struct{ ts, ttl int64 }{
		{math.MaxInt64, 1},
		{math.MaxInt64 - 10, 11},
		{t0, math.MaxInt64},
	} {
		p := startPayload()
		p.TtlMs = tc.ttl
		e := startEnv(t, p)
		e.TimestampUnixMs = tc.ts
		s, _, err := session.Start(e, t0, d)
		if err == nil {
			t.Fatalf("ts=%d ttl=%d accepted with deadline %d; want INVALID_ENVELOPE (deadline overflows int64)", tc.ts, tc.ttl, s.DeadlineMs)
		}
		wantCode(t, err, coord.CodeInvalidEnvelope)
	}
	// The largest representable deadline is fine.
	p := startPayload()
	p.TtlMs = 10
	e := startEnv(t, p)
	e.TimestampUnixMs = math.MaxInt64 - 10
	s, _, err := session.Start(e, t0, d)
	if err != nil || s.DeadlineMs != math.MaxInt64 {
		t.Fatalf("deadline at MaxInt64: %v %v", s, err)
	}
}

// RFC-MACP-0001 §7.1, §7.3 "The runtime MUST record the initiator in
// SessionMetadata.initiator"; checklist START-10 (bound versions, effective
// policy id, participants, roots, intent, context_id, extension keys),
// START-12 (sequence 1).
func TestStartBinding(t *testing.T) {
	p := startPayload()
	p.Roots = []*macpv1.Root{{Uri: "file:///repo", Name: "repo"}}
	p.ContextId = "ctx://opaque/42"
	p.Extensions = map[string][]byte{"x-tracing": []byte("t"), "aitp.v1": {1, 2, 3}, "ctxm.v1": {}}
	env := startEnv(t, p)
	env.Sender = "the-initiator"
	s, rec, err := session.Start(env, t0+7, deps())
	if err != nil {
		t.Fatal(err)
	}
	// START-12: SessionStart = history entry #1.
	if rec.Seq != 1 || s.Seq != 1 || rec.Kind != session.KindStart || rec.SessionID != sid || rec.AcceptedAtMs != t0+7 {
		t.Fatalf("start record = %+v", rec)
	}
	if rec.Start == nil || rec.Start.Policy != policy.Default() {
		t.Fatalf("START-9: record policy %+v, want policy.default descriptor", rec.Start)
	}
	if !proto.Equal(rec.Envelope, env) || rec.Envelope == env {
		t.Fatalf("record envelope must be an equal copy of the accepted envelope")
	}
	// The record is protected from later mutation of the request message.
	env.Sender, env.MessageId = "changed", "changed"
	if rec.Envelope.Sender != "the-initiator" || rec.Envelope.MessageId != "m-start" {
		t.Fatalf("record envelope aliases the request: %v", rec.Envelope)
	}
	if s.Status != session.Open || s.ClosedAtMs != 0 {
		t.Fatalf("new session status %s closed %d", s.Status, s.ClosedAtMs)
	}
	want := &macpv1.SessionMetadata{
		SessionId:            sid,
		Mode:                 testModeID,
		State:                macpv1.SessionState(session.Open),
		StartedAtUnixMs:      t0 + 7,
		ExpiresAtUnixMs:      t0 + defaultTTL,
		ModeVersion:          testModeVersion,
		ConfigurationVersion: testConfig,
		PolicyVersion:        coord.DefaultPolicyID, // START-4: empty -> policy.default
		Participants:         []string{alice, bob},
		Initiator:            "the-initiator", // START-10: = authenticated sender
		ContextId:            "ctx://opaque/42",
		ExtensionKeys:        []string{"aitp.v1", "ctxm.v1", "x-tracing"}, // sorted
		ParticipantActivity: []*macpv1.ParticipantActivity{
			{ParticipantId: "the-initiator", LastMessageAtUnixMs: t0 + 7, MessageCount: 1},
		},
	}
	if got := s.Metadata(); !proto.Equal(got, want) {
		t.Fatalf("metadata\n got  %v\n want %v", got, want)
	}
	if s.Intent != p.Intent || s.ContextID != p.ContextId || len(s.Roots) != 1 || s.Roots[0].Uri != "file:///repo" {
		t.Fatalf("intent/context/roots not bound: %q %q %v", s.Intent, s.ContextID, s.Roots)
	}
	if !slices.IsSorted(s.ExtensionKeys) {
		t.Fatalf("extension keys unsorted: %v", s.ExtensionKeys)
	}
	// RFC-MACP-0001 §7.4.2 "The runtime MUST preserve all extension
	// entries": the values live in the history's SessionStart envelope.
	var back macpv1.SessionStartPayload
	if err := proto.Unmarshal(rec.Envelope.Payload, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Extensions) != 3 || string(back.Extensions["aitp.v1"]) != "\x01\x02\x03" || string(back.Extensions["x-tracing"]) != "t" {
		t.Fatalf("extensions not preserved: %v", back.Extensions)
	}
	b := s.Binding
	if b.Mode != testModeID || b.ModeVersion != testModeVersion || b.ConfigurationVersion != testConfig ||
		b.PolicyVersion != coord.DefaultPolicyID || b.Initiator != "the-initiator" || b.Policy == nil || b.SessionID != sid {
		t.Fatalf("binding %+v", b)
	}
	if !s.Seen("m-start") || !slices.Equal(s.SeenIDs(), []string{"m-start"}) {
		t.Fatalf("the SessionStart message_id must occupy a dedup slot: %v", s.SeenIDs())
	}
	// OBS-1 access: initiator and declared participants may observe.
	for id, want := range map[string]bool{"the-initiator": true, alice: true, bob: true, mallory: false} {
		if s.MayObserve(id) != want {
			t.Fatalf("MayObserve(%s) = %v", id, !want)
		}
	}
}

// The binding is a copy: mutating the participant list in Metadata or in
// the caller's payload does not change the session (START-10 "All immutable
// for the session").
func TestStartBindingImmutable(t *testing.T) {
	s, _ := mustStart(t)
	md := s.Metadata()
	md.Participants[0] = "evil"
	md.ExtensionKeys = append(md.ExtensionKeys, "evil")
	if s.Binding.Participants[0] != alice || s.Metadata().Participants[0] != alice {
		t.Fatalf("Metadata aliases the binding's participants")
	}
}

// Policy resolution binds the effective policy id (RFC-MACP-0012 §5) and
// its descriptor into the start record (RFC-MACP-0003 §3: replay never
// consults live registries).
func TestStartPolicyBinding(t *testing.T) {
	for _, id := range []string{policyAny, policyStrict, policyDesig} {
		p := startPayload()
		p.PolicyVersion = id
		s, rec := mustStartWith(t, p)
		if s.Binding.PolicyVersion != id || s.Metadata().PolicyVersion != id || rec.Start.Policy != policies()[id] {
			t.Fatalf("policy %s bound as %q / %+v", id, s.Binding.PolicyVersion, rec.Start.Policy)
		}
	}
}

// RFC-MACP-0001 §7.4.2 non-dependence rule (MUST): "A session with empty
// context_id and empty extensions MUST behave identically to one with both
// populated, from the perspective of core protocol mechanics."
func TestStartContextNonDependence(t *testing.T) {
	plain, _ := mustStart(t)
	p := startPayload()
	p.ContextId = "ctxm://abc"
	p.Extensions = map[string][]byte{"ctxm.v1": []byte("block"), "x-billing": []byte("acct-9")}
	rich, _ := mustStartWith(t, p)
	steps := []struct {
		env *macpv1.Envelope
		at  int64
	}{
		{commit(t, "c0", initiator, commitPayload()), t0 + 1}, // no notes yet
		{note("n1", alice), t0 + 2},
		{note("n1", alice), t0 + 3}, // duplicate
		{msg(typeBlock, "b1", bob, nil), t0 + 4},
		{note("n2", mallory), t0 + 5},
		{commit(t, "c1", alice, commitPayload()), t0 + 6},
		{commit(t, "c2", initiator, commitPayload()), t0 + 7},
		{note("n3", bob), t0 + 8},
	}
	for i, st := range steps {
		a := plain.Step(proto.Clone(st.env).(*macpv1.Envelope), st.at, session.DefaultLimits())
		b := rich.Step(proto.Clone(st.env).(*macpv1.Envelope), st.at, session.DefaultLimits())
		if a.Accepted() != b.Accepted() || a.Duplicate != b.Duplicate || a.Resolved != b.Resolved ||
			(a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Code != b.Err.Code) {
			t.Fatalf("step %d: plain %+v rich %+v", i, a, b)
		}
	}
	if plain.Status != rich.Status || plain.Seq != rich.Seq || !slices.Equal(plain.SeenIDs(), rich.SeenIDs()) {
		t.Fatalf("diverged: %s/%d vs %s/%d", plain.Status, plain.Seq, rich.Status, rich.Seq)
	}
}
