package runtime

import (
	"context"
	"slices"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// ADM-24 (storage failure -> INTERNAL_ERROR), ADM-30 (a message that was
// not appended consumes no dedup slot and changes nothing), package doc
// "If an append fails ... the next access rebuilds the session from the
// store by replay".
func TestAppendFailureNacksAndHeals(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)

	st.failNext(sid, 1)
	ack := r.Send(context.Background(), aliceID, proposalEnv(sid, "m2"))
	wantCode(t, ack, coord.CodeInternalError)
	if ack.MessageId != "m2" || ack.SessionId != sid {
		t.Fatalf("failure ack does not name the message: %v", ack)
	}

	v := inspect(t, r, sid)
	if v.seq != 2 || slices.Contains(v.seen, "m2") {
		t.Fatalf("after a failed append the session shows seq %d seen %v; want seq 2 without m2", v.seq, v.seen)
	}
	for _, a := range v.activity {
		if a.ParticipantID == aliceID.Sender {
			t.Fatalf("failed message counted as participant activity: %+v", a)
		}
	}
	md, cerr := r.GetSession(context.Background(), initID, sid)
	if cerr != nil || md.State != macpv1.SessionState_SESSION_STATE_OPEN || len(md.ParticipantActivity) != 1 {
		t.Fatalf("GetSession after failure: %v %v", md, cerr)
	}
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{"m0", "m1"}) {
		t.Fatalf("store holds %v", ids)
	}

	// The resend is a new acceptance, not a duplicate: the failed attempt
	// consumed no slot.
	ack = mustOK(t, r, aliceID, proposalEnv(sid, "m2"))
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("resend ack %v", ack)
	}
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{"m0", "m1", "m2"}) {
		t.Fatalf("store holds %v", ids)
	}
	if v := inspect(t, r, sid); v.seq != 3 {
		t.Fatalf("seq %d after resend, want 3", v.seq)
	}
}

// A store that keeps failing: every Send is INTERNAL_ERROR, the in-memory
// session never runs ahead of the store, and it recovers once the store
// does (ADM-24, package doc heal).
func TestAppendFailsAlwaysThenRecovers(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)

	st.failNext("", -1)
	for i := range 5 {
		wantCode(t, r.Send(context.Background(), aliceID, proposalEnv(sid, msgID("x", i))), coord.CodeInternalError)
	}
	wantCode(t, r.Send(context.Background(), initID, commitEnv(sid, "c", "c1")), coord.CodeInternalError)
	if v := inspect(t, r, sid); v.seq != 2 || v.status != session.Open {
		t.Fatalf("session ran ahead of the store: %+v", v)
	}
	st.clear()
	for i := range 5 {
		mustOK(t, r, aliceID, proposalEnv(sid, msgID("x", i)))
	}
	if ack := mustOK(t, r, initID, commitEnv(sid, "c", "c1")); ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("commit ack %v", ack)
	}
	if ids := storedIDs(t, st, sid); len(ids) != 8 {
		t.Fatalf("store holds %v", ids)
	}
}

// A failure injected for one session leaves other sessions untouched when
// their appends are separate (sequential sends, so no shared batch).
func TestAppendFailureForOneSession(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	a, b := openSession(t, r, 0), openSession(t, r, 0)
	st.failNext(a, -1)
	for i := range 3 {
		wantCode(t, r.Send(context.Background(), aliceID, proposalEnv(a, msgID("a", i))), coord.CodeInternalError)
		mustOK(t, r, aliceID, proposalEnv(b, msgID("b", i)))
	}
	if ids := storedIDs(t, st, a); len(ids) != 2 {
		t.Fatalf("a: %v", ids)
	}
	if ids := storedIDs(t, st, b); len(ids) != 5 {
		t.Fatalf("b: %v", ids)
	}
	if v := inspect(t, r, a); v.seq != 2 {
		t.Fatalf("a seq %d", v.seq)
	}
}

