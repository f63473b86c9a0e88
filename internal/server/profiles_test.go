package server_test

// The two profiles over gRPC (docs/spec-decisions.md "Profiles"):
// SuspendSession/ResumeSession (RFC-MACP-0001 §7.5), CancelSession ending
// EXPIRED (2026-04) or CANCELLED (latest), ListSessions pagination
// (macp-proto 0.1.6), the lifecycle events of the new states, and the
// profile advertised in Initialize and GetManifest.

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

func profileConfig(profile string) config.Config {
	cfg := testConfig()
	cfg.Profile = profile
	return cfg
}

func TestCancelStatePerProfile(t *testing.T) {
	for _, tc := range []struct {
		profile string
		state   macpv1.SessionState
		event   macpv1.SessionLifecycleEvent_EventType
	}{
		{"2026-04", macpv1.SessionState_SESSION_STATE_EXPIRED, macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED},
		{"latest", macpv1.SessionState_SESSION_STATE_CANCELLED, macpv1.SessionLifecycleEvent_EVENT_TYPE_CANCELLED},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			e := startApp(t, profileConfig(tc.profile))
			events := e.watchSessions(t, "bob", 1)
			sid := e.startSession(t, "alice", "alice", "bob")
			wantEvent(t, events, created, sid, macpv1.SessionState_SESSION_STATE_OPEN)
			r, err := e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: sid, Reason: "stop"})
			if err != nil || !r.Ack.Ok || r.Ack.SessionState != tc.state {
				t.Fatalf("cancel: %v %v", r, err)
			}
			wantEvent(t, events, tc.event, sid, tc.state)
			if md := e.getSession(t, "bob", sid); md.State != tc.state {
				t.Fatalf("state %v, want %v", md.State, tc.state)
			}
			wantNack(t, e.send(t, "alice", envelope(sid, "Proposal", "m9", proposalPayload(t, "p9"))), "SESSION_NOT_OPEN")
		})
	}
}

func TestSuspendResumeOverGRPC(t *testing.T) {
	for _, profile := range []string{"2026-04", "latest"} {
		t.Run(profile, func(t *testing.T) {
			e := startApp(t, profileConfig(profile))
			events := e.watchSessions(t, "bob", 1)
			sid := e.startSession(t, "alice", "alice", "bob")
			wantEvent(t, events, created, sid, macpv1.SessionState_SESSION_STATE_OPEN)
			before := e.getSession(t, "alice", sid)

			// Authority, unknown sessions, a missing id, resume of an OPEN
			// session: refused, nothing changes.
			_, err := e.c.SuspendSession(as("bob"), &macpv1.SuspendSessionRequest{SessionId: sid})
			wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
			_, err = e.c.SuspendSession(as("alice"), &macpv1.SuspendSessionRequest{SessionId: uuid.NewString()})
			wantStatus(t, err, codes.NotFound, "SESSION_NOT_FOUND")
			_, err = e.c.SuspendSession(as("alice"), &macpv1.SuspendSessionRequest{})
			wantStatus(t, err, codes.InvalidArgument, "INVALID_ENVELOPE")
			_, err = e.c.ResumeSession(as("alice"), &macpv1.ResumeSessionRequest{SessionId: sid})
			wantStatus(t, err, codes.FailedPrecondition, "SESSION_NOT_OPEN")
			_, err = e.c.SuspendSession(context.Background(), &macpv1.SuspendSessionRequest{SessionId: sid})
			wantStatus(t, err, codes.Unauthenticated, "")
			if after := e.getSession(t, "alice", sid); !proto.Equal(before, after) {
				t.Fatal("a refused suspend changed the session")
			}

			r, err := e.c.SuspendSession(as("alice"), &macpv1.SuspendSessionRequest{SessionId: sid, Reason: "human review"})
			if err != nil || !r.Ack.Ok || r.Ack.SessionState != macpv1.SessionState_SESSION_STATE_SUSPENDED || r.Ack.MessageId == "" {
				t.Fatalf("suspend: %v %v", r, err)
			}
			wantEvent(t, events, macpv1.SessionLifecycleEvent_EVENT_TYPE_SUSPENDED, sid, macpv1.SessionState_SESSION_STATE_SUSPENDED)
			if md := e.getSession(t, "bob", sid); md.State != macpv1.SessionState_SESSION_STATE_SUSPENDED {
				t.Fatalf("state %v", md.State)
			}
			wantNack(t, e.send(t, "alice", envelope(sid, "Proposal", "m1", proposalPayload(t, "p1"))), "SESSION_NOT_OPEN")
			_, err = e.c.SuspendSession(as("alice"), &macpv1.SuspendSessionRequest{SessionId: sid})
			wantStatus(t, err, codes.FailedPrecondition, "SESSION_NOT_OPEN")
			// A client may not send the runtime's control envelopes.
			wantNack(t, e.send(t, "alice", envelope(sid, "SessionResume", "m2", nil)), "FORBIDDEN")

			// A watcher that joins now sees the suspended session in its
			// initial sync.
			late := e.watchSessions(t, "alice", 2)
			wantEvent(t, late, created, sid, macpv1.SessionState_SESSION_STATE_SUSPENDED)

			r2, err := e.c.ResumeSession(as("alice"), &macpv1.ResumeSessionRequest{SessionId: sid, Reason: "approved"})
			if err != nil || !r2.Ack.Ok || r2.Ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
				t.Fatalf("resume: %v %v", r2, err)
			}
			wantEvent(t, events, macpv1.SessionLifecycleEvent_EVENT_TYPE_RESUMED, sid, macpv1.SessionState_SESSION_STATE_OPEN)
			e.mustAccept(t, "alice", envelope(sid, "Proposal", "m3", proposalPayload(t, "p1")))

			// The history holds the runtime's two control envelopes, in order.
			var types []string
			for _, rec := range e.history(t, sid) {
				types = append(types, rec.Envelope.GetMessageType())
			}
			want := []string{"SessionStart", "SessionSuspend", "SessionResume", "Proposal"}
			if len(types) != len(want) {
				t.Fatalf("history %v, want %v", types, want)
			}
			for i := range want {
				if types[i] != want[i] {
					t.Fatalf("history %v, want %v", types, want)
				}
			}
		})
	}
}

