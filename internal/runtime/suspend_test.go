package runtime

// RFC-MACP-0001 §7.5 in the shell: the timer follows the session through
// suspension (the pre-suspension deadline does not fire, the suspension
// cap fires exactly once), resume re-arms the moved deadline, and the
// lifecycle feed carries SUSPENDED, RESUMED and the terminal event.

import (
	"context"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

func TestSuspensionTimers(t *testing.T) {
	clk := clocktest.New()
	st := newFaultStore()
	r := newRT(t, st, Options{Clock: clk, Limits: session.Limits{MaxTTLMs: 3_600_000, MaxParticipants: 10, MaxPayloadBytes: 1 << 20, MaxSuspendMs: 500}})
	sub := r.Lifecycle.Subscribe()
	defer r.Lifecycle.Unsubscribe(sub)
	ctx := context.Background()

	// Session 1: TTL 100 ms, suspended at 40 ms, resumed at 300 ms (60 ms
	// banked), expires at 360 ms.
	sid := newSID()
	mustOK(t, r, initID, startAt(clk, sid, "m0", 100))
	t0 := clk.Now().UnixMilli()
	if ev := nextEvent(t, sub, sid); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED {
		t.Fatalf("event %v", ev.Type)
	}
	clk.Advance(40 * time.Millisecond)
	if _, err := r.Suspend(ctx, aliceID, sid, "x"); coord.CodeOf(err) != coord.CodeForbidden {
		t.Fatalf("suspend by a participant: %v", err)
	}
	ack, err := r.Suspend(ctx, initID, sid, "review")
	if err != nil || !ack.Ok || ack.SessionState != macpv1.SessionState_SESSION_STATE_SUSPENDED {
		t.Fatalf("suspend: %v %v", ack, err)
	}
	if ev := nextEvent(t, sub, sid); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_SUSPENDED || ev.Session.State != macpv1.SessionState_SESSION_STATE_SUSPENDED {
		t.Fatalf("event %v %v", ev.Type, ev.Session.GetState())
	}
	// The old deadline passes: nothing happens.
	clk.Advance(200 * time.Millisecond) // 240 ms
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_SUSPENDED {
		t.Fatalf("state %v after the pre-suspension deadline", s)
	}
	clk.Advance(60 * time.Millisecond) // 300 ms
	ack, err = r.Resume(ctx, initID, sid, "go")
	if err != nil || !ack.Ok || ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("resume: %v %v", ack, err)
	}
	if ev := nextEvent(t, sub, sid); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_RESUMED {
		t.Fatalf("event %v", ev.Type)
	}
	mustOK(t, r, aliceID, proposalEnv(sid, "m1"))
	clk.Advance(59 * time.Millisecond) // 359 ms
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("state %v before the moved deadline", s)
	}
	clk.Advance(time.Millisecond) // 360 ms
	if ev := nextEvent(t, sub, sid); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED {
		t.Fatalf("event %v", ev.Type)
	}
	recs := stored(t, st, sid)
	kinds := []session.Kind{session.KindStart, session.KindSuspend, session.KindResume, session.KindMessage, session.KindExpire}
	if len(recs) != len(kinds) {
		t.Fatalf("%d records", len(recs))
	}
	for i, k := range kinds {
		if recs[i].Kind != k {
			t.Fatalf("record %d is %s, want %s", i+1, recs[i].Kind, k)
		}
	}
	if at := recs[4].AcceptedAtMs; at != t0+360 {
		t.Fatalf("expired at +%d, want +360", at-t0)
	}

	// Session 2: suspended for good; the 500 ms cap expires it once, 501 ms
	// into the suspension.
	sid2 := newSID()
	mustOK(t, r, initID, startAt(clk, sid2, "m0", 100))
	nextEvent(t, sub, sid2)
	if _, err := r.Suspend(ctx, initID, sid2, "hold"); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, sub, sid2)
	clk.Advance(500 * time.Millisecond)
	if s, _ := getState(r, initID, sid2); s != macpv1.SessionState_SESSION_STATE_SUSPENDED {
		t.Fatalf("state %v at the cap", s)
	}
	clk.Advance(time.Millisecond)
	if ev := nextEvent(t, sub, sid2); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED {
		t.Fatalf("event %v", ev.Type)
	}
	clk.Advance(time.Second)
	recs = stored(t, st, sid2)
	expires := 0
	for _, rec := range recs {
		if rec.Kind == session.KindExpire {
			expires++
		}
	}
	if expires != 1 || recs[len(recs)-1].Kind != session.KindExpire {
		t.Fatalf("%d expire records", expires)
	}
	if _, err := r.Resume(ctx, initID, sid2, "late"); coord.CodeOf(err) != coord.CodeSessionNotOpen {
		t.Fatalf("resume after expiry: %v", err)
	}
	if r.timers.len() != 0 {
		t.Fatalf("%d deadlines left in the heap", r.timers.len())
	}
}