// Package doc step 3 and "Reads show only durable state": while a record
// is being written, its Ack, GetSession, Inspect, ListSessions and a
// duplicate of it all wait; a later message of the same session is decided
// meanwhile (pipelining) and acked only after its own append.
func TestStalledAppendHoldsAcksAndReads(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)
	ctx := context.Background()

	stall := st.block(sid, false)
	first := sendAsync(r, ctx, aliceID, proposalEnv(sid, "m2"))
	waitEntered(t, stall)

	second := sendAsync(r, ctx, bobID, proposalEnv(sid, "m3"))
	dup := sendAsync(r, ctx, aliceID, proposalEnv(sid, "m2"))
	get := make(chan *macpv1.SessionMetadata, 1)
	go func() {
		md, err := r.GetSession(ctx, initID, sid)
		if err != nil {
			t.Errorf("GetSession: %v", err)
		}
		get <- md
	}()
	list := make(chan []*macpv1.SessionMetadata, 1)
	go func() { list <- r.ListSessions(ctx, initID) }()

	nothingFor(t, first, 100*time.Millisecond, "ack of the stalled message")
	nothingFor(t, second, 0, "ack of the pipelined message")
	nothingFor(t, dup, 0, "duplicate ack of a message that is not durable")
	nothingFor(t, get, 0, "GetSession while a record is in flight")
	nothingFor(t, list, 0, "ListSessions while a record is in flight")
	if got := storedIDs(t, st, sid); len(got) != 2 {
		t.Fatalf("store holds %v before release", got)
	}

	stall.release()
	if ack := recv(t, first, "first ack"); !ack.Ok || ack.Duplicate {
		t.Fatalf("first: %v", ack)
	}
	if ack := recv(t, second, "second ack"); !ack.Ok || ack.Duplicate {
		t.Fatalf("second: %v", ack)
	}
	if ack := recv(t, dup, "duplicate ack"); !ack.Ok || !ack.Duplicate {
		t.Fatalf("duplicate: %v", ack)
	}
	md := recv(t, get, "GetSession")
	// GetSession saw at least m2 (it waited); m3 may or may not have been
	// decided before it looked, but whatever it saw was durable.
	var alice uint32
	for _, a := range md.GetParticipantActivity() {
		if a.ParticipantId == aliceID.Sender {
			alice = a.MessageCount
		}
	}
	if alice != 1 {
		t.Fatalf("GetSession activity %v", md.GetParticipantActivity())
	}
	if l := recv(t, list, "ListSessions"); len(l) != 1 {
		t.Fatalf("ListSessions: %v", l)
	}
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{"m0", "m1", "m2", "m3"}) {
		t.Fatalf("store holds %v", ids)
	}
}

// The duplicate-before-durable hole: a resend of a message whose append is
// still in flight must not be acked ok=true before that append succeeds,
// because the append may fail (ADM-24, IDEM-2: a duplicate ack vouches for
// an accepted message). Decisions made on top of the failed record are
// failed too, and nothing of them is visible afterwards.
func TestDuplicateOfInFlightMessageWaitsForItsFate(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)
	ctx := context.Background()

	stall := st.block(sid, true) // stalls, then fails
	first := sendAsync(r, ctx, aliceID, proposalEnv(sid, "m2"))
	waitEntered(t, stall)
	dup := sendAsync(r, ctx, aliceID, proposalEnv(sid, "m2"))
	commit := sendAsync(r, ctx, initID, commitEnv(sid, "c", "c1"))
	nothingFor(t, dup, 100*time.Millisecond, "duplicate ack of an undurable message")

	// Whatever was decided after m2 has been queued behind it; rejections
	// decided on undurable state must wait too.
	late := sendAsync(r, ctx, initID, commitEnv(sid, "c2", "c2"))
	nothingFor(t, late, 50*time.Millisecond, "a rejection decided on undurable state")

	stall.release()
	wantCode(t, recv(t, first, "first ack"), coord.CodeInternalError)
	if ack := recv(t, dup, "duplicate ack"); ack.Ok {
		t.Fatalf("a duplicate of a message whose append failed was acked ok: %v", ack)
	}
	if ack := recv(t, commit, "commit ack"); ack.Ok {
		t.Fatalf("a Commitment decided on top of a failed record was acked ok: %v", ack)
	}
	if ack := recv(t, late, "late ack"); ack.Ok {
		t.Fatalf("late commitment: %v", ack)
	}

	v := inspect(t, r, sid)
	if v.status != session.Open || v.seq != 2 || slices.Contains(v.seen, "m2") {
		t.Fatalf("after the failure the session shows %+v", v)
	}
	mustOK(t, r, aliceID, proposalEnv(sid, "m2"))
	mustOK(t, r, initID, commitEnv(sid, "c", "c1"))
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{"m0", "m1", "m2", "c"}) {
		t.Fatalf("store holds %v", ids)
	}
}

