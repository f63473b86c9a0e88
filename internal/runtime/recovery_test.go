package runtime

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
)

// IDEM-4, IDEM-5 ("log is truth"), TTL-3 (replay uses the recorded
// deadline): a new Runtime over the same store recovers every session:
// metadata (state, deadline, participant activity), sequence numbers, the
// dedup set and the per-initiator open count; an OPEN session whose
// deadline passed while the runtime was down expires right after Start
// (the runtimes share a fake clock, moved past the deadline while down).
func TestRecoveryOverSameStore(t *testing.T) {
	mem := memstore.New()
	ctx := context.Background()
	clk := clocktest.New()
	r1 := New(mem, testModes(), defaultPolicies, Options{MaxOpenSessionsPerInitiator: 3, Clock: clk})
	if err := r1.Start(ctx); err != nil {
		t.Fatal(err)
	}

	open := openSession(t, r1, 0)
	mustOK(t, r1, aliceID, proposalEnv(open, "m2"))
	mustOK(t, r1, bobID, voteEnv(open, "m3", "p-m1"))
	resolved := openSession(t, r1, 0)
	mustOK(t, r1, initID, commitEnv(resolved, "c", "c1"))
	cancelled := openSession(t, r1, 0)
	if ack, err := r1.Cancel(ctx, initID, cancelled, "bye"); err != nil || !ack.Ok {
		t.Fatalf("cancel: %v %v", ack, err)
	}
	short := newSID()
	mustOK(t, r1, initID, startAt(clk, short, "m0", 300))

	before := map[string]*macpv1.SessionMetadata{}
	for _, sid := range []string{open, resolved, cancelled} {
		md, err := r1.GetSession(ctx, initID, sid)
		if err != nil {
			t.Fatal(err)
		}
		before[sid] = md
	}
	openSeen := inspect(t, r1, open).seen
	r1.Close()
	if n := len(stored(t, mem, short)); n != 1 {
		t.Fatalf("short session already has %d records before the restart", n)
	}
	clk.Advance(350 * time.Millisecond) // the short session's deadline passes while down

	r2 := newRT(t, mem, Options{MaxOpenSessionsPerInitiator: 3, Clock: clk})
	for sid, want := range before {
		got, err := r2.GetSession(ctx, initID, sid)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("session %s recovered as\n%v\nwant\n%v", sid, got, want)
		}
	}
	if v := inspect(t, r2, open); v.seq != 4 || len(v.seen) != len(openSeen) {
		t.Fatalf("recovered %+v, seen before %v", v, openSeen)
	}

	// Dedup survives: resends are duplicates, in OPEN and terminal sessions.
	for _, c := range []struct {
		id  coord.Identity
		env *macpv1.Envelope
	}{
		{initID, startEnv(open, "m0", 60_000)},
		{bobID, voteEnv(open, "m3", "p-m1")},
		{initID, commitEnv(resolved, "c", "c1")},
		{initID, proposalEnv(cancelled, "m1")},
	} {
		if ack := r2.Send(ctx, c.id, c.env); !ack.Ok || !ack.Duplicate {
			t.Fatalf("resend of %s after restart: %v", c.env.MessageId, ack)
		}
	}
	// Sequence numbers continue; terminal sessions stay terminal.
	mustOK(t, r2, aliceID, voteEnv(open, "m4", "p-m1"))
	if recs := stored(t, mem, open); len(recs) != 5 || recs[4].Envelope.MessageId != "m4" {
		t.Fatalf("open session stored %d records", len(recs))
	}
	wantCode(t, r2.Send(ctx, aliceID, proposalEnv(resolved, "x")), coord.CodeSessionNotOpen)
	if ack, err := r2.Cancel(ctx, initID, cancelled, "again"); err != nil || !ack.Ok || ack.SessionState != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("cancel after restart: %v %v", ack, err)
	}

	// The short session expires by timer right after Start, at the
	// restarted runtime's instant (the clock did not move since).
	eventually(t, 10*time.Second, "the overdue session to expire", func() bool {
		recs := stored(t, mem, short)
		return len(recs) == 2 && recs[1].Kind == session.KindExpire
	})
	if at := stored(t, mem, short)[1].AcceptedAtMs; at != clk.NowMs() {
		t.Fatalf("overdue session expired at %d, want %d", at, clk.NowMs())
	}

	// Open counts were recovered: init has one OPEN session (open) after
	// short expired, so two more may start and the third is rate limited.
	eventually(t, 10*time.Second, "the expiry to release its slot", func() bool {
		r2.mu.RLock()
		defer r2.mu.RUnlock()
		return r2.openBy[initID.Sender] == 1
	})
	mustOK(t, r2, initID, startEnv(newSID(), "n1", 60_000))
	mustOK(t, r2, initID, startEnv(newSID(), "n2", 60_000))
	wantCode(t, r2.Send(ctx, initID, startEnv(newSID(), "n3", 60_000)), coord.CodeRateLimited)

	// A restarted runtime recovers again from what the second one wrote.
	r2.Close()
	r3 := newRT(t, mem, Options{Clock: clk})
	if v := inspect(t, r3, open); v.seq != 5 {
		t.Fatalf("third runtime: %+v", v)
	}
	if s, _ := getState(r3, initID, short); s != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("short: %v", s)
	}
}

// A stored session that cannot be replayed (here: its mode is missing) is
// quarantined, not dropped: Start succeeds, the session is listed as
// quarantined and every access answers INTERNAL_ERROR naming the reason
// (issue #4 recovery). With StrictRecovery, Start refuses instead.
func TestRecoveryQuarantinesUnreplayableHistory(t *testing.T) {
	mem := memstore.New()
	r1 := newRT(t, mem, Options{})
	sid := openSession(t, r1, 0)
	r1.Close()

	strict := New(mem, emptyModes(), defaultPolicies, Options{StrictRecovery: true})
	if err := strict.Start(context.Background()); err == nil {
		strict.Close()
		t.Fatal("strict recovery started without the session's mode")
	}

	r2 := New(mem, emptyModes(), defaultPolicies, Options{})
	if err := r2.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer r2.Close()
	if _, ok := r2.Quarantined()[sid]; !ok {
		t.Fatalf("session not quarantined: %v", r2.Quarantined())
	}
	if _, err := r2.GetSession(context.Background(), initID, sid); err == nil || err.Code != coord.CodeInternalError {
		t.Fatalf("GetSession of a quarantined session: %v", err)
	}
	ack := r2.Send(context.Background(), initID, proposalEnv(sid, "late"))
	wantCode(t, ack, coord.CodeInternalError)
	listed := false
	for _, md := range r2.ListSessions(context.Background(), observerID) {
		listed = listed || md.SessionId == sid
	}
	if !listed {
		t.Fatal("quarantined session not listed to observers")
	}
}
