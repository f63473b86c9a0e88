package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// publicRPCs are the discovery calls the official SDKs make before they
// authenticate (RFC-MACP-0005; server.publicMethods).
var publicRPCs = map[string]bool{
	"Initialize": true, "ListModes": true, "GetManifest": true, "ListRoots": true,
	"ListExtModes": true, "WatchModeRegistry": true, "WatchRoots": true,
}

// RFC-MACP-0004 §3/§4 (checklist SEC-2, SEC-3, ADM-13): discovery works
// without credentials; every other RPC (including the unimplemented ones:
// authentication comes first) answers UNAUTHENTICATED with the code in a
// MACPError detail.
func TestCredentialsRequiredExceptDiscovery(t *testing.T) {
	e := startApp(t, testConfig())
	for name, call := range rpcCalls(e.c) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := call(ctx)
			if publicRPCs[name] {
				if err != nil {
					t.Fatalf("public %s without credentials: %v", name, err)
				}
				return
			}
			wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
		})
	}
}

// RFC-MACP-0004 §3, coord.RuntimeSender: identities starting with '_' are
// reserved for the runtime (the SessionCancel it writes), so a dev bearer or
// dev header claiming one is rejected, not treated as anonymous.
func TestReservedIdentityRejected(t *testing.T) {
	e := startApp(t, testConfig())
	calls := rpcCalls(e.c)
	for _, ctx := range []context.Context{
		as("_runtime"),
		as("_x"),
		metadata.AppendToOutgoingContext(context.Background(), "x-macp-agent-id", "_runtime"),
	} {
		for _, name := range []string{"ListSessions", "Send", "GetSession", "CancelSession"} {
			wantStatus(t, calls[name](ctx), codes.Unauthenticated, "UNAUTHENTICATED")
		}
	}
	// A reserved identity cannot start a session whose history would then
	// be attributed to the runtime.
	sid := uuid.NewString()
	_, err := e.c.Send(as("_runtime"), &macpv1.SendRequest{Envelope: envelope(sid, "SessionStart", "m0", startPayload(t, "alice"))})
	wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	if n := len(e.rt.ListSessions(context.Background(), observer())); n != 0 {
		t.Fatalf("%d sessions exist", n)
	}
}

// RFC-MACP-0004 §3 "The sender field MUST be derived from authenticated
// identity and MUST NOT be accepted as a self-asserted free-form value"
// (checklist ADM-2, START-10): alice's SessionStart claiming to be mallory
// is alice's session; mallory cannot act as alice by claiming her name.
func TestSenderIsAuthenticatedIdentity(t *testing.T) {
	e := startApp(t, testConfig())
	sid := uuid.NewString()
	start := envelope(sid, "SessionStart", "m0", startPayload(t, "alice", "bob"))
	start.Sender = "mallory"
	e.mustAccept(t, "alice", start)
	md := e.getSession(t, "alice", sid)
	if md.Initiator != "alice" {
		t.Fatalf("initiator %q, want alice", md.Initiator)
	}
	// mallory claims to be alice: she is still mallory, not a participant.
	p := envelope(sid, "Proposal", "m1", proposalPayload(t, "p1"))
	p.Sender = "alice"
	wantNack(t, e.send(t, "mallory", p), "FORBIDDEN")
	// and alice's own proposal is recorded as alice's.
	p = envelope(sid, "Proposal", "m1", proposalPayload(t, "p1"))
	p.Sender = "bob"
	e.mustAccept(t, "alice", p)
	md = e.getSession(t, "bob", sid)
	alice := false
	for _, a := range md.ParticipantActivity {
		switch a.ParticipantId {
		case "alice":
			alice = true
		case "bob", "mallory":
			t.Errorf("%s has activity although only alice was accepted: %v", a.ParticipantId, md.ParticipantActivity)
		}
	}
	if !alice {
		t.Errorf("alice's proposal is not attributed to her: %v", md.ParticipantActivity)
	}
}

// checklist SEC-2: the reference runtime's dev-only x-macp-agent-id header
// (which the SDKs must support) is a dev identity like the bearer token;
// a bearer token wins over the header.
func TestDevAgentIDHeader(t *testing.T) {
	e := startApp(t, testConfig())
	hdr := func(id string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-macp-agent-id", id)
	}
	if _, err := e.c.ListSessions(hdr("carol"), &macpv1.ListSessionsRequest{}); err != nil {
		t.Fatal(err)
	}
	sid := uuid.NewString()
	r, err := e.c.Send(hdr("carol"), &macpv1.SendRequest{Envelope: envelope(sid, "SessionStart", "m0", startPayload(t, "carol", "dave"))})
	if err != nil || !r.Ack.Ok {
		t.Fatalf("send with header: %v %v", r, err)
	}
	if md := e.getSession(t, "dave", sid); md.Initiator != "carol" {
		t.Fatalf("initiator %q", md.Initiator)
	}
	both := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer erin", "x-macp-agent-id", "carol")
	_, err = e.c.GetSession(both, &macpv1.GetSessionRequest{SessionId: sid})
	wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN") // erin, not carol
}
