package server_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawMsg is a request sent as its bytes, unchecked (rawCodec): how a
// client that is not grpc-go, or a hostile one, can send anything.
type rawMsg []byte

// rawCodec sends rawMsg as is and decodes responses as protobuf.
type rawCodec struct{ encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(rawMsg); ok {
		return mem.BufferSlice{mem.SliceBuffer(r)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func forceRaw() grpc.CallOption { return grpc.ForceCodecV2(rawCodec{encoding.GetCodecV2("proto")}) }

// badUTF8 returns m's encoding with the string value placeholder replaced
// by bytes that are not UTF-8 (protobuf-go refuses to encode them).
func badUTF8(t *testing.T, m proto.Message, placeholder string) rawMsg {
	t.Helper()
	b := mustMarshal(t, m)
	bad := bytes.Repeat([]byte{0xff}, len(placeholder))
	if !bytes.Contains(b, []byte(placeholder)) {
		t.Fatalf("placeholder %q not in the encoding", placeholder)
	}
	return bytes.Replace(b, []byte(placeholder), bad, 1)
}

// RFC-MACP-0001 §5 (proto3 strings are UTF-8) and checklist ERR-*: a
// request that cannot be decoded - a string field that is not UTF-8, bytes
// that are not protobuf - is the client's error, INVALID_ARGUMENT with the
// MACP code INVALID_ENVELOPE, never INTERNAL; it changes nothing.
func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "alice", "alice", "bob")
	before := e.getSession(t, "alice", sid)
	vote := envelope(sid, "Proposal", "zzzzzzzz", proposalPayload(t, "p1"))
	cases := map[string]rawMsg{
		"message_id not UTF-8":  badUTF8(t, &macpv1.SendRequest{Envelope: vote}, "zzzzzzzz"),
		"session_id not UTF-8":  badUTF8(t, &macpv1.SendRequest{Envelope: envelope(strings.Repeat("q", 30), "Proposal", "m", nil)}, strings.Repeat("q", 30)),
		"not protobuf":          {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"truncated field":       {0x0a, 0x10, 0x01},
		"wrong wire type":       {0x0d, 0x01, 0x02, 0x03, 0x04},
		"group never ended":     {0x0b},
		"sender not UTF-8 deep": badUTF8(t, &macpv1.SendRequest{Envelope: &macpv1.Envelope{Sender: "yyyyyy"}}, "yyyyyy"),
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			var resp macpv1.SendResponse
			err := e.conn.Invoke(as("alice"), macpv1.MACPRuntimeService_Send_FullMethodName, req, &resp, forceRaw())
			wantStatus(t, err, codes.InvalidArgument, "INVALID_ENVELOPE")
			var g macpv1.GetSessionResponse
			err = e.conn.Invoke(as("alice"), macpv1.MACPRuntimeService_GetSession_FullMethodName, req, &g, forceRaw())
			if status := codeOf(err); status == codes.Internal || status == codes.Unknown {
				t.Fatalf("GetSession with %s: %v", name, err)
			}
		})
	}
	// Server streaming: the one request frame is undecodable.
	s, err := e.conn.NewStream(as("alice"), &macpv1.MACPRuntimeService_ServiceDesc.Streams[4], macpv1.MACPRuntimeService_WatchSessions_FullMethodName, forceRaw())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(rawMsg{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseSend()
	var ev macpv1.WatchSessionsResponse
	for err = s.RecvMsg(&ev); err == nil; err = s.RecvMsg(&ev) {
	}
	wantStatus(t, err, codes.InvalidArgument, "INVALID_ENVELOPE")

	// StreamSession: an in-stream INVALID_ENVELOPE, like any rejected
	// frame; the stream stays open and can still subscribe.
	ctx, cancel := context.WithTimeout(as("bob"), 15*time.Second)
	defer cancel()
	ss, err := e.conn.NewStream(ctx, &macpv1.MACPRuntimeService_ServiceDesc.Streams[0], macpv1.MACPRuntimeService_StreamSession_FullMethodName, forceRaw())
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.SendMsg(badUTF8(t, &macpv1.StreamSessionRequest{SubscribeSessionId: sid + "zz"}, "zz")); err != nil {
		t.Fatal(err)
	}
	var r macpv1.StreamSessionResponse
	if err := ss.RecvMsg(&r); err != nil || r.GetError().GetCode() != "INVALID_ENVELOPE" {
		t.Fatalf("undecodable StreamSession frame: %v %v, want an in-stream INVALID_ENVELOPE", &r, err)
	}
	if err := ss.SendMsg(rawMsg(mustMarshal(t, &macpv1.StreamSessionRequest{SubscribeSessionId: sid}))); err != nil {
		t.Fatal(err)
	}
	if err := ss.RecvMsg(&r); err != nil || r.GetEnvelope().GetMessageType() != "SessionStart" {
		t.Fatalf("after the undecodable frame the stream should still subscribe: %v %v", &r, err)
	}
	if after := e.getSession(t, "alice", sid); !proto.Equal(before, after) {
		t.Fatalf("undecodable requests changed the session")
	}
}

func codeOf(err error) codes.Code { return status.Code(err) }

func newSessionID() string { return uuid.NewString() }

// RFC-MACP-0004 §3 (the sender is an authenticated identity): a declared
// participant must be an id some identity could have - the sender rule
// (coord.ValidAgentID) - so reserved ids ('_' prefix, e.g. "_runtime"),
// over-long, blank-padded, non-printable ids are refused.
func TestParticipantIDsFollowTheSenderRule(t *testing.T) {
	e := startApp(t, testConfig())
	for name, p := range map[string]string{
		"reserved _runtime": "_runtime",
		"reserved prefix":   "_bob",
		"5000 bytes":        strings.Repeat("b", 5000),
		"257 bytes":         strings.Repeat("b", 257),
		"surrounding space": " bob",
		"control character": "bo\x07b",
	} {
		t.Run(name, func(t *testing.T) {
			sid := newSessionID()
			ack := e.send(t, "alice", envelope(sid, "SessionStart", "start-"+sid, startPayload(t, "alice", p)))
			wantNack(t, ack, "INVALID_ENVELOPE")
		})
	}
	sid := newSessionID()
	e.mustAccept(t, "alice", envelope(sid, "SessionStart", "start-"+sid, startPayload(t, "alice", strings.Repeat("b", 256), "bob-ü")))
}

// RFC-MACP-0001 §6 (session ids): a malformed session id gets
// INVALID_SESSION_ID on every call that names a session, as on Send.
func TestMalformedSessionIDSameOnEveryCall(t *testing.T) {
	e := startApp(t, testConfig())
	const bad = "not-a-session"
	ack := e.send(t, "alice", envelope(bad, "Proposal", "m1", proposalPayload(t, "p1")))
	wantNack(t, ack, "INVALID_SESSION_ID")
	_, err := e.c.GetSession(as("alice"), &macpv1.GetSessionRequest{SessionId: bad})
	wantStatus(t, err, codes.InvalidArgument, "INVALID_SESSION_ID")
	_, err = e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: bad})
	wantStatus(t, err, codes.InvalidArgument, "INVALID_SESSION_ID")
	ss := e.subscribe(t, "alice", bad, 0)
	wantStatus(t, ss.fail(t), codes.InvalidArgument, "INVALID_SESSION_ID")
	if _, ok := trailerSeq(t, ss.s); ok {
		t.Fatal("a refused subscription carries macp-last-sequence")
	}
}

