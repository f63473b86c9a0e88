package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// RFC-MACP-0006 §4 (checklist TRN-3): the HTTP routes carry envelopes with
// their semantics: start, send, read metadata, list, cancel; the sender is
// the authenticated identity, not the body's (RFC-MACP-0004 §3).
func TestHTTPSessionLifecycle(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	ack := e.mustAck(t, "/macp/envelope", "coord", strings.Replace(proposalJSON(sid, "m1", "p1"), `"session_id"`, `"sender":"mallory","session_id"`, 1))
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN || ack.MessageId != "m1" {
		t.Fatalf("ack %v", ack)
	}
	// A duplicate is 200 with duplicate=true and changes nothing.
	if dup := e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, "m1", "p1")); !dup.Duplicate {
		t.Fatalf("duplicate ack %v", dup)
	}
	code, b := e.do(t, "GET", "/macp/session/"+sid, "alice", "", nil)
	md := &macpv1.SessionMetadata{}
	if code != 200 || protojson.Unmarshal(b, md) != nil || md.SessionId != sid || md.State != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("GET session: %d %s", code, b)
	}
	code, b = e.do(t, "GET", "/macp/sessions", "coord", "", nil)
	ls := &macpv1.ListSessionsResponse{}
	if code != 200 || protojson.Unmarshal(b, ls) != nil || len(ls.Sessions) != 1 {
		t.Fatalf("GET sessions: %d %s", code, b)
	}
	// Stored sender is coord, whatever the body said.
	st := e.stored(t, sid)
	var got macpv1.Envelope
	if err := proto.Unmarshal(st[2], &got); err != nil || got.Sender != "coord" {
		t.Fatalf("stored sender %q (%v)", got.Sender, err)
	}
	e.mustAck(t, "/macp/session/"+sid+"/cancel", "coord", `{"reason":"done"}`)
	code, b = e.do(t, "GET", "/macp/session/"+sid, "alice", "", nil)
	if code != 200 || protojson.Unmarshal(b, md) != nil || md.State != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("after cancel: %d %s", code, b)
	}
	for _, p := range []string{"/macp/modes", "/.well-known/macp.json"} {
		if code, b := e.do(t, "GET", p, "", "", nil); code != 200 || !bytes.Contains(b, []byte(decisionMode)) {
			t.Fatalf("GET %s without credentials: %d %s", p, code, b)
		}
	}
	code, b = e.do(t, "GET", "/.well-known/macp.json", "", "", nil)
	for _, want := range []string{"macp.transport.http.v1", "macp.transport.websocket.v1", "ws://" + e.a.HTTPAddr() + "/macp/ws"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Fatalf("manifest lacks %s: %s", want, b)
		}
	}
	if code, b := e.do(t, "GET", "/macp/policies", "coord", "", nil); code != 200 || !bytes.Contains(b, []byte("policy.default")) {
		t.Fatalf("GET policies: %d %s", code, b)
	}
}

