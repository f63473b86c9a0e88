package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// TTL-1, TTL-2: a session with ttl_ms=50 expires on time with no further
// message: when the clock reaches the deadline the timer writes a
// KindExpire record stamped with the deadline, EXPIRED is published, later
// messages get SESSION_NOT_OPEN, and duplicates of accepted messages are
// still duplicates (IDEM-2, IDEM-4). The clock is a fake: nothing sleeps.
func TestTTLExpiresWithoutTraffic(t *testing.T) {
	clk := clocktest.New()
	st := newFaultStore()
	r := newRT(t, st, Options{Clock: clk})
	sub := r.Lifecycle.Subscribe()
	defer r.Lifecycle.Unsubscribe(sub)
	sid := newSID()
	start := startAt(clk, sid, "m0", 50)
	mustOK(t, r, initID, start)
	mustOK(t, r, aliceID, proposalEnv(sid, "m1"))
	if ev := nextEvent(t, sub, sid); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED {
		t.Fatalf("first event %v", ev.Type)
	}
	deadline := start.TimestampUnixMs + 50
	clk.Advance(49 * time.Millisecond)
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("state %v 1 ms before the deadline", s)
	}
	clk.Advance(time.Millisecond)
	ev := nextEvent(t, sub, sid)
	if ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED || ev.Session.State != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("event %v %v", ev.Type, ev.Session.State)
	}
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("GetSession reports %v after the EXPIRED event", s)
	}
	recs := stored(t, st, sid)
	last := recs[len(recs)-1]
	if len(recs) != 3 || last.Kind != session.KindExpire || last.Envelope != nil {
		t.Fatalf("stored %d records, last %s", len(recs), last.Kind)
	}
	if last.AcceptedAtMs != deadline {
		t.Fatalf("expired at %d, want the deadline %d", last.AcceptedAtMs, deadline)
	}
	if md, _ := r.GetSession(context.Background(), initID, sid); md.ExpiresAtUnixMs != deadline {
		t.Fatalf("expires_at %d, want %d (TTL-4)", md.ExpiresAtUnixMs, deadline)
	}

	ack := r.Send(context.Background(), aliceID, proposalEnv(sid, "m2"))
	wantCode(t, ack, coord.CodeSessionNotOpen)
	for _, env := range []*macpv1.Envelope{proposalEnv(sid, "m1"), startEnv(sid, "m0", 50)} {
		id := aliceID
		if env.MessageType == coord.TypeSessionStart {
			id = initID
		}
		if ack := r.Send(context.Background(), id, env); !ack.Ok || !ack.Duplicate {
			t.Fatalf("duplicate %s after expiry: %v", env.MessageId, ack)
		}
	}
	if n := len(stored(t, st, sid)); n != 3 {
		t.Fatalf("%d records after the late sends", n)
	}
	if r.timers.len() != 0 {
		t.Fatalf("%d deadlines left in the heap", r.timers.len())
	}
}

