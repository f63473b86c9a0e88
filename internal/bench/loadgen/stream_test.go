package loadgen_test

import (
	"context"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/coord"
)

// The pipelined StreamSession mode (RFC-MACP-0006 §3.2: envelopes sent on
// the stream are admitted like Send and every accepted envelope comes back
// on it): every envelope sent is answered once by its echo, the counts
// match, a latency is recorded per echo, and every echoed envelope is in
// its session's accepted history once, in order (the acked-log checker
// against the store).
func TestRunStream(t *testing.T) {
	a := startApp(t)
	var log syncBuffer
	const S, M, W = 5, 150, 16 // more messages than the window: the window fills and drains
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr: a.Addr(), Sessions: S, Messages: M, Concurrency: 3, Commit: true, Stream: true, Window: W, AckedLog: &log,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(S * (1 + M + 1))
	if res.Sends != want || res.Acked != want || res.Rejected != 0 || res.Errors != 0 || res.Unmatched != 0 {
		t.Fatalf("sends %d acked %d rejected %d (%s) errors %d (%s) unmatched %d, want %d acked",
			res.Sends, res.Acked, res.Rejected, res.FirstRejection, res.Errors, res.FirstError, res.Unmatched, want)
	}
	if res.SessionsStarted != S || res.SessionsCommitted != S || res.SessionsFailed != 0 || res.SessionsAbandoned != 0 {
		t.Fatalf("sessions %+v", res)
	}
	if !res.Stream || res.Window != W || res.Throughput <= 0 {
		t.Fatalf("result %+v", res)
	}
	checkLatency(t, res.Latency, want)
	checkLog(t, a, log.String(), int(want))
	for _, md := range a.Runtime().ListSessions(context.Background(), coord.Identity{Sender: loadgen.DefaultInitiator}) {
		if md.State != macpv1.SessionState_SESSION_STATE_RESOLVED {
			t.Errorf("session %s is %v", md.SessionId, md.State)
		}
	}

	// Proposal sessions, and a window of 1 (send, echo, send).
	for _, c := range []loadgen.Config{
		{Addr: a.Addr(), Mode: "proposal", Sessions: 2, Messages: 30, Concurrency: 2, Stream: true},
		{Addr: a.Addr(), Sessions: 2, Messages: 10, Stream: true, Window: 1},
	} {
		res, err := loadgen.Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(c.Sessions * (1 + c.Messages)); res.Acked != want || res.Sends != want || res.Rejected != 0 || res.Errors != 0 || res.Unmatched != 0 {
			t.Errorf("%s window %d: %+v", c.Mode, c.Window, res)
		}
		checkLatency(t, res.Latency, res.Acked)
	}
}

// In-stream rejections answer their envelopes (matched by message id):
// nothing is left in flight, nothing is logged.
func TestRunStreamRejections(t *testing.T) {
	a := startApp(t)
	var log syncBuffer
	// A mode version the runtime does not have: the SessionStart is
	// rejected, and so is everything after it.
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr: a.Addr(), ModeVersion: "9.9.9", Sessions: 2, Messages: 5, Stream: true, AckedLog: &log,
		CallTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sends != 12 || res.Rejected != 12 || res.Acked != 0 || res.Errors != 0 || res.SessionsFailed != 2 || res.Unmatched != 0 {
		t.Fatalf("%+v", res)
	}
	checkLatency(t, res.Latency, 12)
	if log.String() != "" {
		t.Fatalf("acked log has lines for rejected envelopes: %q", log.String())
	}
}

// The server goes away mid-run: envelopes in flight are errors, the run
// ends, and what was logged as acknowledged is in the history.
func TestRunStreamServerDies(t *testing.T) {
	runUntilServerDies(t, loadgen.Config{Sessions: 100000, Messages: 40, Concurrency: 4, Stream: true, Window: 8}, 100)
}

func TestRunStreamConfig(t *testing.T) {
	for _, c := range []loadgen.Config{
		{Addr: "127.0.0.1:1", Sessions: 1, Stream: true, Transport: loadgen.TransportEcho},
		{Addr: "127.0.0.1:1", Sessions: 1, Stream: true, SendersPerSession: 2},
		{Addr: "127.0.0.1:1", Sessions: 1, Stream: true, Window: -1},
		{Addr: "127.0.0.1:1", Sessions: 1, Stream: true, Mode: "multi_round"},
	} {
		if _, err := loadgen.Run(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
