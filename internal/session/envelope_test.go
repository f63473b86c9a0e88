package session_test

// Envelope structure: CheckEnvelope and CheckAmbient
// (RFC-MACP-0001 §6; checklist ADM-1, ADM-3, ADM-11, ADM-12, SIG-1, SIG-5).

import (
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

func validSessionEnv() *macpv1.Envelope { return note("m-1", alice) }

func validSignalEnv(t *testing.T) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion,
		MessageType: coord.TypeSignal,
		MessageId:   "sig-1",
		Sender:      alice,
		Payload:     marshal(t, &macpv1.SignalPayload{SignalType: "heartbeat"}),
	}
}

func TestCheckEnvelope(t *testing.T) {
	lim := session.DefaultLimits()
	cases := []struct {
		name string
		// cite is the spec sentence the case proves.
		cite string
		mod  func(e *macpv1.Envelope)
		want coord.Code // "" = valid
	}{
		{"valid session-scoped", "RFC-MACP-0001 §6", func(e *macpv1.Envelope) {}, ""},
		{"empty payload ok", "RFC-MACP-0001 §6: payload may be empty at the structural level",
			func(e *macpv1.Envelope) { e.Payload = nil }, ""},
		{"empty sender is the shell's concern", "CheckEnvelope doc: the sender is not checked here",
			func(e *macpv1.Envelope) { e.Sender = "" }, ""},
		// ADM-11 / INIT-4: every Envelope.macp_version MUST equal the selected version.
		{"empty version", "checklist ADM-11, INIT-4", func(e *macpv1.Envelope) { e.MacpVersion = "" }, coord.CodeUnsupportedProtocolVersion},
		{"other version", "checklist ADM-11, INIT-4", func(e *macpv1.Envelope) { e.MacpVersion = "2.0" }, coord.CodeUnsupportedProtocolVersion},
		{"near version", "checklist ADM-11: exact match only", func(e *macpv1.Envelope) { e.MacpVersion = "1.0.0" }, coord.CodeUnsupportedProtocolVersion},
		// RFC-MACP-0001 §6: "message_type MUST be non-empty".
		{"empty message_type", "RFC-MACP-0001 §6; ADM-1", func(e *macpv1.Envelope) { e.MessageType = "" }, coord.CodeInvalidEnvelope},
		// RFC-MACP-0001 §6: "message_id MUST be non-empty".
		{"empty message_id", "RFC-MACP-0001 §6; ADM-1", func(e *macpv1.Envelope) { e.MessageId = "" }, coord.CodeInvalidEnvelope},
		{"message_id 256 bytes ok", "implementation bound", func(e *macpv1.Envelope) { e.MessageId = strings.Repeat("a", 256) }, ""},
		{"message_id 257 bytes", "implementation bound", func(e *macpv1.Envelope) { e.MessageId = strings.Repeat("a", 257) }, coord.CodeInvalidEnvelope},
		// RFC-MACP-0001 §6: session_id and mode "non-empty for session-scoped messages".
		{"session-scoped without session_id", "RFC-MACP-0001 §6; ADM-1", func(e *macpv1.Envelope) { e.SessionId = "" }, coord.CodeInvalidEnvelope},
		{"session-scoped without mode", "RFC-MACP-0001 §6; ADM-1", func(e *macpv1.Envelope) { e.Mode = "" }, coord.CodeInvalidEnvelope},
		{"session-scoped without both", "RFC-MACP-0001 §6; ADM-1",
			func(e *macpv1.Envelope) { e.Mode, e.SessionId = "", "" }, coord.CodeInvalidEnvelope},
		// ADM-3: payload size limit -> PAYLOAD_TOO_LARGE.
		{"payload at limit", "checklist ADM-3", func(e *macpv1.Envelope) { e.Payload = make([]byte, lim.MaxPayloadBytes) }, ""},
		{"payload over limit", "checklist ADM-3", func(e *macpv1.Envelope) { e.Payload = make([]byte, lim.MaxPayloadBytes+1) }, coord.CodePayloadTooLarge},
		// A session-scoped Progress (checklist SIG-6: [RT] accepts ambient or session-scoped Progress).
		{"session-scoped Progress is structurally fine", "checklist SIG-6",
			func(e *macpv1.Envelope) { e.MessageType = coord.TypeProgress }, ""},
		// Ambient Progress: both empty.
		{"ambient Progress", "checklist SIG-6", func(e *macpv1.Envelope) {
			e.MessageType, e.Mode, e.SessionId = coord.TypeProgress, "", ""
		}, ""},
		{"ambient Progress with mode only", "RFC-MACP-0001 §6: mode MUST be empty for ambient messages", func(e *macpv1.Envelope) {
			e.MessageType, e.SessionId = coord.TypeProgress, ""
		}, coord.CodeInvalidEnvelope},
		// Signals: session_id and mode both empty (SIG-1, SIG-5).
		{"Signal ambient", "RFC-MACP-0001 §6; SIG-1", func(e *macpv1.Envelope) {
			e.MessageType, e.Mode, e.SessionId = coord.TypeSignal, "", ""
		}, ""},
		{"Signal with session_id", "checklist SIG-5: session-scoped Signals are invalid", func(e *macpv1.Envelope) {
			e.MessageType, e.Mode = coord.TypeSignal, ""
		}, coord.CodeInvalidEnvelope},
		{"Signal with mode", "RFC-MACP-0001 §6: mode MUST be empty for Ambient Signals", func(e *macpv1.Envelope) {
			e.MessageType, e.SessionId = coord.TypeSignal, ""
		}, coord.CodeInvalidEnvelope},
		{"Signal with both", "checklist SIG-5", func(e *macpv1.Envelope) { e.MessageType = coord.TypeSignal }, coord.CodeInvalidEnvelope},
		// Order: version before shape (ADM-11 before ADM-12).
		{"version checked before shape", "checklist ADM-11 before ADM-12", func(e *macpv1.Envelope) {
			e.MacpVersion, e.MessageType, e.MessageId = "9.9", "", ""
		}, coord.CodeUnsupportedProtocolVersion},
		// Order: size before scope shape (both ADM-12; size wins so an
		// oversized frame is reported as such).
		{"size before scope", "checklist ADM-12", func(e *macpv1.Envelope) {
			e.SessionId, e.Payload = "", make([]byte, lim.MaxPayloadBytes+1)
		}, coord.CodePayloadTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := validSessionEnv()
			tc.mod(e)
			err := session.CheckEnvelope(e, lim)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%s: CheckEnvelope = %v, want ok", tc.cite, err)
				}
				return
			}
			if err == nil || err.Code != tc.want {
				t.Fatalf("%s: CheckEnvelope = %v, want %s", tc.cite, err, tc.want)
			}
		})
	}
}