// Timer heap ordering: many sessions with staggered TTLs, started in random
// order, all expire exactly at their deadline (the fake clock is moved to
// each deadline in turn and the test waits for that session before moving
// on, so an early or late expiry shows in its record's instant), each with
// exactly one expire record, and the heap empties.
func TestStaggeredTTLsAllExpire(t *testing.T) {
	clk := clocktest.New()
	st := newFaultStore()
	r := newRT(t, st, Options{Clock: clk})
	const n = 40
	type started struct {
		sid      string
		deadline int64
	}
	all := make([]started, n)
	for _, i := range rand.Perm(n) {
		sid := newSID()
		ttl := int64(20 + 7*i)
		env := startAt(clk, sid, "m0", ttl)
		mustOK(t, r, initID, env)
		all[i] = started{sid, env.TimestampUnixMs + ttl}
	}
	// One long-lived session must not be disturbed.
	keep := openSession(t, r, 0)
	for i, s := range all {
		clk.Advance(time.Duration(s.deadline-clk.NowMs()) * time.Millisecond)
		eventually(t, 10*time.Second, fmt.Sprintf("session %d to expire", i), func() bool { return len(stored(t, st, s.sid)) == 2 })
	}
	for i, s := range all {
		recs := stored(t, st, s.sid)
		if len(recs) != 2 || recs[1].Kind != session.KindExpire || recs[1].AcceptedAtMs != s.deadline {
			t.Fatalf("session %d: %d records, last %s at %d, deadline %d", i, len(recs), recs[len(recs)-1].Kind, recs[len(recs)-1].AcceptedAtMs, s.deadline)
		}
	}
	if s, _ := getState(r, initID, keep); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("long session %v", s)
	}
	eventually(t, 10*time.Second, "the heap to hold only the long session", func() bool { return r.timers.len() == 1 })
	if l := r.ListSessions(context.Background(), initID); len(l) != n+1 {
		t.Fatalf("ListSessions lists %d", len(l))
	}
}

// TTL-3/TTL-2 with an injected clock: expiry follows Options.Clock, not
// the wall clock. While the clock stands before the deadline the session
// stays OPEN and the timer loop waits for the deadline (its timer is armed
// for it); once the clock passes the deadline the first access expires it
// lazily (Expire record, EXPIRED event, SESSION_NOT_OPEN) even though the
// timer, held by the test, has not run; when it runs it finds nothing to
// do, and it expires the session nobody touched.
func TestTTLFollowsInjectedClock(t *testing.T) {
	clk := clocktest.New()
	st := newFaultStore()
	r, due := newRTHeldTimers(t, st, Options{Clock: clk})
	sub := r.Lifecycle.Subscribe()
	defer r.Lifecycle.Unsubscribe(sub)

	sid := newSID()
	env := startAt(clk, sid, "m0", 30)
	mustOK(t, r, initID, env)
	nextEvent(t, sub, sid) // CREATED
	deadline := time.UnixMilli(env.TimestampUnixMs + 30)
	eventually(t, 10*time.Second, "the timer loop to wait for the deadline", func() bool {
		return slices.ContainsFunc(clk.Deadlines(), deadline.Equal)
	})
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("state %v before the deadline", s)
	}

	// Lazy expiry: a long TTL whose timer is held.
	lazy := newSID()
	mustOK(t, r, initID, startAt(clk, lazy, "m0", 60_000))
	nextEvent(t, sub, lazy) // CREATED
	clk.Advance(2 * time.Minute)
	wantCode(t, r.Send(context.Background(), aliceID, proposalEnv(lazy, "m1")), coord.CodeSessionNotOpen)
	recs := stored(t, st, lazy)
	if len(recs) != 2 || recs[1].Kind != session.KindExpire || recs[1].AcceptedAtMs != clk.NowMs() {
		t.Fatalf("lazy expiry stored %v", recs)
	}
	if ev := nextEvent(t, sub, lazy); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED {
		t.Fatalf("lazy session event %v", ev.Type)
	}
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("the untouched session is %v before its timer ran", s)
	}

	// Both deadlines are due: the timer hands both over; run them.
	fired := map[string]bool{}
	for range 2 {
		id := recv(t, due, "a due deadline")
		fired[id] = true
		r.expireByTimer(id)
	}
	if !fired[sid] || !fired[lazy] {
		t.Fatalf("timer fired for %v", fired)
	}
	if ev := nextEvent(t, sub, sid); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED {
		t.Fatalf("event %v", ev.Type)
	}
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("state %v after the timer ran", s)
	}
	// The lazy session's timer found nothing to do.
	eventually(t, 10*time.Second, "the timer's expiries to finish", func() bool { return r.timers.len() == 0 })
	r.Close() // waits for the expiry workers
	if n := len(stored(t, st, lazy)); n != 2 {
		t.Fatalf("lazy session has %d records", n)
	}
}
