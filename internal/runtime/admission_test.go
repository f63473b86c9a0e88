package runtime

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
)

// MaxOpenSessionsPerInitiator (RATE_LIMITED, RFC-MACP-0004 §5): concurrent
// starts by one identity never exceed the cap; any way a session ends
// (Commitment, cancel, TTL) frees a slot; other identities are unaffected;
// an identity's own cap overrides the default.
func TestMaxOpenSessionsPerInitiator(t *testing.T) {
	r := newRT(t, newFaultStore(), Options{MaxOpenSessionsPerInitiator: 2})
	ctx := context.Background()

	var okCount atomic.Int32
	var mu sync.Mutex
	var opened []string
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := newSID()
			ack := r.Send(ctx, initID, startEnv(sid, msgID("s", i), 60_000))
			if ack.Ok {
				okCount.Add(1)
				mu.Lock()
				opened = append(opened, sid)
				mu.Unlock()
				return
			}
			if ack.Error.Code != string(coord.CodeRateLimited) {
				t.Errorf("start %d: %v", i, ack)
			}
		}()
	}
	wg.Wait()
	if okCount.Load() != 2 {
		t.Fatalf("%d concurrent starts succeeded, cap is 2", okCount.Load())
	}
	// Another identity has its own count.
	mustOK(t, r, aliceID, startEnv(newSID(), "a0", 60_000))

	// Resolve one: a slot frees.
	mustOK(t, r, initID, proposalEnv(opened[0], "m1"))
	mustOK(t, r, initID, commitEnv(opened[0], "c", "c1"))
	third := newSID()
	mustOK(t, r, initID, startEnv(third, "t0", 60_000))
	wantCode(t, r.Send(ctx, initID, startEnv(newSID(), "t1", 60_000)), coord.CodeRateLimited)

	// Cancel one: a slot frees.
	if ack, err := r.Cancel(ctx, initID, third, "x"); err != nil || !ack.Ok {
		t.Fatalf("cancel %v %v", ack, err)
	}
	short := newSID()
	mustOK(t, r, initID, startEnv(short, "t2", 40))
	// TTL: a slot frees once the short session expired.
	eventually(t, 2*time.Second, "a slot after expiry", func() bool {
		return r.Send(ctx, initID, startEnv(newSID(), "t3", 60_000)).Ok
	})
	wantCode(t, r.Send(ctx, initID, startEnv(newSID(), "t4", 60_000)), coord.CodeRateLimited)

	// Rejected starts hold no slot: an invalid start is INVALID_ENVELOPE,
	// not RATE_LIMITED, and leaves the count alone.
	r.mu.RLock()
	n := r.openBy[initID.Sender]
	r.mu.RUnlock()
	if n != 2 {
		t.Fatalf("open count %d, want 2", n)
	}

	// Capabilities.MaxOpenSessions overrides the default.
	vip := coord.Identity{Sender: "agent://vip", Caps: coord.Capabilities{MaxOpenSessions: 3}}
	for i := range 3 {
		mustOK(t, r, vip, startEnv(newSID(), msgID("v", i), 60_000))
	}
	wantCode(t, r.Send(ctx, vip, startEnv(newSID(), "v3", 60_000)), coord.CodeRateLimited)
}

// Starting capabilities: CannotStartSessions and AllowedModes are
// FORBIDDEN and leave nothing behind.
func TestStartCapabilities(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	ctx := context.Background()
	for _, id := range []coord.Identity{
		{Sender: "agent://ro", Caps: coord.Capabilities{CannotStartSessions: true}},
		{Sender: "agent://other", Caps: coord.Capabilities{AllowedModes: []string{"macp.mode.task.v1"}}},
	} {
		sid := newSID()
		wantCode(t, r.Send(ctx, id, startEnv(sid, "m0", 60_000)), coord.CodeForbidden)
		if _, code := getState(r, observerID, sid); code != coord.CodeSessionNotFound {
			t.Fatalf("%s: %v", id.Sender, code)
		}
	}
	mustOK(t, r, coord.Identity{Sender: "agent://any", Caps: coord.Capabilities{AllowedModes: []string{"*"}}},
		startEnv(newSID(), "m0", 60_000))
	if st.calls.Load() != 1 {
		t.Fatalf("%d appends", st.calls.Load())
	}
}

// RFC-MACP-0004 §3: the sender is the authenticated identity; a
// self-asserted sender is overwritten, in the store and in the session.
func TestSenderBoundToIdentity(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := newSID()
	env := startEnv(sid, "m0", 60_000)
	env.Sender = "agent://someone-else"
	mustOK(t, r, initID, env)
	prop := proposalEnv(sid, "m1")
	prop.Sender = initID.Sender // alice pretends to be the initiator
	mustOK(t, r, aliceID, prop)
	recs := stored(t, st, sid)
	if recs[0].Envelope.Sender != initID.Sender || recs[1].Envelope.Sender != aliceID.Sender {
		t.Fatalf("stored senders %q %q", recs[0].Envelope.Sender, recs[1].Envelope.Sender)
	}
	// Alice cannot commit by claiming to be the initiator.
	c := commitEnv(sid, "c", "c1")
	c.Sender = initID.Sender
	wantCode(t, r.Send(context.Background(), aliceID, c), coord.CodeForbidden)
}