// RFC-MACP-0001 §6: the Envelope is required. A nil envelope is INVALID_ENVELOPE, not a panic.
func TestCheckEnvelopeNil(t *testing.T) {
	if err := session.CheckEnvelope(nil, session.DefaultLimits()); err == nil || err.Code != coord.CodeInvalidEnvelope {
		t.Fatalf("CheckEnvelope(nil) = %v", err)
	}
}

// Limits.MaxPayloadBytes 0 disables the size check (Limits doc); replay
// relies on it (replayLimits).
func TestCheckEnvelopeNoPayloadLimit(t *testing.T) {
	e := validSessionEnv()
	e.Payload = make([]byte, 2<<20)
	if err := session.CheckEnvelope(e, session.Limits{}); err != nil {
		t.Fatalf("CheckEnvelope with MaxPayloadBytes 0 = %v", err)
	}
}

// CheckEnvelope and Step never look at timestamp_unix_ms of non-start
// envelopes: RFC-MACP-0003 §2 "timestamp_unix_ms ... MUST NOT be used for
// message acceptance decisions".
func TestTimestampIgnoredOutsideStart(t *testing.T) {
	s, _ := mustStart(t)
	for i, ts := range []int64{0, -1, 1, t0 - 10*3600*1000, t0 + 10*3600*1000} {
		e := note("ts-"+string(rune('a'+i)), alice)
		e.TimestampUnixMs = ts
		mustAccept(t, s, e, t0+1)
	}
}