// Payload bytes sent as proto3 JSON base64 are stored and returned byte
// for byte (here: unknown fields and non-canonical field order, which any
// re-encoding would change); a payload sent as a JSON object is the
// standard payload message's protobuf encoding.
func TestPayloadRoundTrip(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	// option (2) before proposal_id (1), then unknown field 99.
	var raw []byte
	raw = protowire.AppendTag(raw, 2, protowire.BytesType)
	raw = protowire.AppendString(raw, "postgres")
	raw = protowire.AppendTag(raw, 1, protowire.BytesType)
	raw = protowire.AppendString(raw, "p1")
	raw = protowire.AppendTag(raw, 99, protowire.VarintType)
	raw = protowire.AppendVarint(raw, 7)
	js := fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Proposal","message_id":"b64","session_id":%q,"timestamp_unix_ms":"1700000000000","payload":%q}`,
		decisionMode, sid, base64.StdEncoding.EncodeToString(raw))
	e.mustAck(t, "/macp/envelope", "coord", js)
	st := e.stored(t, sid)
	var got macpv1.Envelope
	if err := proto.Unmarshal(st[2], &got); err != nil || !bytes.Equal(got.Payload, raw) || got.TimestampUnixMs != 1700000000000 {
		t.Fatalf("stored payload %x, want %x (%v)", got.Payload, raw, err)
	}
	// payload_b64 and the object form.
	raw2 := bytes.Replace(raw, []byte("p1"), []byte("p3"), 1)
	e.mustAck(t, "/macp/envelope", "coord", fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Proposal","message_id":"b64b","session_id":%q,"payload_b64":%q}`,
		decisionMode, sid, base64.StdEncoding.EncodeToString(raw2)))
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, "obj", "p2"))
	st = e.stored(t, sid)
	if err := proto.Unmarshal(st[3], &got); err != nil || !bytes.Equal(got.Payload, raw2) {
		t.Fatalf("payload_b64 stored %x", got.Payload)
	}
	if err := proto.Unmarshal(st[4], &got); err != nil {
		t.Fatal(err)
	}
	var pp decisionv1.ProposalPayload
	if err := proto.Unmarshal(got.Payload, &pp); err != nil || pp.ProposalId != "p2" || pp.Option != "opt-p2" {
		t.Fatalf("object payload stored as %v (%v)", &pp, err)
	}
}

