package server_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// RFC-MACP-0006 §3.5, checklist OBS-1, START-10, TTL-4: GetSession returns
// the bound metadata to the initiator and the declared participants; others
// are FORBIDDEN (PERMISSION_DENIED), unknown ids SESSION_NOT_FOUND
// (NOT_FOUND), and an empty id is INVALID_ARGUMENT; each failure carries the
// code as a MACPError.
func TestGetSession(t *testing.T) {
	e := startApp(t, testConfig())
	sid := uuid.NewString()
	ts := time.Now().UnixMilli()
	start := envelope(sid, "SessionStart", "m0", startPayload(t, "alice", "bob"))
	start.TimestampUnixMs = ts
	e.mustAccept(t, "coord", start)

	for _, who := range []string{"coord", "alice", "bob"} {
		md := e.getSession(t, who, sid)
		if md.SessionId != sid || md.Mode != decisionMode || md.State != macpv1.SessionState_SESSION_STATE_OPEN ||
			md.Initiator != "coord" || !slices.Equal(md.Participants, []string{"alice", "bob"}) ||
			md.ModeVersion != "1.0.0" || md.ConfigurationVersion != "cfg-1" {
			t.Errorf("%s sees %v", who, md)
		}
		if md.ExpiresAtUnixMs != ts+60000 {
			t.Errorf("expires_at %d, want timestamp+ttl %d (TTL-1)", md.ExpiresAtUnixMs, ts+60000)
		}
		if md.StartedAtUnixMs <= 0 {
			t.Errorf("started_at %d", md.StartedAtUnixMs)
		}
	}

	_, err := e.c.GetSession(as("carol"), &macpv1.GetSessionRequest{SessionId: sid})
	wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
	_, err = e.c.GetSession(as("alice"), &macpv1.GetSessionRequest{SessionId: uuid.NewString()})
	wantStatus(t, err, codes.NotFound, "SESSION_NOT_FOUND")
	_, err = e.c.GetSession(as("alice"), &macpv1.GetSessionRequest{})
	wantStatus(t, err, codes.InvalidArgument, "INVALID_ENVELOPE")
}

// RFC-MACP-0006 §3.5 / checklist OBS-1: participant_activity lists each
// sender with at least one accepted message, with its count.
func TestGetSessionParticipantActivity(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "alice", "alice", "bob", "carol")
	e.mustAccept(t, "bob", envelope(sid, "Proposal", "m1", proposalPayload(t, "p1")))
	e.mustAccept(t, "bob", envelope(sid, "Proposal", "m2", proposalPayload(t, "p2")))
	md := e.getSession(t, "carol", sid)
	var bob *macpv1.ParticipantActivity
	for _, a := range md.ParticipantActivity {
		switch a.ParticipantId {
		case "bob":
			bob = a
		case "carol":
			t.Errorf("carol sent nothing but has activity %v", a)
		}
	}
	if bob == nil || bob.MessageCount != 2 || bob.LastMessageAtUnixMs <= 0 {
		t.Fatalf("bob's activity %v (all: %v)", bob, md.ParticipantActivity)
	}
}

// RFC-MACP-0001 §7.5, checklist CANCEL-1..4: only the initiator cancels;
// OPEN -> EXPIRED with an ok Ack naming the runtime-emitted SessionCancel;
// repeating it, or cancelling a RESOLVED session, answers ok with the
// current state; other callers get PERMISSION_DENIED/FORBIDDEN, unknown
// sessions NOT_FOUND/SESSION_NOT_FOUND, all without changing the session.
func TestCancelSession(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "alice", "alice", "bob")
	before := e.getSession(t, "alice", sid)

	for _, who := range []string{"bob", "carol"} {
		_, err := e.c.CancelSession(as(who), &macpv1.CancelSessionRequest{SessionId: sid, Reason: "no"})
		wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
	}
	if after := e.getSession(t, "alice", sid); !proto.Equal(before, after) {
		t.Fatalf("refused cancel changed the session")
	}
	_, err := e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: uuid.NewString()})
	wantStatus(t, err, codes.NotFound, "SESSION_NOT_FOUND")
	_, err = e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{})
	wantStatus(t, err, codes.InvalidArgument, "INVALID_ENVELOPE")

	r, err := e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: sid, Reason: "done"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Ack.Ok || r.Ack.SessionState != macpv1.SessionState_SESSION_STATE_EXPIRED || r.Ack.SessionId != sid || r.Ack.MessageId == "" {
		t.Fatalf("cancel ack %v", r.Ack)
	}
	if md := e.getSession(t, "bob", sid); md.State != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("state after cancel %v", md.State)
	}
	// TERM-2: later session messages are SESSION_NOT_OPEN.
	wantNack(t, e.send(t, "alice", envelope(sid, "Proposal", "m9", proposalPayload(t, "p9"))), "SESSION_NOT_OPEN")

	// CANCEL-4: idempotent.
	r, err = e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: sid})
	if err != nil || !r.Ack.Ok || r.Ack.SessionState != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("second cancel: %v %v", r, err)
	}
	done := e.startSession(t, "alice", "alice", "bob")
	e.resolve(t, "alice", done)
	r, err = e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: done})
	if err != nil || !r.Ack.Ok || r.Ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("cancel of a resolved session: %v %v", r, err)
	}
	if md := e.getSession(t, "alice", done); md.State != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("cancel changed a resolved session to %v", md.State)
	}
}

// RFC-MACP-0006 §3.8, checklist OBS-2 (⚠C4: all known sessions, active and
// terminal, as the reference runtime) and RFC-MACP-0004 §4: each caller
// lists only the sessions it may see, oldest first.
func TestListSessions(t *testing.T) {
	e, clk := startClocked(t)
	s1 := e.startSession(t, "alice", "alice", "bob")
	clk.Advance(2 * time.Millisecond)
	s2 := e.startSession(t, "bob", "bob", "carol")
	clk.Advance(2 * time.Millisecond)
	s3 := e.startSession(t, "alice", "alice")
	e.resolve(t, "alice", s3)

	list := func(who string) []string {
		r, err := e.c.ListSessions(as(who), &macpv1.ListSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, md := range r.Sessions {
			ids = append(ids, md.SessionId)
		}
		return ids
	}
	for who, want := range map[string][]string{
		"alice": {s1, s3},
		"bob":   {s1, s2},
		"carol": {s2},
		"dave":  nil,
	} {
		if got := list(who); !slices.Equal(got, want) {
			t.Errorf("%s lists %v, want %v", who, got, want)
		}
	}
	r, err := e.c.ListSessions(as("alice"), &macpv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Sessions[1].State; st != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Errorf("resolved session listed as %v", st)
	}
}
