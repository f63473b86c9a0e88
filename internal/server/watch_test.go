package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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
	// The server sends the header once it has subscribed (other
	// subscribers, such as the app's snapshot index feed, make a count of
	// the hub's subscribers no proof of this one).
	if _, err := s.Header(); err != nil {
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
	e.app.Registry().SetModes(builtin.Modes())
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

// sessionStates is a watcher's view: the latest state per session id.
type sessionStates map[string]macpv1.SessionState

// merge keeps the later of the known and the observed state (OPEN <
// RESOLVED/EXPIRED; states never go back), so a ListSessions snapshot and
// watch events can be combined in any order.
func (m sessionStates) merge(md *macpv1.SessionMetadata) {
	if m[md.SessionId] == macpv1.SessionState_SESSION_STATE_UNSPECIFIED || m[md.SessionId] == macpv1.SessionState_SESSION_STATE_OPEN {
		m[md.SessionId] = md.State
	}
}

func (m sessionStates) equal(o sessionStates) bool {
	if len(m) != len(o) {
		return false
	}
	for k, v := range m {
		if o[k] != v {
			return false
		}
	}
	return true
}

func (m sessionStates) diff(o sessionStates) string {
	var b strings.Builder
	for k, v := range m {
		if o[k] != v {
			fmt.Fprintf(&b, "%s: %v vs %v; ", k, v, o[k])
		}
	}
	for k, v := range o {
		if _, ok := m[k]; !ok {
			fmt.Fprintf(&b, "%s: missing vs %v; ", k, v)
		}
	}
	return b.String()
}

// lifecycleView consumes a WatchSessions stream in the background.
type lifecycleView struct {
	mu     sync.Mutex
	states sessionStates
	events int
	err    error
}

func (v *lifecycleView) consume(s grpc.ServerStreamingClient[macpv1.WatchSessionsResponse]) {
	for {
		r, err := s.Recv()
		v.mu.Lock()
		if err != nil {
			v.err = err
			v.mu.Unlock()
			return
		}
		v.states.merge(r.Event.Session)
		v.events++
		v.mu.Unlock()
	}
}

func (v *lifecycleView) snapshot() (sessionStates, int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := make(sessionStates, len(v.states))
	for k, s := range v.states {
		c[k] = s
	}
	return c, v.events, v.err
}

// truth is the runtime's own view of every session agent may see.
func (e *testEnv) truth(t *testing.T, agent string) sessionStates {
	t.Helper()
	r, err := e.c.ListSessions(as(agent), &macpv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m := sessionStates{}
	for _, md := range r.Sessions {
		m[md.SessionId] = md.State
	}
	return m
}

// converge waits until view equals the runtime's view for agent.
func (e *testEnv) converge(t *testing.T, what, agent string, view *lifecycleView) (events int) {
	t.Helper()
	want := e.truth(t, agent)
	var (
		got sessionStates
		err error
	)
	if !pollUntil(10*time.Second, 5*time.Millisecond, func() bool {
		got, events, err = view.snapshot()
		return got.equal(want) || err != nil
	}) || !got.equal(want) {
		t.Fatalf("%s did not converge (stream error %v): %s", what, err, want.diff(got))
	}
	return events
}

// churn starts n sessions from several goroutines (each with a large
// context_id, so lifecycle events are big) and resolves a third, cancels a
// third and leaves the rest OPEN.
func (e *testEnv) churn(t *testing.T, n int) {
	t.Helper()
	ctxID := strings.Repeat("c", 2048)
	const workers = 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				sid := uuid.NewString()
				start := envelope(sid, "SessionStart", "start-"+sid, mustMarshal(t, &macpv1.SessionStartPayload{
					Intent: "pick", Participants: []string{"alice", "bob"}, ModeVersion: "1.0.0",
					ConfigurationVersion: "cfg-1", TtlMs: 60000, ContextId: ctxID}))
				if ack := e.send(t, "alice", start); !ack.Ok {
					t.Errorf("start: %v", ack.Error)
					return
				}
				switch i % 3 {
				case 0:
					e.resolve(t, "alice", sid)
				case 1:
					if _, err := e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: sid}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// Issue #5 item 5 acceptance: a WatchSessions client that stops reading
// while many sessions are created and ended (its HTTP/2 window fills and
// the server's Send blocks) is not disconnected: what it missed is
// coalesced to the latest state of each session, so after draining it
// holds exactly the per-session state of a watcher that kept up (and of
// ListSessions), having received fewer events. Acceptance did not wait
// for it: every Send of the burst returned while it was stalled.
func TestWatchSessionsStalledWatcherCoalesces(t *testing.T) {
	e := startApp(t, testConfig())
	keeper := &lifecycleView{states: sessionStates{}}
	ks, err := e.c.WatchSessions(asT(t, "bob"), &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Header(); err != nil { // subscribed (the header follows the subscription)
		t.Fatal(err)
	}
	go keeper.consume(ks)

	// The stalled client has its own connection with a fixed 64 KiB
	// window (no BDP growth), so a few dozen 2 KiB events block the
	// server's Send.
	conn, err := grpc.NewClient(e.app.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ss, err := macpv1.NewMACPRuntimeServiceClient(conn).WatchSessions(asT(t, "bob"), &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Header(); err != nil { // subscribed
		t.Fatal(err)
	}

	const n = 300
	start := time.Now()
	e.churn(t, n)
	t.Logf("%d sessions started and %d ended in %v with a stalled watcher", n, n*2/3, time.Since(start))
	kept := e.converge(t, "keeper", "bob", keeper)

	stalled := &lifecycleView{states: sessionStates{}}
	go stalled.consume(ss)
	got := e.converge(t, "stalled watcher", "bob", stalled)
	published := n + n*2/3 // one CREATED per session, one RESOLVED/EXPIRED for two thirds
	t.Logf("%d events published; keeper received %d, stalled watcher %d", published, kept, got)
	if got >= published {
		t.Fatalf("stalled watcher received %d of %d events: nothing was coalesced (the stall did not happen)", got, published)
	}
}

// Issue #5 item 5: a consumer that disconnects and reconnects (watch,
// wait for the subscribed header, ListSessions, merge) while sessions keep
// changing ends in the same per-session state as one that never
// disconnected.
func TestWatchSessionsResyncAfterReconnect(t *testing.T) {
	e := startApp(t, testConfig())
	keeper := &lifecycleView{states: sessionStates{}}
	ks, err := e.c.WatchSessions(asT(t, "bob"), &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Header(); err != nil { // subscribed (the header follows the subscription)
		t.Fatal(err)
	}
	go keeper.consume(ks)

	// The reconnecting consumer's state survives across its streams.
	states := sessionStates{}
	for round := range 4 {
		view := &lifecycleView{states: states}
		ctx, cancel := context.WithCancel(as("bob"))
		s, err := e.c.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); e.churn(t, 60) }() // changes race with the re-sync
		md, err := s.Header()
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Get(server.HeaderWatchSubscribed)) != 1 {
			t.Fatalf("round %d: header %v lacks %s", round, md, server.HeaderWatchSubscribed)
		}
		list, err := e.c.ListSessions(as("bob"), &macpv1.ListSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		view.mu.Lock()
		for _, m := range list.Sessions {
			view.states.merge(m)
		}
		view.mu.Unlock()
		go view.consume(s)
		<-done
		e.converge(t, fmt.Sprintf("round %d: reconnected consumer", round), "bob", view)
		cancel() // disconnect; sessions change while it is away
		eventually(t, "stream ended", func() bool { _, _, err := view.snapshot(); return err != nil })
		e.churn(t, 30)
		states, _, _ = view.snapshot()
	}
	e.converge(t, "keeper", "bob", keeper)
}

// checklist SEC-6 (bounded buffers): a watcher with more distinct sessions
// pending than runtime Options.MaxWatchPending is ended with RATE_LIMITED
// and told to re-sync; events for sessions already pending coalesce and
// never count against the cap.
func TestWatchSessionsOverflowEndsWithResync(t *testing.T) {
	e, _, _ := startService(t, server.Options{}, runtime.Options{MaxWatchPending: 4})
	big := strings.Repeat("x", 256<<10) // fills the HTTP/2 window: the server's Send blocks
	s, err := e.c.WatchSessions(asT(t, "alice"), &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "subscription", func() bool { return e.rt.Lifecycle.Len() == 1 })
	ev := func(sid string) runtime.LifecycleEvent {
		md := &macpv1.SessionMetadata{SessionId: sid, Initiator: "alice", ContextId: big, State: macpv1.SessionState_SESSION_STATE_OPEN}
		return runtime.LifecycleEvent{Type: created, Session: md, ObservedMs: 1}
	}
	// Publish ends an overflowing watcher itself (synchronously), so the
	// count after it is exact: nothing to wait for.
	for range 200 {
		e.rt.Lifecycle.Publish(ev("same"))
	}
	if e.rt.Lifecycle.Len() != 1 {
		t.Fatal("a watcher was ended although one session was pending")
	}
	for i := 0; e.rt.Lifecycle.Len() > 0; i++ {
		if i > 1000 {
			t.Fatal("watcher never ended")
		}
		e.rt.Lifecycle.Publish(ev(fmt.Sprint("s", i)))
	}
	err = streamErr(t, recvAsync(s))
	wantStatus(t, err, codes.ResourceExhausted, "RATE_LIMITED")
	if !strings.Contains(err.Error(), "ListSessions") {
		t.Fatalf("error does not say how to re-sync: %v", err)
	}
}
