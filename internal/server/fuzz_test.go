package server_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fuzzUnary are the unary methods the fuzz target calls, by index.
var fuzzUnary = []string{
	macpv1.MACPRuntimeService_Send_FullMethodName,
	macpv1.MACPRuntimeService_Initialize_FullMethodName,
	macpv1.MACPRuntimeService_GetSession_FullMethodName,
	macpv1.MACPRuntimeService_CancelSession_FullMethodName,
	macpv1.MACPRuntimeService_GetManifest_FullMethodName,
	macpv1.MACPRuntimeService_ListModes_FullMethodName,
	macpv1.MACPRuntimeService_ListRoots_FullMethodName,
	macpv1.MACPRuntimeService_ListExtModes_FullMethodName,
	macpv1.MACPRuntimeService_RegisterExtMode_FullMethodName,
	macpv1.MACPRuntimeService_UnregisterExtMode_FullMethodName,
	macpv1.MACPRuntimeService_PromoteMode_FullMethodName,
	macpv1.MACPRuntimeService_ListSessions_FullMethodName,
	macpv1.MACPRuntimeService_RegisterPolicy_FullMethodName,
	macpv1.MACPRuntimeService_UnregisterPolicy_FullMethodName,
	macpv1.MACPRuntimeService_GetPolicy_FullMethodName,
	macpv1.MACPRuntimeService_ListPolicies_FullMethodName,
}

// FuzzRequestDecoding sends arbitrary request bytes to every unary method
// and as a StreamSession frame, through grpc-go's transport, the server's
// decoding (codec.go), authentication, limits and the runtime's admission
// (checklist ERR-*, SEC-*): no input may crash the server or be answered
// INTERNAL or UNKNOWN (a client's bad bytes are never a server error).
// `go test` runs the seeds and the committed corpus
// (testdata/fuzz/FuzzRequestDecoding); `go test -fuzz
// FuzzRequestDecoding ./internal/server` explores further.
func FuzzRequestDecoding(f *testing.F) {
	e, _, _ := startService(f, server.Options{})
	sid := uuid.NewString()
	tt := testing.TB(f)
	e.mustAccept(tt, "alice", envelope(sid, "SessionStart", "start-"+sid, startPayload(tt, "alice", "bob")))
	seed := func(method byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(method, b)
	}
	seed(0, &macpv1.SendRequest{Envelope: envelope(sid, "Proposal", "p1", proposalPayload(tt, "p1"))})
	seed(0, &macpv1.SendRequest{Envelope: envelope(uuid.NewString(), "SessionStart", "s1", startPayload(tt, "alice", "bob"))})
	seed(0, &macpv1.SendRequest{Envelope: envelope(sid, "Commitment", "c1", commitmentPayload(tt))})
	seed(1, &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}})
	seed(2, &macpv1.GetSessionRequest{SessionId: sid})
	seed(3, &macpv1.CancelSessionRequest{SessionId: sid, Reason: "r"})
	seed(8, &macpv1.RegisterExtModeRequest{ModeDescriptor: &macpv1.ModeDescriptor{Mode: "ext.fuzz.v1", ModeVersion: "1.0.0"}})
	seed(12, &macpv1.RegisterPolicyRequest{PolicyDescriptor: &macpv1.PolicyDescriptor{PolicyId: "p", Mode: "macp.mode.decision.v1", Rules: "{}", SchemaVersion: 1}})
	seed(255, &macpv1.StreamSessionRequest{SubscribeSessionId: sid})
	seed(255, &macpv1.StreamSessionRequest{Envelope: envelope(sid, "Proposal", "p2", proposalPayload(tt, "p2"))})
	f.Add(byte(0), []byte{0x0a, 0x03, 0x12, 0x01, 0xff})
	f.Add(byte(255), []byte{0x1a, 0x02, 0xc3, 0x28})
	f.Fuzz(func(t *testing.T, method byte, req []byte) {
		ctx, cancel := context.WithTimeout(as("alice"), 5*time.Second)
		defer cancel()
		var err error
		if int(method) < len(fuzzUnary) {
			var resp emptypb.Empty // any response decodes (as unknown fields)
			err = e.conn.Invoke(ctx, fuzzUnary[method], rawMsg(req), &resp, forceRaw())
		} else {
			err = fuzzStream(ctx, e, req)
		}
		if c := status.Code(err); c == codes.Internal || c == codes.Unknown {
			t.Fatalf("method %d, request %x: %v", method, req, err)
		}
	})
}

// fuzzStream sends req as the only StreamSession frame, half-closes and
// reads until the stream ends; an in-stream INTERNAL_ERROR fails too.
func fuzzStream(ctx context.Context, e *testEnv, req []byte) error {
	s, err := e.conn.NewStream(ctx, &macpv1.MACPRuntimeService_ServiceDesc.Streams[0], macpv1.MACPRuntimeService_StreamSession_FullMethodName, forceRaw())
	if err != nil {
		return err
	}
	if err := s.SendMsg(rawMsg(req)); err != nil {
		return err
	}
	_ = s.CloseSend()
	for {
		var r macpv1.StreamSessionResponse
		if err := s.RecvMsg(&r); err != nil {
			if err == io.EOF || status.Code(err) == codes.DeadlineExceeded {
				return nil
			}
			return err
		}
		if r.GetError().GetCode() == "INTERNAL_ERROR" {
			return status.Error(codes.Internal, r.GetError().GetMessage())
		}
	}
}
