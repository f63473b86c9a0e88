package wire

import (
	"bytes"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/protobuf/proto"
)

// The error-code registry's HTTP Status column (RFC-MACP-0001 §12;
// checklist ERR-1..17), all 17 codes, and the WebSocket close codes
// derived from it.
func TestRegistryHTTPStatus(t *testing.T) {
	registry := map[coord.Code]int{
		"UNAUTHENTICATED": 401, "FORBIDDEN": 403, "SESSION_NOT_FOUND": 404, "SESSION_NOT_OPEN": 409,
		"DUPLICATE_MESSAGE": 409, "SESSION_ALREADY_EXISTS": 409, "INVALID_ENVELOPE": 400,
		"UNSUPPORTED_PROTOCOL_VERSION": 400, "MODE_NOT_SUPPORTED": 400, "PAYLOAD_TOO_LARGE": 413,
		"RATE_LIMITED": 429, "INVALID_SESSION_ID": 400, "INTERNAL_ERROR": 500, "UNKNOWN_POLICY_VERSION": 404,
		"POLICY_DENIED": 403, "INVALID_POLICY_DEFINITION": 400, "UNAUTHORIZED": 403,
	}
	if len(registry) != 17 {
		t.Fatal("the registry has 17 codes")
	}
	for code, want := range registry {
		if got := HTTPStatus(string(code)); got != want {
			t.Errorf("%s: %d, want %d", code, got, want)
		}
		if got := CloseCode(string(code)); got != 4000+want {
			t.Errorf("%s: close code %d", code, got)
		}
	}
}

// Both JSON forms decode to the same envelope; payload base64 is exact.
func TestDecodeEnvelopeForms(t *testing.T) {
	raw := []byte{0x12, 0x01, 'x', 0x0a, 0x02, 'p', '1', 0xf8, 0x06, 0x07} // option, proposal_id, unknown field 111
	a, err := DecodeEnvelope([]byte(`{"macp_version":"1.0","mode":"macp.mode.decision.v1","message_type":"Proposal","message_id":"m","session_id":"s","timestamp_unix_ms":1700000000123,"payload":"EgF4CgJwMfgGBw=="}`))
	if err != nil || !bytes.Equal(a.Payload, raw) || a.TimestampUnixMs != 1700000000123 {
		t.Fatalf("proto3 JSON: %v %v", a, err)
	}
	b, err := DecodeEnvelope([]byte(`{"macp_version":"1.0","mode":"macp.mode.decision.v1","message_type":"Proposal","message_id":"m","session_id":"s","timestamp":"2023-11-14T22:13:20.123Z","payload":{"proposal_id":"p1","option":"x"}}`))
	if err != nil || b.TimestampUnixMs != 1700000000123 {
		t.Fatalf("canonical: %v %v", b, err)
	}
	var pa, pb macpv1.Envelope
	proto.Merge(&pa, a)
	proto.Merge(&pb, b)
	pa.Payload, pb.Payload = nil, nil
	if !proto.Equal(&pa, &pb) {
		t.Fatalf("forms differ: %v / %v", &pa, &pb)
	}
	js, jerr := EncodeEnvelope(a)
	if jerr != nil {
		t.Fatal(jerr)
	}
	back, cerr := DecodeEnvelope(js)
	if cerr != nil || !proto.Equal(back, a) || !bytes.Equal(back.Payload, raw) {
		t.Fatalf("round trip %s: %v", js, cerr)
	}
	for _, bad := range []string{`null`, `{"payload":1}`, `{"timestamp":"x"}`, `{"timestamp":"2023-11-14T22:13:20Z","timestamp_unix_ms":1}`,
		`{"payload_b64":"AA==","payload":"AA=="}`, `{"mode":"x.y","message_type":"T","payload":{}}`, "{\"sender\":\"\xff\"}", `{} {}`} {
		if _, cerr := DecodeEnvelope([]byte(bad)); cerr == nil || cerr.Code != coord.CodeInvalidEnvelope {
			t.Errorf("%q: %v", bad, cerr)
		}
	}
}

// Issue 26 item 7: a top-level key named twice, or twice in different
// letter case, is refused INVALID_ENVELOPE (the last one used to win
// silently); distinct keys still decode.
func TestDecodeEnvelopeDuplicateKeys(t *testing.T) {
	const base = `"macp_version":"1.0","mode":"macp.mode.decision.v1","message_type":"Proposal","session_id":"s1"`
	for _, js := range []string{
		`{` + base + `,"message_id":"a","message_id":"b"}`,
		`{` + base + `,"message_id":"a","Message_Id":"b"}`,
		`{` + base + `,"message_id":"a","payload_b64":"","PAYLOAD_B64":"eA=="}`,
		`{"session_id":"s0",` + base + `,"message_id":"a"}`,
	} {
		env, cerr := DecodeEnvelope([]byte(js))
		if cerr == nil || cerr.Code != coord.CodeInvalidEnvelope {
			t.Errorf("%s: %v %v, want INVALID_ENVELOPE", js, env, cerr)
		}
	}
	env, cerr := DecodeEnvelope([]byte(`{` + base + `,"message_id":"a","payload":{"proposal_id":"p","option":"x"}}`))
	if cerr != nil || env.GetMessageId() != "a" {
		t.Fatalf("distinct keys: %v %v", env, cerr)
	}
}

// The latest profile's Core additions in every JSON form: the runtime's
// SessionSuspend / SessionResume payloads decode in the canonical view
// (and as payload objects on input), and the SUSPENDED and CANCELLED
// states and their lifecycle events have their enum names.
func TestSuspendResumeJSON(t *testing.T) {
	for typ, m := range map[string]proto.Message{
		coord.TypeSessionSuspend: &macpv1.SessionSuspendPayload{Reason: "r", SuspendedBy: "coord"},
		coord.TypeSessionResume:  &macpv1.SessionResumePayload{Reason: "r", ResumedBy: "coord", BankedMs: 42},
	} {
		b, _ := proto.Marshal(m)
		env := &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: typ, MessageId: "m", SessionId: "s", Sender: "_runtime", Payload: b}
		c := Canonical(env)
		if c.PayloadB64 != nil || !bytes.Contains(c.Payload, []byte(`"reason":"r"`)) {
			t.Fatalf("%s: canonical payload %s", typ, c.Payload)
		}
		js, _ := EncodeCanonical(env)
		back, cerr := DecodeEnvelope(js)
		if cerr != nil || !proto.Equal(back, env) {
			t.Fatalf("%s: %s round trip %v %v", typ, js, back, cerr)
		}
		if !IsCore(typ) {
			t.Fatalf("%s is a Core type", typ)
		}
	}
	md, _ := Compact(&macpv1.SessionMetadata{State: macpv1.SessionState_SESSION_STATE_SUSPENDED})
	ev, _ := Compact(&macpv1.SessionLifecycleEvent{EventType: macpv1.SessionLifecycleEvent_EVENT_TYPE_CANCELLED, Session: &macpv1.SessionMetadata{State: macpv1.SessionState_SESSION_STATE_CANCELLED}})
	if !bytes.Contains(md, []byte(`"state":"SESSION_STATE_SUSPENDED"`)) || !bytes.Contains(ev, []byte(`"event_type":"EVENT_TYPE_CANCELLED"`)) || !bytes.Contains(ev, []byte(`"SESSION_STATE_CANCELLED"`)) {
		t.Fatalf("%s %s", md, ev)
	}
}
