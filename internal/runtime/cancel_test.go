package runtime

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// CANCEL-1..5 (RFC-MACP-0001 §7.3).
func TestCancelSession(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sub := r.Lifecycle.Subscribe()
	defer r.Lifecycle.Unsubscribe(sub)
	ctx := context.Background()
	sid := openSession(t, r, 0)
	nextEvent(t, sub, sid) // CREATED

	// CANCEL-2: only the initiator; participants, outsiders and observers
	// are FORBIDDEN, and nothing changes.
	for _, id := range []coord.Identity{aliceID, outsiderID, observerID} {
		ack, cerr := r.Cancel(ctx, id, sid, "nope")
		if ack != nil || cerr == nil || cerr.Code != coord.CodeForbidden {
			t.Fatalf("cancel by %s: %v %v", id.Sender, ack, cerr)
		}
	}
	if n := len(stored(t, st, sid)); n != 2 {
		t.Fatalf("%d records after forbidden cancels", n)
	}

	// CANCEL-1: unknown session.
	if _, cerr := r.Cancel(ctx, initID, newSID(), "x"); cerr == nil || cerr.Code != coord.CodeSessionNotFound {
		t.Fatalf("unknown session: %v", cerr)
	}

	// CANCEL-5: clients cannot send SessionCancel.
	forged := sessionEnv(sid, "forged", coord.TypeSessionCancel,
		mustMarshal(&macpv1.SessionCancelPayload{Reason: "x", CancelledBy: initID.Sender}))
	if ack := r.Send(ctx, initID, forged); ack.Ok {
		t.Fatalf("SessionCancel via Send accepted: %v", ack)
	}

	// CANCEL-3: OPEN -> EXPIRED with a runtime-emitted SessionCancel record.
	ack, cerr := r.Cancel(ctx, initID, sid, "changed my mind")
	if cerr != nil || !ack.Ok || ack.SessionState != macpv1.SessionState_SESSION_STATE_EXPIRED || ack.SessionId != sid {
		t.Fatalf("cancel: %v %v", ack, cerr)
	}
	recs := stored(t, st, sid)
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	rec := recs[2]
	env := rec.Envelope
	if rec.Kind != session.KindCancel || env == nil || env.MessageType != coord.TypeSessionCancel ||
		env.Sender != coord.RuntimeSender || env.SessionId != sid || env.MessageId == "" || env.MessageId != ack.MessageId {
		t.Fatalf("cancel record %+v envelope %v (ack message id %q)", rec, env, ack.MessageId)
	}
	var p macpv1.SessionCancelPayload
	if err := proto.Unmarshal(env.Payload, &p); err != nil || p.CancelledBy != initID.Sender || p.Reason != "changed my mind" {
		t.Fatalf("cancel payload %v %v", &p, err)
	}
	ev := nextEvent(t, sub, sid)
	if ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED || ev.Session.State != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("event %v", ev.Type)
	}
	// The runtime's envelope is not participant activity.
	for _, a := range inspect(t, r, sid).activity {
		if a.ParticipantID == coord.RuntimeSender {
			t.Fatalf("runtime counted as a participant: %+v", a)
		}
	}
	wantCode(t, r.Send(ctx, aliceID, proposalEnv(sid, "m2")), coord.CodeSessionNotOpen)

	// CANCEL-4: idempotent on terminal sessions; no new record or event.
	for range 2 {
		ack, cerr = r.Cancel(ctx, initID, sid, "again")
		if cerr != nil || !ack.Ok || ack.SessionState != macpv1.SessionState_SESSION_STATE_EXPIRED || ack.MessageId != "" {
			t.Fatalf("repeat cancel: %v %v", ack, cerr)
		}
	}
	// Still FORBIDDEN for others even when terminal.
	if _, cerr := r.Cancel(ctx, aliceID, sid, "x"); cerr == nil || cerr.Code != coord.CodeForbidden {
		t.Fatalf("terminal cancel by participant: %v", cerr)
	}
	if n := len(stored(t, st, sid)); n != 3 {
		t.Fatalf("%d records after repeat cancels", n)
	}
	noEvent(t, sub, sid, 50*time.Millisecond)

	// A RESOLVED session: cancel answers ok RESOLVED, writes nothing.
	res := openSession(t, r, 0)
	mustOK(t, r, initID, commitEnv(res, "c", "c1"))
	ack, cerr = r.Cancel(ctx, initID, res, "late")
	if cerr != nil || !ack.Ok || ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("cancel resolved: %v %v", ack, cerr)
	}
	if n := len(stored(t, st, res)); n != 3 {
		t.Fatalf("%d records after cancelling a resolved session", n)
	}
}

// CANCEL-4 "Storage failure -> ok=false INTERNAL_ERROR": the session stays
// OPEN (healed from the store) and a later cancel succeeds; a cancel whose
// append is stalled is not acked, and concurrent cancels write one record.
func TestCancelDurability(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	ctx := context.Background()
	sid := openSession(t, r, 0)

	st.failNext(sid, 1)
	ack, cerr := r.Cancel(ctx, initID, sid, "x")
	if cerr != nil || ack.Ok || ack.Error.Code != string(coord.CodeInternalError) {
		t.Fatalf("failed cancel: %v %v", ack, cerr)
	}
	if v := inspect(t, r, sid); v.status != session.Open || v.seq != 2 {
		t.Fatalf("after failed cancel: %+v", v)
	}

	stall := st.block(sid, false)
	type res struct {
		ack *macpv1.Ack
		err *coord.Error
	}
	results := make(chan res, 4)
	for range 4 {
		go func() {
			a, e := r.Cancel(ctx, initID, sid, "y")
			results <- res{a, e}
		}()
	}
	waitEntered(t, stall)
	nothingFor(t, results, 100*time.Millisecond, "a cancel ack before the record is durable")
	stall.release()
	for range 4 {
		got := recv(t, results, "cancel ack")
		if got.err != nil || !got.ack.Ok || got.ack.SessionState != macpv1.SessionState_SESSION_STATE_EXPIRED {
			t.Fatalf("cancel: %v %v", got.ack, got.err)
		}
	}
	if recs := stored(t, st, sid); len(recs) != 3 || countTerminal(recs) != 1 {
		t.Fatalf("stored %d records", len(recs))
	}
}