// The error-code registry's HTTP Status column (RFC-MACP-0001 §12,
// checklist ERR-1..17): every code the HTTP binding can produce, produced
// over HTTP, answers its registry status with a MACPError body.
func TestStatusCodesFromRegistry(t *testing.T) {
	cfg := testConfig()
	cfg.MaxPayloadBytes = 4096
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice")
	ended := e.startSession(t, "coord", "alice")
	e.mustAck(t, "/macp/session/"+ended+"/cancel", "coord", `{"reason":"x"}`)
	// A registered policy for the denial and mode-mismatch cases (gRPC:
	// HTTP has no registry route).
	reg := func(d *macpv1.PolicyDescriptor) {
		r, err := e.c.RegisterPolicy(as("admin"), &macpv1.RegisterPolicyRequest{PolicyDescriptor: d})
		if err != nil || !r.Ok {
			t.Fatalf("RegisterPolicy %v %v", r, err)
		}
	}
	reg(&macpv1.PolicyDescriptor{PolicyId: "policy.t.majority", Mode: decisionMode, Description: "t", Rules: `{"voting":{"algorithm":"majority"},"commitment":{"authority":"any_participant"}}`, SchemaVersion: 1})
	reg(&macpv1.PolicyDescriptor{PolicyId: "policy.t.task", Mode: "macp.mode.task.v1", Description: "t", Rules: `{}`, SchemaVersion: 1})
	polStart := func(pid string) string {
		return strings.Replace(startJSON(uuid.NewString(), "coord", "alice"), `"ttl_ms":600000`, fmt.Sprintf(`"ttl_ms":600000,"policy_version":%q`, pid), 1)
	}
	polSid := uuid.NewString()
	e.mustAck(t, "/macp/session/start", "coord", strings.Replace(startJSON(polSid, "coord", "alice"), `"ttl_ms":600000`, `"ttl_ms":600000,"policy_version":"policy.t.majority"`, 1))
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(polSid, "pp1", "p1"))
	commit := fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Commitment","message_id":"c1","session_id":%q,"payload":{"commitment_id":"c1","action":"decision.selected","authority_scope":"s","reason":"r","mode_version":"1.0.0","configuration_version":"cfg-1","policy_version":"policy.t.majority","outcome_positive":true}}`, decisionMode, polSid)

	big := strings.Repeat("x", 5000)
	cases := []struct {
		name, path, agent, body string
		code                    coord.Code
	}{
		{"no credentials", "/macp/envelope", "", proposalJSON(sid, "u1", "p"), coord.CodeUnauthenticated},
		{"bad dev identity", "/macp/envelope", "_runtime", proposalJSON(sid, "u2", "p"), coord.CodeUnauthenticated},
		{"outsider", "/macp/envelope", "mallory", proposalJSON(sid, "f1", "p"), coord.CodeForbidden},
		{"unknown session", "/macp/envelope", "coord", proposalJSON(uuid.NewString(), "n1", "p"), coord.CodeSessionNotFound},
		{"ended session", "/macp/envelope", "coord", proposalJSON(ended, "o1", "p"), coord.CodeSessionNotOpen},
		{"session exists", "/macp/session/start", "coord", startJSON(sid, "coord", "alice"), coord.CodeSessionAlreadyExists},
		{"invalid envelope", "/macp/envelope", "coord", `{"macp_version":"1.0","mode":"macp.mode.decision.v1","message_type":"Proposal","session_id":"` + sid + `"}`, coord.CodeInvalidEnvelope},
		{"protocol version", "/macp/envelope", "coord", strings.Replace(proposalJSON(sid, "v1", "p"), `"1.0"`, `"9.0"`, 1), coord.CodeUnsupportedProtocolVersion},
		{"mode", "/macp/session/start", "coord", strings.Replace(startJSON(uuid.NewString(), "coord"), decisionMode, "macp.mode.nope.v1", 1), coord.CodeModeNotSupported},
		{"payload too large", "/macp/envelope", "coord", fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Proposal","message_id":"big","session_id":%q,"payload_b64":%q}`, decisionMode, sid, base64.StdEncoding.EncodeToString([]byte(big))), coord.CodePayloadTooLarge},
		{"body too large", "/macp/envelope", "coord", `{"x":"` + strings.Repeat("y", 2*4096+70<<10) + `"}`, coord.CodePayloadTooLarge},
		{"session id", "/macp/session/start", "coord", startJSON("not a valid id!", "coord"), coord.CodeInvalidSessionID},
		{"unknown policy", "/macp/session/start", "coord", polStart("policy.nope"), coord.CodeUnknownPolicyVersion},
		{"policy of another mode", "/macp/session/start", "coord", polStart("policy.t.task"), coord.CodeInvalidPolicyDefinition},
		{"policy denied", "/macp/envelope", "alice", commit, coord.CodePolicyDenied},
		{"unknown session cancel", "/macp/session/" + uuid.NewString() + "/cancel", "coord", `{"reason":"x"}`, coord.CodeSessionNotFound},
		{"cancel by participant", "/macp/session/" + sid + "/cancel", "alice", `{"reason":"x"}`, coord.CodeForbidden},
	}
	for _, c := range cases {
		code, b := e.do(t, "POST", c.path, c.agent, "application/json", []byte(c.body))
		me := macpError(t, b)
		if me.Code != string(c.code) {
			t.Errorf("%s: code %s (%s), want %s", c.name, me.Code, me.Message, c.code)
		}
		if want := coord.Code(me.Code).HTTPStatus(); code != want {
			t.Errorf("%s: status %d for %s, want %d", c.name, code, me.Code, want)
		}
	}
	// GET routes.
	for _, c := range []struct {
		path, agent string
		code        coord.Code
	}{
		{"/macp/session/" + uuid.NewString(), "coord", coord.CodeSessionNotFound},
		{"/macp/session/" + sid, "mallory", coord.CodeForbidden},
		{"/macp/session/" + sid, "", coord.CodeUnauthenticated},
		{"/macp/sessions", "", coord.CodeUnauthenticated},
		{"/macp/session/" + sid + "/events", "mallory", coord.CodeForbidden},
		{"/macp/session/" + uuid.NewString() + "/events", "coord", coord.CodeSessionNotFound},
		{"/sessions/" + sid + "/events?after=0", "mallory", coord.CodeForbidden},
		{"/sessions/" + uuid.NewString() + "/events?after=0", "coord", coord.CodeSessionNotFound},
	} {
		code, b := e.do(t, "GET", c.path, c.agent, "", nil)
		if me := macpError(t, b); me.Code != string(c.code) || code != c.code.HTTPStatus() {
			t.Errorf("GET %s as %q: %d %s, want %s", c.path, c.agent, code, b, c.code)
		}
	}
}

