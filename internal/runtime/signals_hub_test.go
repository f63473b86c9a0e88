package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/hub"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/store"
)

// RFC-MACP-0001 §8.3, IDEM-3: an accepted Signal reaches every
// WatchSignals subscriber, is never stored, creates no session and uses no
// dedup slot (the same message_id is accepted again, not as a duplicate).
func TestSignalsArePublishedNotStored(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	ctx := context.Background()
	subs := []*hub.Sub[*macpv1.Envelope]{r.Signals.Subscribe(), r.Signals.Subscribe(), r.Signals.Subscribe()}
	defer func() {
		for _, s := range subs {
			r.Signals.Unsubscribe(s)
		}
	}()
	calls := st.calls.Load()

	env := signalEnv("sig-1", "heartbeat")
	env.Sender = "agent://spoofed"
	for range 2 {
		ack := r.Send(ctx, aliceID, env)
		if !ack.Ok || ack.Duplicate || ack.MessageId != "sig-1" || ack.SessionState != macpv1.SessionState_SESSION_STATE_UNSPECIFIED {
			t.Fatalf("signal ack %v", ack)
		}
	}
	for i, s := range subs {
		for range 2 {
			got := recv(t, s.C, "signal")
			var p macpv1.SignalPayload
			if err := proto.Unmarshal(got.Payload, &p); err != nil || p.SignalType != "heartbeat" {
				t.Fatalf("subscriber %d got payload %v %v", i, &p, err)
			}
			// RFC-MACP-0004 §3: the sender is the authenticated identity.
			if got.MessageId != "sig-1" || got.Sender != aliceID.Sender || got.SessionId != "" {
				t.Fatalf("subscriber %d got %v", i, got)
			}
		}
	}
	if st.calls.Load() != calls {
		t.Fatal("a Signal reached the store")
	}
	n := 0
	_ = st.List(ctx, func(store.SessionInfo) error { n++; return nil })
	if n != 0 || len(r.ListSessions(ctx, observerID)) != 0 {
		t.Fatal("a Signal created a session")
	}

	// Ambient Progress is published the same way.
	prog := &macpv1.Envelope{MacpVersion: coord.ProtocolVersion, MessageType: coord.TypeProgress, MessageId: "p-1",
		Payload: mustMarshal(&macpv1.ProgressPayload{ProgressToken: "t", Progress: 1, Total: 2})}
	if ack := r.Send(ctx, aliceID, prog); !ack.Ok {
		t.Fatalf("progress: %v", ack)
	}
	if got := recv(t, subs[0].C, "progress"); got.MessageType != coord.TypeProgress {
		t.Fatalf("got %v", got)
	}
}

// Invalid Signals are rejected INVALID_ENVELOPE and published to no one:
// empty signal_type, a payload that is not a SignalPayload, and a
// session-scoped Signal (RFC-MACP-0001 §7.4, ADM-11).
func TestInvalidSignalsRejected(t *testing.T) {
	r := newRT(t, newFaultStore(), Options{})
	sub := r.Signals.Subscribe()
	defer r.Signals.Unsubscribe(sub)
	ctx := context.Background()
	sid := openSession(t, r, 0)

	noType := signalEnv("s1", "")
	garbage := signalEnv("s2", "x")
	garbage.Payload = []byte{0xff, 0xff, 0xff}
	scoped := signalEnv("s3", "x")
	scoped.SessionId, scoped.Mode = sid, decision.ModeID
	halfScoped := signalEnv("s4", "x")
	halfScoped.SessionId = sid
	for _, env := range []*macpv1.Envelope{noType, garbage, scoped, halfScoped} {
		wantCode(t, r.Send(ctx, aliceID, env), coord.CodeInvalidEnvelope)
	}
	nothingFor(t, sub.C, 50*time.Millisecond, "a rejected signal")
	if v := inspect(t, r, sid); v.seq != 2 {
		t.Fatalf("a rejected signal touched the session: seq %d", v.seq)
	}
}

// Hub contract: a subscriber whose buffer is full is dropped (Done closes,
// Lagged reports true) while the others keep receiving, and Publish never
// blocks.
func TestHubDropsSlowSubscriber(t *testing.T) {
	h := hub.New[int](2)
	slow, fast, late := h.Subscribe(), h.Subscribe(), h.Subscribe()
	if slow.Lagged() {
		t.Fatal("Lagged before Done")
	}
	publish := func(v int) {
		done := make(chan struct{})
		go func() { h.Publish(v); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("Publish(%d) blocked", v)
		}
	}
	for v := range 100 {
		publish(v)
		if got := recv(t, fast.C, "value for the fast subscriber"); got != v {
			t.Fatalf("fast got %d, want %d", got, v)
		}
		if v < 2 {
			if got := recv(t, late.C, "late"); got != v {
				t.Fatalf("late got %d", got)
			}
		}
		if v == 2 {
			select {
			case <-slow.Done():
			default:
				t.Fatal("slow subscriber not dropped once its buffer overflowed")
			}
		}
	}
	if !slow.Lagged() {
		t.Fatal("dropped subscriber does not report Lagged")
	}
	// The dropped subscriber keeps what it had buffered.
	if a, b := <-slow.C, <-slow.C; a != 0 || b != 1 {
		t.Fatalf("slow buffered %d %d", a, b)
	}
	// late stopped reading after 2 values and was dropped at the 5th.
	select {
	case <-late.Done():
	default:
		t.Fatal("late subscriber not dropped")
	}
	if h.Len() != 1 {
		t.Fatalf("hub has %d subscribers, want 1", h.Len())
	}

	// Unsubscribe: Done closes, not Lagged, idempotent.
	h.Unsubscribe(fast)
	h.Unsubscribe(fast)
	select {
	case <-fast.Done():
	default:
		t.Fatal("Done not closed by Unsubscribe")
	}
	if fast.Lagged() || h.Len() != 0 {
		t.Fatalf("after Unsubscribe: lagged %v len %d", fast.Lagged(), h.Len())
	}
	publish(1000)       // no subscribers: fine
	h.Unsubscribe(slow) // already dropped: fine
}

// The Lifecycle hub never blocks the committer: a subscriber that never
// reads is dropped and sessions keep being accepted.
func TestLifecycleSlowSubscriberDoesNotStallCommits(t *testing.T) {
	r := newRT(t, newFaultStore(), Options{SubscriberBuffer: 2})
	stuck := r.Lifecycle.Subscribe()
	defer r.Lifecycle.Unsubscribe(stuck)
	for range 10 {
		openSession(t, r, 0)
	}
	select {
	case <-stuck.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("stuck subscriber was not dropped")
	}
	if !stuck.Lagged() {
		t.Fatal("not Lagged")
	}
}
