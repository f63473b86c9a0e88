package httpapi_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// docs/resume.md "One active attachment per caller and session", across
// transports (issue #14 §5): when alice attaches to a session in protocol
// mode (session/resume over WebSocket), her earlier gRPC StreamSession
// follows of that session end with ABORTED and a trailer naming where
// they stopped; bob's gRPC follow and alice's follow of another session
// are untouched, and the new attachment carries on.
func TestProtocolAttachSupersedesGRPCFollows(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice", "bob")
	other := e.startSession(t, "coord", "alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	follow := func(agent, session string) macpv1.MACPRuntimeService_StreamSessionClient {
		s, err := e.c.StreamSession(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+agent))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: session}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Recv(); err != nil || r.GetEnvelope().GetMessageType() != "SessionStart" {
			t.Fatalf("%s's follow of %s: %v %v", agent, session, r, err)
		}
		return s
	}
	aliceG, aliceOther, bobG := follow("alice", sid), follow("alice", other), follow("bob", sid)

	a := e.pdial(t, "alice")
	a.resume(sid, 1)
	for {
		_, err := aliceG.Recv()
		if err == nil {
			continue // envelopes queued before the end may still arrive
		}
		if status.Code(err) != codes.Aborted {
			t.Fatalf("alice's superseded gRPC follow ended with %v, want ABORTED", err)
		}
		break
	}
	if v := aliceG.Trailer().Get("macp-last-sequence"); len(v) != 1 || v[0] != strconv.Itoa(1) {
		t.Fatalf("trailer macp-last-sequence %v, want [1]", v)
	}

	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), "x"))
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(other, uuid.NewString(), "y"))
	if seq, _ := a.nextEnvelope(sid); seq != 2 {
		t.Fatalf("the new attachment got seq %d, want 2", seq)
	}
	for name, s := range map[string]macpv1.MACPRuntimeService_StreamSessionClient{"bob's follow of the session": bobG, "alice's follow of another session": aliceOther} {
		r, err := s.Recv()
		if err != nil || r.GetEnvelope().GetMessageType() != "Proposal" {
			t.Fatalf("%s was disturbed: %v %v", name, r, err)
		}
	}
}