// ListSessions pagination: page_size 0 without a token lists everything
// (April clients), pages walk every session once in ListSessions order, a
// token this runtime did not issue or a negative size is INVALID_ARGUMENT.
func TestListSessionsPages(t *testing.T) {
	e, clk := startClocked(t)
	var all []string
	for i := 0; i < 7; i++ {
		all = append(all, e.startSession(t, "alice", "alice"))
		clk.Advance(time.Millisecond)
	}
	r, err := e.c.ListSessions(as("alice"), &macpv1.ListSessionsRequest{})
	if err != nil || len(r.Sessions) != 7 || r.NextPageToken != "" {
		t.Fatalf("unpaged: %d sessions, token %q, %v", len(r.GetSessions()), r.GetNextPageToken(), err)
	}
	var walked []string
	token := ""
	for page := 0; ; page++ {
		r, err := e.c.ListSessions(as("alice"), &macpv1.ListSessionsRequest{PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Sessions) > 3 {
			t.Fatalf("page of %d", len(r.Sessions))
		}
		for _, md := range r.Sessions {
			walked = append(walked, md.SessionId)
		}
		// A session started mid-walk (latest start time) is listed once,
		// on a later page.
		if page == 0 {
			clk.Advance(time.Millisecond)
			all = append(all, e.startSession(t, "alice", "alice"))
		}
		if r.NextPageToken == "" {
			break
		}
		token = r.NextPageToken
		if page > 10 {
			t.Fatal("the walk does not end")
		}
	}
	if len(walked) != len(all) {
		t.Fatalf("walked %v, want %v", walked, all)
	}
	for i := range all {
		if walked[i] != all[i] {
			t.Fatalf("walked %v, want %v", walked, all)
		}
	}
	// Another caller's walk shows only its own sessions.
	r, err = e.c.ListSessions(as("bob"), &macpv1.ListSessionsRequest{PageSize: 2})
	if err != nil || len(r.Sessions) != 0 || r.NextPageToken != "" {
		t.Fatalf("bob: %v %v", r, err)
	}
	for _, bad := range []*macpv1.ListSessionsRequest{
		{PageToken: "not-a-token"}, {PageSize: 2, PageToken: "cDE6MTIz"}, {PageSize: -1},
	} {
		_, err := e.c.ListSessions(as("alice"), bad)
		wantStatus(t, err, codes.InvalidArgument, "")
	}
}

func TestProfileAdvertised(t *testing.T) {
	for _, tc := range []struct{ set, want string }{{"", "2026-04"}, {"latest", "2026-09"}} {
		cfg := testConfig()
		if tc.set != "" {
			cfg.Profile = tc.set
		}
		e := startApp(t, cfg)
		init, err := e.c.Initialize(context.Background(), &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}})
		if err != nil {
			t.Fatal(err)
		}
		f := init.Capabilities.GetExperimental().GetFeatures()
		if f["macpd.profile"] != tc.want || f["macpd.profiles"] != "2026-04,2026-09" || f["session_suspension"] != "true" {
			t.Errorf("%q: features %v", tc.set, f)
		}
		m, err := e.c.GetManifest(context.Background(), &macpv1.GetManifestRequest{})
		if err != nil || m.Manifest.Metadata["profile"] != tc.want {
			t.Errorf("%q: manifest %v %v", tc.set, m, err)
		}
	}
}

// Issue 31: a GetSession request carrying coord.HeaderSessionProfile gets
// the session's recorded profile back in a response header of that key
// (SessionMetadata does not carry it; snapshot readers need it); a request
// without the key gets no such header, a caller GetSession refuses gets
// neither the metadata nor the header.
func TestGetSessionProfileHeader(t *testing.T) {
	for _, profile := range []string{"2026-04", "latest"} {
		t.Run(profile, func(t *testing.T) {
			e := startApp(t, profileConfig(profile))
			sid := e.startSession(t, "alice", "alice", "bob")
			want := map[string]string{"2026-04": "2026-04", "latest": "2026-09"}[profile]
			ask := func(agent string, withKey bool) (metadata.MD, error) {
				ctx := as(agent)
				if withKey {
					ctx = metadata.AppendToOutgoingContext(ctx, coord.HeaderSessionProfile, "1")
				}
				var hdr metadata.MD
				_, err := e.c.GetSession(ctx, &macpv1.GetSessionRequest{SessionId: sid}, grpc.Header(&hdr))
				return hdr, err
			}
			hdr, err := ask("bob", true)
			if err != nil || len(hdr.Get(coord.HeaderSessionProfile)) != 1 || hdr.Get(coord.HeaderSessionProfile)[0] != want {
				t.Fatalf("asked: %v %v, want %s", hdr, err, want)
			}
			if hdr, err := ask("bob", false); err != nil || len(hdr.Get(coord.HeaderSessionProfile)) != 0 {
				t.Fatalf("not asked: %v %v", hdr, err)
			}
			hdr, err = ask("mallory", true)
			wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
			if len(hdr.Get(coord.HeaderSessionProfile)) != 0 {
				t.Fatalf("a refused caller got the header: %v", hdr)
			}
		})
	}
}
