package runtime

import (
	"context"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
)

// RFC-MACP-0004 §4 (the sender is authorized for the session), docs/
// security.md "Authorization matrix": an outsider's session message is
// FORBIDDEN before deduplication, the deadline and the mode, so it
// changes nothing and tells nothing - not whether a message id was
// accepted, not the session's state.
func TestOutsiderRefusedBeforeDedup(t *testing.T) {
	st := memstore.New()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0) // m0 start, m1 proposal
	before := inspect(t, r, sid)
	for _, env := range []*macpv1.Envelope{
		proposalEnv(sid, "m1"),            // replay of an accepted id: would be a duplicate
		proposalEnv(sid, "fresh"),         // a new message
		voteEnv(sid, "v1", "p-m1"),        // a participant's message type
		commitEnv(sid, "c1", "c1"),        // a Commitment
		sessionEnv(sid, "x", "Nope", nil), // an unknown type
	} {
		ack := r.Send(context.Background(), outsiderID, env)
		wantCode(t, ack, coord.CodeForbidden)
		if ack.Duplicate || ack.SessionState != 0 {
			t.Fatalf("outsider's %s ack leaks: %v", env.MessageType, ack)
		}
	}
	// Observers read but do not write.
	wantCode(t, r.Send(context.Background(), observerID, proposalEnv(sid, "obs")), coord.CodeForbidden)
	// SessionStart for an existing id: SESSION_ALREADY_EXISTS for anyone
	// but the initiator's resend, never a duplicate.
	ack := r.Send(context.Background(), outsiderID, startEnv(sid, "m0", 60_000))
	wantCode(t, ack, coord.CodeSessionAlreadyExists)
	if ack.Duplicate || ack.SessionState != 0 {
		t.Fatalf("outsider's SessionStart resend leaks: %v", ack)
	}
	if ack := mustSend(r, initID, startEnv(sid, "m0", 60_000)); !ack.Duplicate {
		t.Fatalf("initiator's resend is not a duplicate: %v", ack)
	}
	after := inspect(t, r, sid)
	if after.seq != before.seq || len(after.seen) != len(before.seen) {
		t.Fatalf("outsiders changed the session: %+v -> %+v", before, after)
	}
	// A terminal session: the outsider still gets FORBIDDEN, not
	// SESSION_NOT_OPEN.
	mustOK(t, r, initID, commitEnv(sid, "c1", "c1"))
	wantCode(t, r.Send(context.Background(), outsiderID, proposalEnv(sid, "late")), coord.CodeForbidden)
	// Unknown sessions stay SESSION_NOT_FOUND.
	wantCode(t, r.Send(context.Background(), outsiderID, proposalEnv(newSID(), "m")), coord.CodeSessionNotFound)
}

func mustSend(r *Runtime, id coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	return r.Send(context.Background(), id, env)
}

// An outsider's message to a session whose deadline passed does not expire
// it (it has no effect at all); the timer does. The timer is held by the
// test until the outsider's message was answered.
func TestOutsiderDoesNotTriggerExpiry(t *testing.T) {
	clk := clocktest.New()
	r, due := newRTHeldTimers(t, memstore.New(), Options{Clock: clk})
	sid := newSID()
	mustOK(t, r, initID, startAt(clk, sid, "m0", 10_000))
	clk.Advance(20 * time.Second)
	wantCode(t, r.Send(context.Background(), outsiderID, proposalEnv(sid, "m1")), coord.CodeForbidden)
	if v := inspect(t, r, sid); v.status != session.Open || v.seq != 1 {
		t.Fatalf("outsider's message changed the session: %+v", v)
	}
	r.expireByTimer(recv(t, due, "the session's deadline"))
	eventually(t, 10*time.Second, "the timer's expiry", func() bool {
		s, _ := getState(r, initID, sid)
		return s == macpv1.SessionState_SESSION_STATE_EXPIRED
	})
}

// Signals and Progress related to a session (correlation_session_id, or a
// Progress session_id) may only be sent by those who may read it, and are
// delivered to them only (MaySeeSignal). Unrelated ones go to everyone.
func TestSignalVisibility(t *testing.T) {
	r := newRT(t, memstore.New(), Options{})
	ctx := context.Background()
	sid := openSession(t, r, 0)
	related := signalEnv("s1", "progress")
	related.Payload = mustMarshal(&macpv1.SignalPayload{SignalType: "progress", CorrelationSessionId: sid})
	wantCode(t, r.Send(ctx, outsiderID, related), coord.CodeForbidden)
	related.MessageId = "s2"
	mustOK(t, r, aliceID, related)
	unknown := signalEnv("s3", "progress")
	unknown.Payload = mustMarshal(&macpv1.SignalPayload{SignalType: "progress", CorrelationSessionId: newSID()})
	mustOK(t, r, outsiderID, unknown) // a session that does not exist may be named
	plain := signalEnv("s4", "hello")
	mustOK(t, r, outsiderID, plain)

	related.Sender = aliceID.Sender
	unknown.Sender = outsiderID.Sender
	plain.Sender = outsiderID.Sender
	cases := []struct {
		id                     coord.Identity
		related, unknown, open bool
	}{
		{initID, true, true, true},
		{aliceID, true, true, true},
		{bobID, true, true, true},
		{observerID, true, true, true},
		{outsiderID, false, true, true},
		{coord.Identity{Sender: "agent://other"}, false, true, true},
		{coord.Identity{}, false, false, false}, // unauthenticated
	}
	for _, c := range cases {
		if got := r.MaySeeSignal(ctx, c.id, related); got != c.related {
			t.Errorf("%q sees related signal: %v, want %v", c.id.Sender, got, c.related)
		}
		if got := r.MaySeeSignal(ctx, c.id, unknown); got != c.unknown {
			t.Errorf("%q sees signal related to an unknown session: %v, want %v", c.id.Sender, got, c.unknown)
		}
		if got := r.MaySeeSignal(ctx, c.id, plain); got != c.open {
			t.Errorf("%q sees unrelated signal: %v, want %v", c.id.Sender, got, c.open)
		}
	}
	// Progress carrying a session id is related to that session.
	prog := &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: coord.TypeProgress, MessageId: "p1",
		SessionId: sid, Payload: mustMarshal(&macpv1.ProgressPayload{ProgressToken: "t", Progress: 1})}
	wantCode(t, r.Send(ctx, outsiderID, prog), coord.CodeForbidden)
	prog.Sender = aliceID.Sender
	if r.MaySeeSignal(ctx, outsiderID, prog) || !r.MaySeeSignal(ctx, bobID, prog) {
		t.Fatal("Progress with a session id is not scoped to the session")
	}
}
