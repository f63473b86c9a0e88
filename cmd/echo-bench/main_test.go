package main

import (
	"context"
	"strings"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// syncBuffer is a log sink safe for concurrent writers and a reader.
type syncBuffer = testutil.SyncBuffer

func TestEcho(t *testing.T) { testEcho(t, "--addr", "127.0.0.1:0") }

// --durable serves the same answers, after a sync (loadgen tests the log).
func TestDurableEcho(t *testing.T) { testEcho(t, "--addr", "127.0.0.1:0", "--durable", t.TempDir()) }

func TestDurableEchoSyncEach(t *testing.T) {
	testEcho(t, "--addr", "127.0.0.1:0", "--durable", t.TempDir(), "--sync-each")
}

func testEcho(t *testing.T, args ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &out, &errOut) }()
	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "echo-bench listening on "); ok {
			addr = s
		}
	}
	if addr == "" {
		t.Fatalf("no address printed: %q %q", out.String(), errOut.String())
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := macpv1.NewMACPRuntimeServiceClient(conn)
	resp, err := c.Send(ctx, &macpv1.SendRequest{Envelope: &macpv1.Envelope{SessionId: "s", MessageId: "m", MessageType: "Anything"}})
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.GetAck(); !a.Ok || a.MessageId != "m" || a.SessionId != "s" || a.AcceptedAtUnixMs == 0 || a.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("ack %v", a)
	}
	// No envelope at all is acknowledged too: nothing is validated.
	if resp, err := c.Send(ctx, &macpv1.SendRequest{}); err != nil || !resp.GetAck().GetOk() {
		t.Fatalf("%v %v", resp, err)
	}
	if _, err := c.GetSession(ctx, &macpv1.GetSessionRequest{SessionId: "s"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetSession: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestUsage(t *testing.T) {
	var out, errOut syncBuffer
	if err := run(context.Background(), []string{"stray"}, &out, &errOut); err == nil {
		t.Fatal("stray argument accepted")
	}
	if err := run(context.Background(), []string{"--addr", "not an address"}, &out, &errOut); err == nil {
		t.Fatal("bad address accepted")
	}
	if err := run(context.Background(), []string{"--durable", "/nonexistent/dir"}, &out, &errOut); err == nil {
		t.Fatal("unusable --durable directory accepted")
	}
	if err := run(context.Background(), []string{"--sync-each"}, &out, &errOut); err == nil {
		t.Fatal("--sync-each without --durable accepted")
	}
}
