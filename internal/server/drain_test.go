package server_test

import (
	"context"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/server"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Graceful shutdown with connected watchers: the watch streams idle until
// the client leaves, so grpc.Server.GracefulStop alone never returns while
// one is open (macpd would then burn its whole shutdown grace and hard-stop
// in-flight Sends). Service.Drain ends every open stream with UNAVAILABLE
// (clients reconnect) and refuses new ones; unary calls keep working until
// GracefulStop, which then returns promptly.
func TestDrainEndsStreamsSoGracefulStopReturns(t *testing.T) {
	e, svc, g := startService(t, server.Options{})
	ctx := asT(t, "alice")
	ws, err := e.c.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sg, err := e.c.WatchSignals(ctx, &macpv1.WatchSignalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wr, err := e.c.WatchRoots(context.Background(), &macpv1.WatchRootsRequest{}) // public
	if err != nil {
		t.Fatal(err)
	}
	hw, err := healthpb.NewHealthClient(e.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wsCh, sgCh, wrCh, hwCh := recvAsync(ws), recvAsync(sg), recvAsync(wr), recvAsync(hw)
	next(t, wrCh) // initial roots hint
	next(t, hwCh) // SERVING
	eventually(t, "subscriptions", func() bool { return e.rt.Lifecycle.Len() == 1 && e.rt.Signals.Len() == 1 })

	svc.Drain()
	svc.Drain() // idempotent
	wantStatus(t, streamErr(t, wsCh), codes.Unavailable, "")
	wantStatus(t, streamErr(t, sgCh), codes.Unavailable, "")
	wantStatus(t, streamErr(t, wrCh), codes.Unavailable, "")
	wantStatus(t, streamErr(t, hwCh), codes.Unavailable, "")

	// New streams are refused; unary calls still work until GracefulStop.
	s, err := e.c.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	wantStatus(t, err, codes.Unavailable, "")
	if _, err := e.c.ListSessions(ctx, &macpv1.ListSessionsRequest{}); err != nil {
		t.Fatalf("unary call after Drain: %v", err)
	}

	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		t.Fatal("GracefulStop did not return after Drain")
	}
}

// A stream the client ends itself still ends with the client's
// cancellation, not UNAVAILABLE, and leaves no subscription behind.
func TestStreamEndedByClientIsNotDrain(t *testing.T) {
	e, _, _ := startService(t, server.Options{})
	ctx, cancel := context.WithCancel(as("alice"))
	ws, err := e.c.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ch := recvAsync(ws)
	eventually(t, "subscription", func() bool { return e.rt.Lifecycle.Len() == 1 })
	cancel()
	wantStatus(t, streamErr(t, ch), codes.Canceled, "")
	eventually(t, "unsubscribe", func() bool { return e.rt.Lifecycle.Len() == 0 })
}
