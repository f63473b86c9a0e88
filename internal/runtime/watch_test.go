package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
)

const (
	evCreated  = macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED
	evResolved = macpv1.SessionLifecycleEvent_EVENT_TYPE_RESOLVED
	evExpired  = macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED
)

func lifecycleEv(typ macpv1.SessionLifecycleEvent_EventType, sid string, at int64) LifecycleEvent {
	st := macpv1.SessionState_SESSION_STATE_OPEN
	switch typ {
	case evResolved:
		st = macpv1.SessionState_SESSION_STATE_RESOLVED
	case evExpired:
		st = macpv1.SessionState_SESSION_STATE_EXPIRED
	}
	return LifecycleEvent{Type: typ, Session: &macpv1.SessionMetadata{SessionId: sid, State: st, Initiator: initID.Sender}, ObservedMs: at}
}

// drainWatcher returns every pending event.
func drainWatcher(w *LifecycleWatcher) []LifecycleEvent {
	var out []LifecycleEvent
	for {
		ev, ok := w.Next()
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// Issue #5 item 5: a watcher that does not read keeps only the latest
// event of each session; a later RESOLVED/EXPIRED replaces a pending
// CREATED, and delivery follows the order in which sessions first became
// pending.
func TestLifecycleWatcherCoalesces(t *testing.T) {
	f := NewLifecycleFeed(4, 100)
	w := f.Watch(nil)
	defer f.Unwatch(w)
	for i := 1; i <= 5; i++ {
		f.Publish(lifecycleEv(evCreated, fmt.Sprint("s", i), int64(i)))
	}
	f.Publish(lifecycleEv(evResolved, "s2", 10))
	f.Publish(lifecycleEv(evExpired, "s4", 11))
	f.Publish(lifecycleEv(evCreated, "s6", 12))
	select {
	case <-w.Ready():
	default:
		t.Fatal("Ready not signalled")
	}
	if now, peak := w.Pending(); now != 6 || peak != 6 {
		t.Fatalf("pending %d peak %d, want 6 6", now, peak)
	}
	want := []struct {
		sid string
		typ macpv1.SessionLifecycleEvent_EventType
		at  int64
	}{{"s1", evCreated, 1}, {"s2", evResolved, 10}, {"s3", evCreated, 3}, {"s4", evExpired, 11}, {"s5", evCreated, 5}, {"s6", evCreated, 12}}
	got := drainWatcher(w)
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i, g := range got {
		if g.Session.SessionId != want[i].sid || g.Type != want[i].typ || g.ObservedMs != want[i].at {
			t.Fatalf("event %d: %s %v @%d, want %s %v @%d", i, g.Session.SessionId, g.Type, g.ObservedMs, want[i].sid, want[i].typ, want[i].at)
		}
	}
	// Once delivered, a session's next event is pending again, at the end.
	f.Publish(lifecycleEv(evCreated, "s7", 13))
	f.Publish(lifecycleEv(evResolved, "s1", 14))
	got = drainWatcher(w)
	if len(got) != 2 || got[0].Session.SessionId != "s7" || got[1].Session.SessionId != "s1" || got[1].Type != evResolved {
		t.Fatalf("after drain: %v", got)
	}
	// The raw Hub subscribers still see every event.
	if f.Len() != 1 {
		t.Fatalf("Len %d, want 1", f.Len())
	}
}

// A watcher with more distinct sessions pending than the cap is ended
// (Overflowed) and its memory released; coalesced events for sessions
// already pending never count against the cap; filtered-out events take
// no room.
func TestLifecycleWatcherOverflow(t *testing.T) {
	f := NewLifecycleFeed(4, 3)
	w := f.Watch(nil)
	mine := f.Watch(func(ev LifecycleEvent) bool { return ev.Session.SessionId == "s1" })
	defer f.Unwatch(mine)
	for i := range 1000 {
		f.Publish(lifecycleEv(evCreated, fmt.Sprint("s", i%3), int64(i)))
	}
	select {
	case <-w.Done():
		t.Fatal("ended while only 3 sessions were pending")
	default:
	}
	f.Publish(lifecycleEv(evCreated, "s3", 2000))
	select {
	case <-w.Done():
	default:
		t.Fatal("not ended after the 4th distinct session")
	}
	if !w.Overflowed() {
		t.Fatal("not Overflowed")
	}
	if _, ok := w.Next(); ok {
		t.Fatal("an overflowed watcher still yields events")
	}
	if now, _ := w.Pending(); now != 0 {
		t.Fatalf("overflowed watcher holds %d sessions", now)
	}
	if f.Len() != 1 {
		t.Fatalf("Len %d after overflow, want 1 (the filtered watcher)", f.Len())
	}
	f.Unwatch(w) // idempotent, after overflow too
	if !w.Overflowed() {
		t.Fatal("Unwatch cleared Overflowed")
	}
	got := drainWatcher(mine)
	if len(got) != 1 || got[0].Session.SessionId != "s1" {
		t.Fatalf("filtered watcher got %v", got)
	}
	f.Unwatch(mine)
	if f.Len() != 0 {
		t.Fatalf("Len %d after Unwatch", f.Len())
	}
	select {
	case <-mine.Done():
	default:
		t.Fatal("Unwatch did not close Done")
	}
	if mine.Overflowed() {
		t.Fatal("Unwatch reported as overflow")
	}
}

// Publish never waits for a watcher: with watchers that never read (at
// their cap) and a raw subscriber that never reads, a large burst of
// events is published by the test goroutine itself. Nobody else runs and
// nobody reads, so a Publish that waited for a reader would never return
// (go test's -timeout reports where); no duration is measured. Then the
// watchers hold exactly the latest event per session, in first-change
// order, and the raw subscriber was dropped.
func TestLifecycleWatcherPublishNeverBlocks(t *testing.T) {
	const sessions, events = 5_000, 200_000
	f := NewLifecycleFeed(4, sessions)
	stalled := []*LifecycleWatcher{f.Watch(nil), f.Watch(nil)}
	hub := f.Subscribe() // a raw subscriber that never reads is dropped, not waited for
	for i := range events {
		typ := evCreated
		if i >= sessions {
			typ = evResolved
		}
		f.Publish(lifecycleEv(typ, fmt.Sprint("s", i%sessions), int64(i)))
	}
	if !hub.Lagged() {
		t.Fatal("the raw subscriber was not dropped")
	}
	for _, w := range stalled {
		now, peak := w.Pending()
		if now != sessions || peak != sessions {
			t.Fatalf("pending %d peak %d, want %d", now, peak, sessions)
		}
		got := drainWatcher(w)
		for i, ev := range got {
			if ev.Session.SessionId != fmt.Sprint("s", i) || ev.Type != evResolved || ev.ObservedMs != int64(events-sessions+i) {
				t.Fatalf("event %d: %s %v @%d", i, ev.Session.SessionId, ev.Type, ev.ObservedMs)
			}
		}
		f.Unwatch(w)
	}
}

// lifecycleState folds events into the latest state per session.
type lifecycleState map[string]macpv1.SessionState

func (m lifecycleState) apply(ev LifecycleEvent) { m[ev.Session.SessionId] = ev.Session.State }

// Issue #5 item 5 acceptance (runtime half): while many sessions are
// created, resolved and cancelled by concurrent senders, a watcher that
// stalls for the whole burst ends, after draining, in exactly the same
// per-session state as a watcher that kept up, and as ListSessions;
// sessions it may not see are filtered out; acceptance did not wait for
// it.
func TestLifecycleStalledWatcherConvergesWithKeeper(t *testing.T) {
	r := newRT(t, newFaultStore(), Options{})
	ctx := context.Background()
	visibleTo := func(id coord.Identity) func(LifecycleEvent) bool {
		return func(ev LifecycleEvent) bool { return MayObserveMetadata(id, ev.Session) }
	}
	keeper := r.Lifecycle.Watch(visibleTo(aliceID))
	stalled := r.Lifecycle.Watch(visibleTo(aliceID))
	outsider := r.Lifecycle.Watch(visibleTo(outsiderID))
	defer r.Lifecycle.Unwatch(keeper)
	defer r.Lifecycle.Unwatch(stalled)
	defer r.Lifecycle.Unwatch(outsider)

	kept := lifecycleState{}
	keeperDone := make(chan struct{})
	stopKeeper := make(chan struct{})
	go func() {
		defer close(keeperDone)
		for {
			for {
				ev, ok := keeper.Next()
				if !ok {
					break
				}
				kept.apply(ev)
			}
			select {
			case <-keeper.Ready():
			case <-stopKeeper:
				for ev, ok := keeper.Next(); ok; ev, ok = keeper.Next() {
					kept.apply(ev)
				}
				return
			}
		}
	}()

	const workers, perWorker = 4, 150
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perWorker {
				sid := openSession(t, r, 0)
				switch rng.IntN(3) {
				case 0:
					mustOK(t, r, initID, commitEnv(sid, fmt.Sprint("c", w, i), "c1"))
				case 1:
					if _, err := r.Cancel(ctx, initID, sid, "done"); err != nil {
						t.Error(err)
					}
				} // case 2: left OPEN
			}
		}()
	}
	wg.Wait()
	// Every event of the burst is published by now (Sends returned after
	// durability and publication). The keeper drains what it still has.
	close(stopKeeper)
	<-keeperDone

	now, peak := stalled.Pending()
	t.Logf("stalled watcher: %d sessions pending (peak %d) after %d sessions", now, peak, workers*perWorker)
	if now != workers*perWorker {
		t.Fatalf("stalled watcher has %d sessions pending, want %d (one per session)", now, workers*perWorker)
	}
	caught := lifecycleState{}
	for _, ev := range drainWatcher(stalled) {
		if _, dup := caught[ev.Session.SessionId]; dup {
			t.Fatalf("session %s delivered twice to the stalled watcher", ev.Session.SessionId)
		}
		caught.apply(ev)
	}
	truth := lifecycleState{}
	for _, md := range r.ListSessions(ctx, aliceID) {
		truth[md.SessionId] = md.State
	}
	sameState(t, "keeper vs ListSessions", truth, kept)
	sameState(t, "stalled vs ListSessions", truth, caught)
	if got := drainWatcher(outsider); len(got) != 0 {
		t.Fatalf("outsider saw %d events", len(got))
	}
}

func sameState(t *testing.T, what string, want, got lifecycleState) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d sessions, want %d", what, len(got), len(want))
	}
	for sid, st := range want {
		if got[sid] != st {
			t.Fatalf("%s: session %s is %v, want %v", what, sid, got[sid], st)
		}
	}
}