// CheckAmbient: SIG-1 "SignalPayload with non-empty signal_type"; SIG-6 Progress.
func TestCheckAmbient(t *testing.T) {
	sig := validSignalEnv(t)
	if err := session.CheckAmbient(sig); err != nil {
		t.Fatalf("valid Signal: %v", err)
	}
	noType := validSignalEnv(t)
	noType.Payload = marshal(t, &macpv1.SignalPayload{Data: []byte("x")})
	if err := session.CheckAmbient(noType); err == nil || err.Code != coord.CodeInvalidEnvelope {
		t.Fatalf("Signal without signal_type: %v, want INVALID_ENVELOPE (SIG-1)", err)
	}
	empty := validSignalEnv(t)
	empty.Payload = nil
	if err := session.CheckAmbient(empty); err == nil || err.Code != coord.CodeInvalidEnvelope {
		t.Fatalf("Signal with empty payload: %v, want INVALID_ENVELOPE (SIG-1 signal_type required)", err)
	}
	garbage := validSignalEnv(t)
	garbage.Payload = []byte{0xff, 0xff, 0xff}
	if err := session.CheckAmbient(garbage); err == nil || err.Code != coord.CodeInvalidEnvelope {
		t.Fatalf("undecodable Signal payload: %v, want INVALID_ENVELOPE", err)
	}
	prog := &macpv1.Envelope{MacpVersion: coord.ProtocolVersion, MessageType: coord.TypeProgress, MessageId: "p-1", Sender: alice,
		Payload: marshal(t, &macpv1.ProgressPayload{ProgressToken: "tok", Progress: 1, Total: 2})}
	if err := session.CheckAmbient(prog); err != nil {
		t.Fatalf("valid Progress: %v", err)
	}
	prog.Payload = nil // every field optional
	if err := session.CheckAmbient(prog); err != nil {
		t.Fatalf("empty Progress: %v", err)
	}
	prog.Payload = []byte{0xff}
	if err := session.CheckAmbient(prog); err == nil || err.Code != coord.CodeInvalidEnvelope {
		t.Fatalf("undecodable Progress: %v, want INVALID_ENVELOPE", err)
	}
	other := note("n", alice)
	if err := session.CheckAmbient(other); err == nil || err.Code != coord.CodeInvalidEnvelope {
		t.Fatalf("CheckAmbient(Note) = %v, want INVALID_ENVELOPE", err)
	}
}

// SIG-2: Signals never start/mutate sessions. A Signal offered to a session
// is rejected (structurally, as it must not carry a session_id) and changes
// nothing; an ambient-shaped Signal given to Step is also rejected.
func TestSignalNeverTouchesSession(t *testing.T) {
	s, _ := mustStart(t)
	sig := validSignalEnv(t)
	sig.SessionId, sig.Mode = sid, testModeID
	wantStepErr(t, s, sig, t0+1, coord.CodeInvalidEnvelope)
	amb := validSignalEnv(t)
	wantStepErr(t, s, amb, t0+1, coord.CodeInvalidEnvelope)
}

// Step runs CheckEnvelope first: a session-scoped envelope with the wrong
// version is UNSUPPORTED_PROTOCOL_VERSION even for a known message id
// (ADM-11 precedes ADM-17).
func TestStepChecksStructureFirst(t *testing.T) {
	s, _ := mustStart(t)
	mustAccept(t, s, note("n1", alice), t0+1)
	e := note("n1", alice)
	e.MacpVersion = "0.9"
	wantStepErr(t, s, e, t0+2, coord.CodeUnsupportedProtocolVersion)
	big := note("n2", alice)
	big.Payload = make([]byte, session.DefaultLimits().MaxPayloadBytes+1)
	wantStepErr(t, s, big, t0+2, coord.CodePayloadTooLarge)
	// RFC-MACP-0001 §6 "sender MUST be non-empty" (ADM-1, bound by the shell).
	anon := note("n3", "")
	wantStepErr(t, s, anon, t0+2, coord.CodeInvalidEnvelope)
	if out := s.Step(nil, t0+2, session.DefaultLimits()); out.Err == nil || out.Err.Code != coord.CodeInvalidEnvelope {
		t.Fatalf("Step(nil) = %+v", out)
	}
}