// Package doc: "the owner is marked failed ... the next access rebuilds the
// session". A record decided on top of a failed one fails in a later
// append (sequence conflict) after the owner was already rebuilt; that
// stale failure must not stop the next real failure from being healed, or
// the session runs ahead of the store for good (and a resend of the failed
// message would then be acked as a duplicate of a message never stored).
func TestStaleFailureDoesNotDisableHealing(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)
	ctx := context.Background()

	f1 := st.block(sid, true)  // append #1 (m2): stalls, then fails
	f2 := st.block(sid, false) // the next append of sid stalls until released
	a := sendAsync(r, ctx, aliceID, proposalEnv(sid, "m2"))
	waitEntered(t, f1)
	b := sendAsync(r, ctx, bobID, proposalEnv(sid, "m3")) // seq 4, on top of m2
	eventually(t, 2*time.Second, "m3 queued", func() bool { return len(r.commit.queue) == 1 })
	f1.release()
	wantCode(t, recv(t, a, "m2 ack"), coord.CodeInternalError)

	// Another sender arrives while m3 (doomed: its append is refused, or it
	// is left out of the append) may still be in flight.
	c := sendAsync(r, ctx, aliceID, proposalEnv(sid, "m4"))
	// m4 must rebuild the session first, and that waits, under the
	// session's lock, for m3 to be answered: wait until it holds the lock.
	// (Or, if m3 was answered first, m4's own append is held by f2.)
	o := r.lookup(sid)
	eventually(t, 10*time.Second, "m4 to wait for the rebuild or its append", func() bool {
		if len(f2.entered) > 0 {
			return true
		}
		if o.mu.TryLock() {
			o.mu.Unlock()
			return false
		}
		return true
	})
	f2.release()
	wantCode(t, recv(t, b, "m3 ack"), coord.CodeInternalError)
	if ack := recv(t, c, "m4 ack"); !ack.Ok {
		t.Fatalf("m4: %v", ack)
	}
	st.clear()

	// A fresh failure must be healed like the first one.
	st.failNext(sid, 1)
	wantCode(t, r.Send(ctx, aliceID, proposalEnv(sid, "m5")), coord.CodeInternalError)
	v := inspect(t, r, sid)
	if slices.Contains(v.seen, "m5") || v.seq != 3 {
		t.Fatalf("session shows %+v after the second failure; want seq 3 without m5", v)
	}
	mustOK(t, r, aliceID, proposalEnv(sid, "m5"))
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{"m0", "m1", "m4", "m5"}) {
		t.Fatalf("store holds %v", ids)
	}
}