// GetSession / ListSessions visibility (checklist OBS; RFC-MACP-0001
// session isolation): the initiator and declared participants see a
// session, others get FORBIDDEN and do not see it listed, an observer sees
// everything. ListSessions is sorted by start time then id.
func TestSessionVisibility(t *testing.T) {
	clk := clocktest.New()
	r := newRT(t, newFaultStore(), Options{Clock: clk})
	ctx := context.Background()
	a := openSession(t, r, 0)
	clk.Advance(2 * time.Millisecond) // b starts after a
	// A session alice starts herself, with carol and dave as participants.
	b := newSID()
	env := startEnv(b, "m0", 60_000)
	env.Payload = mustMarshal(&macpv1.SessionStartPayload{
		Participants: []string{"agent://carol", "agent://dave"},
		ModeVersion:  decision.ModeVersion, ConfigurationVersion: cfgVersion, TtlMs: 60_000,
	})
	mustOK(t, r, aliceID, env)

	for _, c := range []struct {
		id   coord.Identity
		sid  string
		want coord.Code
	}{
		{initID, a, ""}, {aliceID, a, ""}, {bobID, a, ""}, {observerID, a, ""},
		{outsiderID, a, coord.CodeForbidden},
		{aliceID, b, ""}, {coord.Identity{Sender: "agent://carol"}, b, ""},
		{initID, b, coord.CodeForbidden}, {bobID, b, coord.CodeForbidden}, {observerID, b, ""},
		{initID, newSID(), coord.CodeSessionNotFound},
	} {
		md, err := r.GetSession(ctx, c.id, c.sid)
		switch {
		case c.want == "" && (err != nil || md.SessionId != c.sid):
			t.Errorf("%s reading %s: %v %v", c.id.Sender, c.sid, md, err)
		case c.want != "" && (err == nil || err.Code != c.want || md != nil):
			t.Errorf("%s reading %s: want %s, got %v %v", c.id.Sender, c.sid, c.want, md, err)
		}
	}

	list := func(id coord.Identity) []string {
		var out []string
		for _, md := range r.ListSessions(ctx, id) {
			out = append(out, md.SessionId)
		}
		return out
	}
	for _, c := range []struct {
		id   coord.Identity
		want []string
	}{
		{initID, []string{a}},
		{bobID, []string{a}},
		{aliceID, []string{a, b}},
		{coord.Identity{Sender: "agent://dave"}, []string{b}},
		{outsiderID, nil},
		{observerID, []string{a, b}},
	} {
		if got := list(c.id); !slices.Equal(got, c.want) {
			t.Errorf("ListSessions for %s: %v, want %v", c.id.Sender, got, c.want)
		}
	}

	// Terminal sessions stay listed and readable.
	mustOK(t, r, initID, commitEnv(a, "c", "c1"))
	if s, _ := getState(r, bobID, a); s != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("state %v", s)
	}
	if got := list(observerID); len(got) != 2 {
		t.Fatalf("observer lists %v", got)
	}

	// MayObserveMetadata agrees with GetSession.
	md, _ := r.GetSession(ctx, observerID, b)
	for _, id := range []coord.Identity{initID, aliceID, bobID, outsiderID, observerID, {Sender: "agent://carol"}} {
		_, err := r.GetSession(ctx, id, b)
		if MayObserveMetadata(id, md) != (err == nil) {
			t.Errorf("MayObserveMetadata(%s) disagrees with GetSession (%v)", id.Sender, err)
		}
	}
}

// Send rejects what the core rejects without touching anything, and a
// rejection consumes no dedup slot (ADM-30): a rejected message_id can be
// accepted later.
func TestRejectionConsumesNothing(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	ctx := context.Background()
	sid := openSession(t, r, 0)
	calls := st.calls.Load()

	// Vote for a proposal that does not exist yet: INVALID_ENVELOPE.
	wantCode(t, r.Send(ctx, aliceID, voteEnv(sid, "v1", "p-later")), coord.CodeInvalidEnvelope)
	// Outsider: FORBIDDEN.
	wantCode(t, r.Send(ctx, outsiderID, proposalEnv(sid, "o1")), coord.CodeForbidden)
	// Unknown session.
	wantCode(t, r.Send(ctx, aliceID, proposalEnv(newSID(), "x")), coord.CodeSessionNotFound)
	// Wrong version.
	bad := proposalEnv(sid, "bad")
	bad.MacpVersion = "2.0"
	wantCode(t, r.Send(ctx, aliceID, bad), coord.CodeUnsupportedProtocolVersion)
	wantCode(t, r.Send(ctx, aliceID, nil), coord.CodeInvalidEnvelope)
	if st.calls.Load() != calls {
		t.Fatal("a rejection reached the store")
	}
	mustOK(t, r, initID, proposalEnv(sid, "later"))
	// The same message id as the rejected vote, now valid.
	mustOK(t, r, aliceID, voteEnv(sid, "v1", "p-later"))
	if v := inspect(t, r, sid); v.seq != 4 {
		t.Fatalf("seq %d", v.seq)
	}
}
