package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"google.golang.org/grpc/codes"
)

type lifecycle = macpv1.WatchSessionsResponse

const (
	created  = macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED
	resolved = macpv1.SessionLifecycleEvent_EVENT_TYPE_RESOLVED
	expired  = macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED
)

// watchSessions opens a WatchSessions stream as agent and waits until the
// server has subscribed to lifecycle events (subs = expected subscriber
// count including this one).
func (e *testEnv) watchSessions(t *testing.T, agent string, subs int) <-chan recvResult[*lifecycle] {
	t.Helper()
	s, err := e.c.WatchSessions(asT(t, agent), &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ch := recvAsync(s)
	eventually(t, "WatchSessions subscription", func() bool { return e.rt.Lifecycle.Len() >= subs })
	return ch
}

func wantEvent(t *testing.T, ch <-chan recvResult[*lifecycle], typ macpv1.SessionLifecycleEvent_EventType, sid string, state macpv1.SessionState) {
	t.Helper()
	ev := next(t, ch).Event
	if ev.EventType != typ || ev.Session.GetSessionId() != sid || ev.Session.GetState() != state {
		t.Fatalf("event %v %s %v, want %v %s %v", ev.EventType, ev.Session.GetSessionId(), ev.Session.GetState(), typ, sid, state)
	}
	if ev.ObservedAtUnixMs <= 0 {
		t.Fatalf("event without observed_at: %v", ev)
	}
}

// RFC-MACP-0006 §3.8, checklist OBS-3, START-12, TERM-2, CANCEL-3: a watcher
// started before a session sees CREATED then RESOLVED; a cancelled session
// ends with EXPIRED.
func TestWatchSessionsLive(t *testing.T) {
	e := startApp(t, testConfig())
	ch := e.watchSessions(t, "alice", 1)
	nothing(t, ch, 50*time.Millisecond) // no sessions: empty initial sync

	s1 := e.startSession(t, "alice", "alice", "bob")
	wantEvent(t, ch, created, s1, macpv1.SessionState_SESSION_STATE_OPEN)
	e.resolve(t, "alice", s1)
	wantEvent(t, ch, resolved, s1, macpv1.SessionState_SESSION_STATE_RESOLVED)

	s2 := e.startSession(t, "alice", "alice", "bob")
	wantEvent(t, ch, created, s2, macpv1.SessionState_SESSION_STATE_OPEN)
	if _, err := e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: s2, Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, expired, s2, macpv1.SessionState_SESSION_STATE_EXPIRED)
	nothing(t, ch, 50*time.Millisecond)
}

// checklist OBS-3 (⚠C4: the proto comment's initial sync, as [RT]): a
// watcher started after a session was created gets one CREATED for each
// OPEN session it may see, then live events, never a second CREATED.
func TestWatchSessionsInitialSync(t *testing.T) {
	e := startApp(t, testConfig())
	open := e.startSession(t, "alice", "alice", "bob")
	done := e.startSession(t, "alice", "alice", "bob")
	e.resolve(t, "alice", done)

	ch := e.watchSessions(t, "bob", 1)
	wantEvent(t, ch, created, open, macpv1.SessionState_SESSION_STATE_OPEN)
	nothing(t, ch, 100*time.Millisecond) // terminal sessions are not synced; no duplicate
	e.resolve(t, "alice", open)
	wantEvent(t, ch, resolved, open, macpv1.SessionState_SESSION_STATE_RESOLVED)
}

// RFC-MACP-0004 §4 and §11.3: lifecycle events are visible only to the
// initiator, the declared participants (and observers), not to unrelated
// identities, neither in the initial sync nor live.
func TestWatchSessionsVisibility(t *testing.T) {
	e := startApp(t, testConfig())
	before := e.startSession(t, "alice", "alice", "bob")
	ch := e.watchSessions(t, "carol", 1)
	during := e.startSession(t, "alice", "alice", "bob")
	e.resolve(t, "alice", before)
	mine := e.startSession(t, "carol", "carol")
	// carol's first event is her own session: she saw none of alice's.
	wantEvent(t, ch, created, mine, macpv1.SessionState_SESSION_STATE_OPEN)
	e.resolve(t, "alice", during)
	if _, err := e.c.CancelSession(as("carol"), &macpv1.CancelSessionRequest{SessionId: mine}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, expired, mine, macpv1.SessionState_SESSION_STATE_EXPIRED)
	nothing(t, ch, 50*time.Millisecond)
}