// docs/resume.md "Stream metadata": only streams that started delivering a
// session carry macp-last-sequence. A refused subscription (unknown
// session, FORBIDDEN) and a stream whose only envelope was rejected have
// none (a client resuming from 0 would replay everything).
func TestResumeTrailerOnlyOnBoundStreams(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "alice", "alice", "bob")
	t.Run("unknown session", func(t *testing.T) {
		ss := e.subscribe(t, "alice", newSessionID(), 0)
		wantStatus(t, ss.fail(t), codes.NotFound, "SESSION_NOT_FOUND")
		if v, ok := trailerSeq(t, ss.s); ok {
			t.Fatalf("macp-last-sequence %d on a refused subscription", v)
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		ss := e.subscribe(t, "mallory", sid, 0)
		wantStatus(t, ss.fail(t), codes.PermissionDenied, "FORBIDDEN")
		if v, ok := trailerSeq(t, ss.s); ok {
			t.Fatalf("macp-last-sequence %d on a refused subscription", v)
		}
	})
	t.Run("only envelope rejected", func(t *testing.T) {
		ss := e.openStream(t, "bob")
		ss.sendEnv(t, envelope(sid, "Commitment", "c-bob", commitmentPayload(t))) // bob may not commit
		if r := next(t, ss.ch); r.GetError().GetCode() != "FORBIDDEN" {
			t.Fatalf("want an in-stream FORBIDDEN, got %v", r)
		}
		_ = ss.s.CloseSend()
		if err := streamErr(t, ss.ch); err != io.EOF {
			t.Fatalf("half-closed unbound stream: %v", err)
		}
		if v, ok := trailerSeq(t, ss.s); ok {
			t.Fatalf("macp-last-sequence %d on a stream that delivered nothing", v)
		}
	})
	t.Run("bound stream has it", func(t *testing.T) {
		ss := e.subscribe(t, "bob", sid, 0)
		if r := next(t, ss.ch); r.GetEnvelope().GetMessageType() != "SessionStart" {
			t.Fatalf("got %v", r)
		}
		_ = ss.s.CloseSend()
		if err := streamErr(t, ss.ch); err != io.EOF {
			t.Fatal(err)
		}
		if v, ok := trailerSeq(t, ss.s); !ok || v != 1 {
			t.Fatalf("macp-last-sequence %d (present %v), want 1", v, ok)
		}
	})
}