// RATE_LIMITED (429) and INTERNAL_ERROR's column: the rate limit is the
// runtime's, shared with gRPC: a sender that used its budget over gRPC is
// refused over HTTP.
func TestRateLimitSharedWithGRPC(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.MessagesPerMinute = 3
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice")
	for i := range 3 {
		if ack := e.grpcProposal(t, "coord", sid, fmt.Sprintf("g%d", i)); !ack.Ok {
			t.Fatalf("grpc %d: %v", i, ack)
		}
	}
	code, b := e.post(t, "coord", proposalJSON(sid, "h1", "p"))
	if me := macpError(t, b); code != 429 || me.Code != "RATE_LIMITED" {
		t.Fatalf("after the gRPC budget: %d %s", code, b)
	}
	if coord.CodeInternalError.HTTPStatus() != 500 {
		t.Fatal("INTERNAL_ERROR must be 500")
	}
}

// Bad input over HTTP gets a clear 4xx MACPError and changes nothing: the
// session's history and the session list are unchanged.
func TestBadInputChangesNothing(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	before := e.stored(t, sid)
	good := proposalJSON(sid, "bad", "p")
	cases := []struct {
		name, ctype string
		body        []byte
		status      int
	}{
		{"malformed", "application/json", []byte(`{"macp_version":`), 400},
		{"invalid utf-8", "application/json", []byte(strings.Replace(good, "opt-p", "opt-\xff\xfe", 1)), 400},
		{"wrong content type", "text/plain", []byte(good), 400},
		{"no content type", "", []byte(good), 400},
		{"unknown field", "application/json", []byte(strings.Replace(good, `"session_id"`, `"sesion":"x","session_id"`, 1)), 400},
		{"two objects", "application/json", []byte(good + good), 400},
		{"array", "application/json", []byte(`[` + good + `]`), 400},
		{"payload and payload_b64", "application/json", []byte(strings.Replace(good, `"payload":`, `"payload_b64":"AA==","payload":`, 1)), 400},
		{"unknown payload field", "application/json", []byte(strings.Replace(good, `"option"`, `"opton"`, 1)), 400},
		{"payload object of unknown schema", "application/json", []byte(strings.Replace(good, `"Proposal"`, `"Thing"`, 1)), 400},
		{"bad base64", "application/json", []byte(strings.Replace(good, `"payload":{"proposal_id":"p","option":"opt-p"}`, `"payload":"!!"`, 1)), 400},
		{"bad timestamp", "application/json", []byte(strings.Replace(good, `"payload"`, `"timestamp":"yesterday","payload"`, 1)), 400},
		{"oversized", "application/json", bytes.Repeat([]byte(" "), 3<<20), 413},
	}
	for _, c := range cases {
		code, b := e.do(t, "POST", "/macp/envelope", "coord", c.ctype, c.body)
		me := macpError(t, b)
		if code != c.status || me.Message == "" {
			t.Errorf("%s: %d %s, want %d", c.name, code, b, c.status)
		}
	}
	// Cancel with a bad body, SSE with disagreeing cursors, bad cursors.
	if code, _ := e.do(t, "POST", "/macp/session/"+sid+"/cancel", "coord", "application/json", []byte(`{"reasn":"x"}`)); code != 400 {
		t.Errorf("cancel with unknown field: %d", code)
	}
	if code, b := e.do(t, "GET", "/macp/session/"+sid+"/events?after_sequence=0", "coord", "", nil, "Last-Event-ID", "1"); code != 400 || macpError(t, b).Code != "INVALID_ENVELOPE" {
		t.Errorf("disagreeing cursors: %d %s", code, b)
	}
	for _, q := range []string{"?after_sequence=-1", "?after_sequence=x", "?after_sequence=1&after_sequence=2", "?payload=xml"} {
		if code, _ := e.do(t, "GET", "/macp/session/"+sid+"/events"+q, "coord", "", nil); code != 400 {
			t.Errorf("SSE %s: %d", q, code)
		}
	}
	if code, _ := e.do(t, "GET", "/sessions/"+sid+"/events?after=-2", "coord", "", nil); code != 400 {
		t.Errorf("poll after=-2: %d", code)
	}
	after := e.stored(t, sid)
	if len(after) != len(before) {
		t.Fatalf("bad input changed the history: %d -> %d records", len(before), len(after))
	}
	md, err := e.c.GetSession(as("coord"), &macpv1.GetSessionRequest{SessionId: sid})
	if err != nil || md.Metadata.State != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("session after bad input: %v %v", md, err)
	}
	ls, err := e.c.ListSessions(as("coord"), &macpv1.ListSessionsRequest{})
	if err != nil || len(ls.Sessions) != 1 {
		t.Fatalf("sessions after bad input: %v %v", ls, err)
	}
}