// Lifecycle events are published only after their record is durable, and
// never for a failed append (package doc step 2; ADM-26, TTL-2, CANCEL-3).
func TestLifecycleEventsOnlyAfterDurability(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sub := r.Lifecycle.Subscribe()
	defer r.Lifecycle.Unsubscribe(sub)
	ctx := context.Background()

	// CREATED: not for a failed start; after a stalled start only once stored.
	sid := newSID()
	st.failNext(sid, 1)
	wantCode(t, r.Send(ctx, initID, startEnv(sid, "m0", 60_000)), coord.CodeInternalError)
	noEvent(t, sub, sid, 50*time.Millisecond)

	stall := st.block(sid, false)
	start := sendAsync(r, ctx, initID, startEnv(sid, "m0", 60_000))
	waitEntered(t, stall)
	noEvent(t, sub, sid, 50*time.Millisecond)
	stall.release()
	if ev := nextEvent(t, sub, sid); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED {
		t.Fatalf("event %v", ev.Type)
	} else if n := len(stored(t, st, sid)); n != 1 {
		t.Fatalf("CREATED published with %d stored records", n)
	}
	if ack := recv(t, start, "start ack"); !ack.Ok {
		t.Fatalf("start: %v", ack)
	}
	mustOK(t, r, initID, proposalEnv(sid, "m1"))

	// RESOLVED: not for a failed Commitment; after a stalled one only once stored.
	st.failNext(sid, 1)
	wantCode(t, r.Send(ctx, initID, commitEnv(sid, "c", "c1")), coord.CodeInternalError)
	noEvent(t, sub, sid, 50*time.Millisecond)
	stall = st.block(sid, false)
	commit := sendAsync(r, ctx, initID, commitEnv(sid, "c", "c1"))
	waitEntered(t, stall)
	noEvent(t, sub, sid, 50*time.Millisecond)
	stall.release()
	ev := nextEvent(t, sub, sid)
	if ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_RESOLVED || ev.Session.State != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("event %v state %v", ev.Type, ev.Session.State)
	}
	if recs := stored(t, st, sid); !terminalRecord(recs[len(recs)-1]) {
		t.Fatal("RESOLVED published before the Commitment was stored")
	}
	recv(t, commit, "commit ack")

	// EXPIRED by cancel: not for a failed cancel.
	sid2 := openSession(t, r, 0)
	nextEvent(t, sub, sid2) // CREATED
	st.failNext(sid2, 1)
	ack, cerr := r.Cancel(ctx, initID, sid2, "stop")
	if cerr != nil || ack.Ok || ack.Error.Code != string(coord.CodeInternalError) {
		t.Fatalf("failed cancel: %v %v", ack, cerr)
	}
	noEvent(t, sub, sid2, 50*time.Millisecond)
	if s, _ := getState(r, initID, sid2); s != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("state after failed cancel %v", s)
	}
	if ack, cerr := r.Cancel(ctx, initID, sid2, "stop"); cerr != nil || !ack.Ok {
		t.Fatalf("cancel: %v %v", ack, cerr)
	}
	if ev := nextEvent(t, sub, sid2); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED {
		t.Fatalf("event %v", ev.Type)
	}

	// EXPIRED by TTL: not while the expiry fails; once it is stored.
	sid3 := newSID()
	mustOK(t, r, initID, startEnv(sid3, "m0", 100))
	nextEvent(t, sub, sid3) // CREATED
	st.failNext(sid3, 1)
	if ev := nextEvent(t, sub, sid3); ev.Type != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED {
		t.Fatalf("event %v", ev.Type)
	}
	if recs := stored(t, st, sid3); len(recs) != 2 || recs[1].Kind != session.KindExpire {
		t.Fatalf("EXPIRED published with stored records %v", recs)
	}
}

// A failed SessionStart append leaves no session: SESSION_NOT_FOUND, not
// listed, nothing stored, no open-session slot held, and the id (and
// message id) can be used again (ADM-24, ADM-30).
func TestFailedStartLeavesNoSession(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{MaxOpenSessionsPerInitiator: 1})
	ctx := context.Background()
	sid := newSID()

	st.failNext(sid, 1)
	wantCode(t, r.Send(ctx, initID, startEnv(sid, "m0", 60_000)), coord.CodeInternalError)
	if _, code := getState(r, initID, sid); code != coord.CodeSessionNotFound {
		t.Fatalf("GetSession after failed start: %v", code)
	}
	if _, cerr := r.Cancel(ctx, initID, sid, "x"); cerr == nil || cerr.Code != coord.CodeSessionNotFound {
		t.Fatalf("Cancel after failed start: %v", cerr)
	}
	wantCode(t, r.Send(ctx, initID, proposalEnv(sid, "m1")), coord.CodeSessionNotFound)
	if l := r.ListSessions(ctx, observerID); len(l) != 0 {
		t.Fatalf("listed: %v", l)
	}
	if recs := stored(t, st, sid); len(recs) != 0 {
		t.Fatalf("stored: %v", recs)
	}
	// Same id, same message id: a fresh start (not a duplicate), and the
	// failed attempt did not keep the initiator's only slot.
	mustOK(t, r, initID, startEnv(sid, "m0", 60_000))
	if ack := r.Send(ctx, initID, startEnv(sid, "m0", 60_000)); !ack.Ok || !ack.Duplicate {
		t.Fatalf("resend of the start: %v", ack)
	}
}

