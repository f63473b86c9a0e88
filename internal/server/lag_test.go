package server_test

import (
	"bytes"
	"fmt"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
	"google.golang.org/grpc/codes"
)

// checklist SEC-6 (bounded buffers), STREAM-4 ([RT] slow-consumer lag ends
// the stream with RESOURCE_EXHAUSTED) and server/doc.go (every non-Ack
// failure carries its MACP code as a MACPError detail): a watcher that
// falls behind beyond its bound is disconnected with RATE_LIMITED, never
// silently skipped. (A lifecycle watcher's bound is the number of distinct
// sessions pending: its missed events coalesce, see watch_test.go.)
func TestLaggingWatchersAreDisconnected(t *testing.T) {
	e, _, _ := startService(t, server.Options{}, runtime.Options{SubscriberBuffer: 1, MaxWatchPending: 1})
	big := bytes.Repeat([]byte{'x'}, 256<<10) // fills the HTTP/2 window: the server's Send blocks

	t.Run("WatchSignals", func(t *testing.T) {
		s, err := e.c.WatchSignals(asT(t, "alice"), &macpv1.WatchSignalsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "subscription", func() bool { return e.rt.Signals.Len() == 1 })
		// The client does not read yet: the server blocks in Send, the
		// subscriber buffer fills and the hub drops it.
		for i := 0; e.rt.Signals.Len() > 0; i++ {
			if i > 1000 {
				t.Fatal("subscriber never dropped")
			}
			e.rt.Signals.Publish(&macpv1.Envelope{MacpVersion: "1.0", MessageType: "Signal", MessageId: "s", Sender: "bob", Payload: big})
		}
		wantStatus(t, streamErr(t, recvAsync(s)), codes.ResourceExhausted, "RATE_LIMITED")
	})
	t.Run("WatchSessions", func(t *testing.T) {
		s, err := e.c.WatchSessions(asT(t, "alice"), &macpv1.WatchSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "subscription", func() bool { return e.rt.Lifecycle.Len() == 1 })
		for i := 0; e.rt.Lifecycle.Len() > 0; i++ {
			if i > 1000 {
				t.Fatal("subscriber never dropped")
			}
			md := &macpv1.SessionMetadata{SessionId: fmt.Sprint("s", i), Initiator: "alice", ContextId: string(big)}
			e.rt.Lifecycle.Publish(runtime.LifecycleEvent{Type: macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED, Session: md, ObservedMs: 1})
		}
		wantStatus(t, streamErr(t, recvAsync(s)), codes.ResourceExhausted, "RATE_LIMITED")
	})
}
