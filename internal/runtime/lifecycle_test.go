package runtime

import (
	"context"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
)

// nextWatched waits for the next event of sw.
func nextWatched(t *testing.T, sw *SessionWatch) *macpv1.SessionLifecycleEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if ev, ok := sw.Next(); ok {
			return ev
		}
		select {
		case <-sw.Ready():
		case <-deadline:
			t.Fatal("no lifecycle event")
		}
	}
}

// SessionWatch (WatchSessions on every transport): the sync reports the
// live sessions the caller may observe, a CREATED the sync already
// reported is not repeated, later events arrive, and a caller sees only
// sessions it may observe.
func TestSessionWatchSyncThenLive(t *testing.T) {
	r := newRT(t, memstore.New(), Options{})
	s1 := openSession(t, r, 0)

	sw := r.WatchSessions(initID)
	defer sw.Close()
	out := r.WatchSessions(outsiderID)
	defer out.Close()
	if sw.SubscribedMs == 0 {
		t.Fatal("SubscribedMs not set")
	}
	sync := sw.Sync(context.Background())
	if len(sync) != 1 || sync[0].GetSession().GetSessionId() != s1 || sync[0].GetEventType() != evCreated || sync[0].GetObservedAtUnixMs() != sw.SubscribedMs {
		t.Fatalf("sync = %v", sync)
	}
	if got := out.Sync(context.Background()); len(got) != 0 {
		t.Fatalf("outsider's sync = %v", got)
	}

	// s1's CREATED arriving after the sync (it was created between
	// subscribing and the sync) is a duplicate.
	md := sync[0].GetSession()
	r.Lifecycle.Publish(LifecycleEvent{Type: evCreated, Session: md, ObservedMs: 1})
	s2 := openSession(t, r, 0)
	if ev := nextWatched(t, sw); ev.GetSession().GetSessionId() != s2 || ev.GetEventType() != evCreated {
		t.Fatalf("after the duplicate: %v", ev)
	}
	// s1's later events arrive.
	if _, err := r.Cancel(context.Background(), initID, s1, "done"); err != nil {
		t.Fatal(err)
	}
	if ev := nextWatched(t, sw); ev.GetSession().GetSessionId() != s1 || ev.GetEventType() != evExpired {
		t.Fatalf("cancel: %v", ev)
	}
	if ev, ok := out.Next(); ok {
		t.Fatalf("outsider saw %v", ev)
	}
	sw.Close()
	select {
	case <-sw.Done():
	default:
		t.Fatal("Done not closed by Close")
	}
	if sw.Overflowed() {
		t.Fatal("Overflowed after Close")
	}
}

// The sync lists the live sessions: SUSPENDED ones too, terminal ones
// not (on every transport; GET /macp/sessions/events used to list OPEN
// ones only).
func TestSessionWatchSyncsLiveSessions(t *testing.T) {
	r := newRT(t, memstore.New(), Options{Limits: session.Limits{MaxTTLMs: 3_600_000, MaxParticipants: 10, MaxPayloadBytes: 1 << 20, MaxSuspendMs: 60_000}})
	ctx := context.Background()
	open, suspended, cancelled := openSession(t, r, 0), openSession(t, r, 0), openSession(t, r, 0)
	if ack, err := r.Suspend(ctx, initID, suspended, "review"); err != nil || !ack.GetOk() {
		t.Fatalf("suspend: %v %v", ack, err)
	}
	if _, err := r.Cancel(ctx, initID, cancelled, "done"); err != nil {
		t.Fatal(err)
	}
	sw := r.WatchSessions(observerID)
	defer sw.Close()
	got := map[string]macpv1.SessionState{}
	for _, ev := range sw.Sync(ctx) {
		if ev.GetEventType() != evCreated {
			t.Fatalf("sync event %v", ev)
		}
		got[ev.GetSession().GetSessionId()] = ev.GetSession().GetState()
	}
	want := map[string]macpv1.SessionState{open: macpv1.SessionState_SESSION_STATE_OPEN, suspended: macpv1.SessionState_SESSION_STATE_SUSPENDED}
	if len(got) != len(want) || got[open] != want[open] || got[suspended] != want[suspended] {
		t.Fatalf("sync = %v, want %v", got, want)
	}
}
