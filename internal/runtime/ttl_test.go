package runtime

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// fakeClock is an injectable Options.Now that moves only when told.
type fakeClock struct{ ms atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// TTL-1, TTL-2: a session with ttl_ms=50 expires on time with no further
// message: the timer writes a KindExpire record, EXPIRED is published, later
// messages get SESSION_NOT_OPEN, and duplicates of accepted messages are
// still duplicates (IDEM-2, IDEM-4).
func TestTTLExpiresWithoutTraffic(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sub := r.Lifecycle.Subscribe()
	defer r.Lifecycle.Unsubscribe(sub)
	sid := newSID()
	start := startEnv(sid, "m0", 50)
	mustOK(t, r, initID, start)
	mustOK(t, r, aliceID, proposalEnv(sid, "m1"))
	if ev := nextEvent(t, sub, sid); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED {
		t.Fatalf("first event %v", ev.Type)
	}

	eventually(t, 2*time.Second, "GetSession to report EXPIRED", func() bool {
		s, _ := getState(r, initID, sid)
		return s == macpv1.SessionState_SESSION_STATE_EXPIRED
	})
	ev := nextEvent(t, sub, sid)
	if ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED || ev.Session.State != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("event %v %v", ev.Type, ev.Session.State)
	}
	recs := stored(t, st, sid)
	last := recs[len(recs)-1]
	if len(recs) != 3 || last.Kind != session.KindExpire || last.Envelope != nil {
		t.Fatalf("stored %d records, last %s", len(recs), last.Kind)
	}
	deadline := start.TimestampUnixMs + 50
	if last.AcceptedAtMs < deadline {
		t.Fatalf("expired at %d, before the deadline %d", last.AcceptedAtMs, deadline)
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
	noEvent(t, sub, sid, 50*time.Millisecond)
}

// Timer heap ordering: many sessions with staggered TTLs, started in random
// order, all expire (none early), each with exactly one expire record, and
// the heap empties.
func TestStaggeredTTLsAllExpire(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	const n = 40
	type started struct {
		sid      string
		deadline int64
	}
	var all []started
	for _, i := range rand.Perm(n) {
		sid := newSID()
		ttl := int64(20 + 7*i)
		env := startEnv(sid, "m0", ttl)
		mustOK(t, r, initID, env)
		all = append(all, started{sid, env.TimestampUnixMs + ttl})
	}
	// One long-lived session must not be disturbed.
	keep := openSession(t, r, 0)
	eventually(t, 3*time.Second, "every short session to expire", func() bool {
		for _, s := range all {
			recs := stored(t, st, s.sid)
			if len(recs) != 2 {
				return false
			}
		}
		return true
	})
	for _, s := range all {
		recs := stored(t, st, s.sid)
		if recs[1].Kind != session.KindExpire || recs[1].AcceptedAtMs < s.deadline {
			t.Fatalf("session %s: %s at %d, deadline %d", s.sid, recs[1].Kind, recs[1].AcceptedAtMs, s.deadline)
		}
	}
	if s, _ := getState(r, initID, keep); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("long session %v", s)
	}
	eventually(t, time.Second, "the heap to hold only the long session", func() bool { return r.timers.len() == 1 })
	if l := r.ListSessions(context.Background(), initID); len(l) != n+1 {
		t.Fatalf("ListSessions lists %d", len(l))
	}
}

// TTL-3/TTL-2 with an injected clock: expiry follows Options.Now, not the
// wall clock. A frozen clock never expires the session, however long we
// wait; once the clock passes the deadline the first access expires it
// lazily (Expire record, EXPIRED event, SESSION_NOT_OPEN) even before the
// timer loop wakes.
func TestTTLFollowsInjectedClock(t *testing.T) {
	clk := newFakeClock()
	st := newFaultStore()
	r := newRT(t, st, Options{Now: clk.Now})
	sub := r.Lifecycle.Subscribe()
	defer r.Lifecycle.Unsubscribe(sub)

	sid := newSID()
	env := startEnv(sid, "m0", 30)
	env.TimestampUnixMs = clk.ms.Load()
	mustOK(t, r, initID, env)
	nextEvent(t, sub, sid) // CREATED
	time.Sleep(100 * time.Millisecond)
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("expired by the wall clock: %v", s)
	}

	// Lazy expiry: a long TTL whose timer is far away.
	lazy := newSID()
	env = startEnv(lazy, "m0", 60_000)
	env.TimestampUnixMs = clk.ms.Load()
	mustOK(t, r, initID, env)
	nextEvent(t, sub, lazy) // CREATED
	clk.advance(2 * time.Minute)
	wantCode(t, r.Send(context.Background(), aliceID, proposalEnv(lazy, "m1")), coord.CodeSessionNotOpen)
	recs := stored(t, st, lazy)
	if len(recs) != 2 || recs[1].Kind != session.KindExpire || recs[1].AcceptedAtMs != clk.ms.Load() {
		t.Fatalf("lazy expiry stored %v", recs)
	}

	// The short session's timer re-checks the (now advanced) clock.
	eventually(t, 2*time.Second, "the short session to expire", func() bool {
		s, _ := getState(r, initID, sid)
		return s == macpv1.SessionState_SESSION_STATE_EXPIRED
	})
	got := map[string]bool{}
	for range 2 {
		ev := <-sub.C
		if ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED {
			t.Fatalf("event %v", ev.Type)
		}
		got[ev.Session.SessionId] = true
	}
	if !got[sid] || !got[lazy] {
		t.Fatalf("EXPIRED events for %v", got)
	}
	// The lazy session's timer fires later and finds nothing to do.
	if n := len(stored(t, st, lazy)); n != 2 {
		t.Fatalf("lazy session has %d records", n)
	}
}