// CORS is closed by default: a foreign origin is refused (403 FORBIDDEN)
// before any route runs; a configured origin gets CORS headers and
// preflights.
func TestCORS(t *testing.T) {
	e := startApp(t, testConfig())
	code, b := e.do(t, "GET", "/macp/modes", "", "", nil, "Origin", "https://evil.example")
	if code != 403 || macpError(t, b).Code != "FORBIDDEN" {
		t.Fatalf("foreign origin: %d %s", code, b)
	}
	sid := e.startSession(t, "coord")
	code, _ = e.do(t, "POST", "/macp/envelope", "coord", "application/json", []byte(proposalJSON(sid, "x", "p")), "Origin", "https://evil.example")
	if code != 403 || len(e.stored(t, sid)) != 1 {
		t.Fatalf("foreign-origin POST: %d", code)
	}
	cfg := testConfig()
	cfg.HTTP.CORSOrigins = "https://console.example"
	e2 := startApp(t, cfg)
	req := func(method string, hdr ...string) (int, string) {
		code, _ := e2.do(t, method, "/macp/sessions", "", "", nil, hdr...)
		return code, ""
	}
	if code, _ := req("OPTIONS", "Origin", "https://console.example", "Access-Control-Request-Method", "GET"); code != 204 {
		t.Fatalf("preflight: %d", code)
	}
	if code, _ := req("OPTIONS", "Origin", "https://other.example", "Access-Control-Request-Method", "GET"); code != 403 {
		t.Fatalf("preflight from another origin: %d", code)
	}
}

// Browser tickets: single use, bound to the identity that asked, and
// needing header credentials.
func TestTickets(t *testing.T) {
	cfg := testConfig()
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice")
	ticket := func(agent string) string {
		code, b := e.do(t, "POST", "/macp/auth/ticket", agent, "", nil)
		var r struct {
			Ticket string `json:"ticket"`
		}
		if code != 200 || json.Unmarshal(b, &r) != nil || len(r.Ticket) < 40 {
			t.Fatalf("ticket: %d %s", code, b)
		}
		return r.Ticket
	}
	if code, _ := e.do(t, "POST", "/macp/auth/ticket", "", "", nil); code != 401 {
		t.Fatalf("ticket without credentials: %d", code)
	}
	tk := ticket("alice")
	if code, b := e.do(t, "GET", "/macp/session/"+sid+"?ticket="+tk, "", "", nil); code != 200 {
		t.Fatalf("with ticket: %d %s", code, b)
	}
	if code, _ := e.do(t, "GET", "/macp/session/"+sid+"?ticket="+tk, "", "", nil); code != 401 {
		t.Fatalf("ticket reused: %d", code)
	}
	tk = ticket("mallory")
	if code, _ := e.do(t, "GET", "/macp/session/"+sid+"?ticket="+tk, "", "", nil); code != 403 {
		t.Fatalf("mallory's ticket: %d", code)
	}
	// A ticket cannot buy a ticket, nor send envelopes.
	tk = ticket("alice")
	if code, _ := e.do(t, "POST", "/macp/auth/ticket?ticket="+tk, "", "", nil); code != 401 {
		t.Fatalf("ticket for a ticket: %d", code)
	}
	_ = time.Second
	_ = context.Background
}