// checklist OBS-3: sessions created concurrently with the start of a watch
// (between its subscription and its initial sync) are reported exactly
// once: every session gets one CREATED before its EXPIRED.
func TestWatchSessionsNoDuplicateCreatedUnderRace(t *testing.T) {
	e := startApp(t, testConfig())
	const n = 40
	for round := 0; round < 5; round++ {
		sids := make([]string, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range sids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				sids[i] = e.startSession(t, "alice", "alice")
			}()
		}
		s, err := e.c.WatchSessions(asT(t, "alice"), &macpv1.WatchSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		close(start)
		ch := recvAsync(s)
		wg.Wait()
		count := map[string]int{}
		for range n {
			ev := next(t, ch).Event
			if ev.EventType != created {
				t.Fatalf("round %d: %v before all CREATED events", round, ev.EventType)
			}
			count[ev.Session.SessionId]++
		}
		for _, sid := range sids {
			if count[sid] != 1 {
				t.Fatalf("round %d: session %s has %d CREATED events", round, sid, count[sid])
			}
		}
		for _, sid := range sids {
			if _, err := e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: sid}); err != nil {
				t.Fatal(err)
			}
		}
		// Any duplicate CREATED was queued before these EXPIRED events.
		for range n {
			ev := next(t, ch).Event
			if ev.EventType != expired {
				t.Fatalf("round %d: got %v %s, want only EXPIRED", round, ev.EventType, ev.Session.SessionId)
			}
		}
	}
}

// RFC-MACP-0006 §3.4, checklist SIG-1..3, RFC-MACP-0004 §3: an accepted
// ambient Signal is broadcast to every WatchSignals subscriber as the full
// envelope, with the sender set to the authenticated identity; Signals
// enter no session.
func TestWatchSignals(t *testing.T) {
	e := startApp(t, testConfig())
	s1, err := e.c.WatchSignals(asT(t, "alice"), &macpv1.WatchSignalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := e.c.WatchSignals(asT(t, "carol"), &macpv1.WatchSignalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ch1, ch2 := recvAsync(s1), recvAsync(s2)
	eventually(t, "WatchSignals subscriptions", func() bool { return e.rt.Signals.Len() == 2 })

	sig := &macpv1.Envelope{MacpVersion: "1.0", MessageType: "Signal", MessageId: "sig-1", Sender: "mallory",
		TimestampUnixMs: time.Now().UnixMilli(),
		Payload:         mustMarshal(t, &macpv1.SignalPayload{SignalType: "heartbeat", CorrelationSessionId: "s"})}
	ack := e.mustAccept(t, "bob", sig)
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_UNSPECIFIED {
		t.Errorf("signal ack carries a session state: %v", ack)
	}
	for _, ch := range []<-chan recvResult[*macpv1.WatchSignalsResponse]{ch1, ch2} {
		got := next(t, ch).Envelope
		if got.Sender != "bob" || got.MessageId != "sig-1" || got.MessageType != "Signal" || got.SessionId != "" {
			t.Fatalf("received %v", got)
		}
	}
	// SIG-1: a Signal without signal_type is rejected and not broadcast.
	bad := &macpv1.Envelope{MacpVersion: "1.0", MessageType: "Signal", MessageId: "sig-2",
		Payload: mustMarshal(t, &macpv1.SignalPayload{})}
	wantNack(t, e.send(t, "bob", bad), "INVALID_ENVELOPE")
	nothing(t, ch1, 50*time.Millisecond)
	if n := len(e.rt.ListSessions(context.Background(), observer())); n != 0 {
		t.Fatalf("a signal created %d sessions", n)
	}
}

// RFC-MACP-0006 §3.3, checklist OBS-6: WatchModeRegistry sends an initial
// hint for registry "modes" (without credentials: it is discovery), then
// one per registry change.
func TestWatchModeRegistry(t *testing.T) {
	e := startApp(t, testConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.c.WatchModeRegistry(ctx, &macpv1.WatchModeRegistryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ch := recvAsync(s)
	hint := next(t, ch).Change
	if hint.GetRegistry() != "modes" || hint.GetObservedAtUnixMs() <= 0 {
		t.Fatalf("initial hint %v", hint)
	}
	nothing(t, ch, 50*time.Millisecond)
	e.rt.SetModes(app.BuiltinModes())
	if hint := next(t, ch).Change; hint.GetRegistry() != "modes" {
		t.Fatalf("change hint %v", hint)
	}
}

// RFC-MACP-0006 §3.3, checklist OBS-6/OBS-7: WatchRoots sends one initial
// hint and then idles (roots are static).
func TestWatchRoots(t *testing.T) {
	e := startApp(t, testConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.c.WatchRoots(ctx, &macpv1.WatchRootsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ch := recvAsync(s)
	if hint := next(t, ch).Change; hint.GetObservedAtUnixMs() <= 0 {
		t.Fatalf("initial hint %v", hint)
	}
	nothing(t, ch, 50*time.Millisecond)
	cancel()
	wantStatus(t, streamErr(t, ch), codes.Canceled, "")
}