// A start whose caller gives up (context cancelled) while its append is in
// flight is settled by the append's outcome, not by the caller: if the
// append then succeeds the session exists, holds its slot, expires on time
// (TTL-2) and releases the slot when it ends; if it fails the session is
// forgotten and the id is free again.
func TestAbandonedStartIsSettledByTheAppend(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{MaxOpenSessionsPerInitiator: 1})

	// Succeeds after the caller left.
	sid := newSID()
	stall := st.block(sid, false)
	ctx, cancel := context.WithCancel(context.Background())
	ch := sendAsync(r, ctx, initID, startEnv(sid, "m0", 150))
	waitEntered(t, stall)
	cancel()
	wantCode(t, recv(t, ch, "abandoned start ack"), coord.CodeInternalError)
	stall.release()
	eventually(t, 2*time.Second, "the abandoned session to expire by TTL", func() bool {
		recs := stored(t, st, sid)
		return len(recs) == 2 && recs[1].Kind == session.KindExpire
	})
	eventually(t, 2*time.Second, "the slot to be released", func() bool {
		return r.Send(context.Background(), initID, startEnv(newSID(), "n0", 60_000)).Ok
	})

	// Fails after the caller left.
	r2 := newRT(t, newFaultStore(), Options{MaxOpenSessionsPerInitiator: 1})
	st2 := r2.store.(*faultStore)
	sid2 := newSID()
	stall = st2.block(sid2, true)
	ctx, cancel = context.WithCancel(context.Background())
	ch = sendAsync(r2, ctx, initID, startEnv(sid2, "m0", 60_000))
	waitEntered(t, stall)
	cancel()
	wantCode(t, recv(t, ch, "abandoned start ack"), coord.CodeInternalError)
	stall.release()
	eventually(t, 2*time.Second, "the failed start to be forgotten", func() bool {
		_, code := getState(r2, initID, sid2)
		return code == coord.CodeSessionNotFound
	})
	mustOK(t, r2, initID, startEnv(sid2, "m0", 60_000))
}

// A Commitment whose caller gave up while it was being written still ends
// the session once stored, and the initiator's open-session slot is
// released (RATE_LIMITED accounting must follow durable state, not the
// caller's patience).
func TestAbandonedTerminalReleasesSlot(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{MaxOpenSessionsPerInitiator: 1})
	sid := openSession(t, r, 0)
	wantCode(t, r.Send(context.Background(), initID, startEnv(newSID(), "x", 60_000)), coord.CodeRateLimited)

	stall := st.block(sid, false)
	ctx, cancel := context.WithCancel(context.Background())
	ch := sendAsync(r, ctx, initID, commitEnv(sid, "c", "c1"))
	waitEntered(t, stall)
	cancel()
	wantCode(t, recv(t, ch, "abandoned commit ack"), coord.CodeInternalError)
	stall.release()
	eventually(t, 2*time.Second, "resolution", func() bool {
		s, _ := getState(r, initID, sid)
		return s == macpv1.SessionState_SESSION_STATE_RESOLVED
	})
	// The retry of the Commitment is a duplicate: it was accepted.
	if ack := r.Send(context.Background(), initID, commitEnv(sid, "c", "c1")); !ack.Ok || !ack.Duplicate {
		t.Fatalf("retry: %v", ack)
	}
	eventually(t, 2*time.Second, "the slot to be released", func() bool {
		return r.Send(context.Background(), initID, startEnv(newSID(), "y", 60_000)).Ok
	})
}

// TTL-2 with a failing store: an expiry whose append fails is retried by
// the runtime itself, expiryRetry later; the session must not stay OPEN
// past its deadline just because nobody touches it. The clock is a fake:
// the test moves it to the deadline and to each retry once the previous
// attempt failed and its retry was scheduled.
func TestFailedExpiryIsRetried(t *testing.T) {
	clk := clocktest.New()
	st := newFaultStore()
	r := newRT(t, st, Options{Clock: clk})
	sid := newSID()
	start := startAt(clk, sid, "m0", 60)
	mustOK(t, r, initID, start)
	st.failNext(sid, 2)
	calls := st.calls.Load()
	// Poll the store and the timer heap only: any runtime access would
	// heal the session and hide a missing retry. After each failed
	// attempt the retry is in the heap for expiryRetry later; only then
	// is the clock moved there. (A rebuild also re-arms the overdue
	// deadline itself, so an attempt may follow at once, too.)
	storedExpiry := func() bool {
		recs := stored(t, st, sid)
		return len(recs) == 2 && recs[1].Kind == session.KindExpire
	}
	clk.Advance(60 * time.Millisecond)
	for retries := 0; ; retries++ {
		if retries > 5 {
			t.Fatal("the expiry was not stored after 5 retries")
		}
		retryAt := clk.NowMs() + expiryRetry.Milliseconds()
		eventually(t, 10*time.Second, "a failed attempt's retry in the heap, or the expiry", func() bool {
			return storedExpiry() || heapHas(r, sid, retryAt)
		})
		if storedExpiry() {
			break
		}
		clk.Advance(expiryRetry)
	}
	if n := st.calls.Load() - calls; n < 3 {
		t.Fatalf("%d appends for the expiry, want the 2 failures and the stored one", n)
	}
	if at := stored(t, st, sid)[1].AcceptedAtMs; at < start.TimestampUnixMs+60+expiryRetry.Milliseconds() {
		t.Fatalf("expiry stored at %d, before the first retry was due", at)
	}
	if s, _ := getState(r, initID, sid); s != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("state %v", s)
	}
}

// Group commit must not spread one session's failure: records decided on
// top of a failed append are doomed (the store refuses them), and batching
// them with other sessions' records must not fail those too (ADM-32
// "errors are terminal for that message only"; package doc "Later records
// of that session that were already queued are refused").
func TestDoomedRecordsDoNotFailOtherSessions(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	ctx := context.Background()
	a, b := openSession(t, r, 0), openSession(t, r, 0)

	stall := st.block(a, true)
	first := sendAsync(r, ctx, aliceID, proposalEnv(a, "a2"))
	waitEntered(t, stall)
	doomed := sendAsync(r, ctx, aliceID, proposalEnv(a, "a3")) // seq 4, on top of a2
	eventually(t, 2*time.Second, "a3 queued", func() bool { return len(r.commit.queue) == 1 })
	other := sendAsync(r, ctx, aliceID, proposalEnv(b, "b2"))
	eventually(t, 2*time.Second, "b2 queued", func() bool { return len(r.commit.queue) == 2 })
	stall.release()

	wantCode(t, recv(t, first, "a2 ack"), coord.CodeInternalError)
	wantCode(t, recv(t, doomed, "a3 ack"), coord.CodeInternalError)
	if ack := recv(t, other, "b2 ack"); !ack.Ok {
		t.Fatalf("session b failed because a's doomed record shared its batch: %v", ack)
	}
	if ids := storedIDs(t, st, b); !slices.Equal(ids, []string{"m0", "m1", "b2"}) {
		t.Fatalf("b stored %v", ids)
	}
	mustOK(t, r, aliceID, proposalEnv(a, "a3"))
	if ids := storedIDs(t, st, a); !slices.Equal(ids, []string{"m0", "m1", "a3"}) {
		t.Fatalf("a stored %v", ids)
	}
}

// Options.CommitTimeout bounds a Send's wait for a stuck store (the
// server's unary limit, applied without a per-call context): the caller
// gets INTERNAL_ERROR, never ok=true, not before the timeout and at most
// two steps of the shared ticker after it (deadline.go); the record, once
// it lands, is settled as if the caller had left (the next message sees
// it). The clock is a fake, moved one ticker step at a time.
func TestCommitTimeoutBoundsTheWait(t *testing.T) {
	const timeout = 80 * time.Millisecond
	const step = timeout / deadlineSteps
	clk := clocktest.New()
	st := newFaultStore()
	r := newRT(t, st, Options{CommitTimeout: timeout, Clock: clk})
	sid := openSession(t, r, 0)
	stall := st.block(sid, false)
	start := clk.Now()
	ch := sendAsync(r, context.Background(), aliceID, proposalEnv(sid, "m2"))
	waitEntered(t, stall)
	var ack *macpv1.Ack
	for ack == nil {
		select {
		case ack = <-ch:
			continue
		default:
		}
		if waited := clk.Now().Sub(start); waited > timeout+3*step {
			t.Fatalf("no answer %v after the send, with a commit timeout of %v", waited, timeout)
		}
		prev := r.deadlines.after()
		clk.Advance(step)
		eventually(t, 10*time.Second, "the commit-wait ticker's step", func() bool { return r.deadlines.after() != prev })
	}
	wantCode(t, ack, coord.CodeInternalError)
	if waited := clk.Now().Sub(start); waited < timeout {
		t.Fatalf("answered after %v, before the commit timeout %v", waited, timeout)
	}
	stall.release()
	// The record was written after all: a resend is a duplicate of it.
	eventually(t, 2*time.Second, "the resend to be answered as a duplicate", func() bool {
		ack := r.Send(context.Background(), aliceID, proposalEnv(sid, "m2"))
		return ack.Ok && ack.Duplicate
	})
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{"m0", "m1", "m2"}) {
		t.Fatalf("store holds %v", ids)
	}
}
