package loadgen_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/clikit/clitest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/testutil"
)

func startApp(t *testing.T) *app.App { return clitest.StartApp(t) }

// storeHistory reads history straight from the runtime's store (the
// gRPC history read, StreamSession, is someone else's work in progress).
type storeHistory struct{ st store.Store }

func (s storeHistory) History(ctx context.Context, sid string) ([]*macpv1.Envelope, error) {
	var envs []*macpv1.Envelope
	err := s.st.Read(ctx, sid, 1, func(r session.Record) error {
		if r.Envelope != nil {
			envs = append(envs, r.Envelope)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, loadgen.ErrNoSession
	}
	return envs, err
}

// syncBuffer is a log sink safe for concurrent writers and a reader.
type syncBuffer = testutil.SyncBuffer

func checkLatency(t *testing.T, l loadgen.Latency, count int64) {
	t.Helper()
	if int64(l.Count) != count {
		t.Errorf("latency count %d, want %d", l.Count, count)
	}
	if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("percentiles not monotone: %+v", l)
	}
	if l.Mean <= 0 || l.Mean > l.Max {
		t.Errorf("mean %v outside (0, max %v]", l.Mean, l.Max)
	}
}

func checkLog(t *testing.T, a *app.App, log string, wantLines int) {
	t.Helper()
	acked, err := loadgen.ReadAckedLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(acked) != wantLines {
		t.Fatalf("acked log has %d lines, want %d (one per ok ack)", len(acked), wantLines)
	}
	rep := loadgen.Checker{History: storeHistory{a.Runtime().Store()}}.Check(context.Background(), acked)
	if !rep.OK() || rep.Checked != wantLines {
		t.Fatalf("check: %s: %v", rep.Summary(), rep.Problems)
	}
}

func TestRunDecision(t *testing.T) {
	a := startApp(t)
	var log syncBuffer
	const S, M = 6, 9
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr: a.Addr(), Sessions: S, Messages: M, Concurrency: 3, Commit: true, AckedLog: &log,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(S * (1 + M + 1))
	if res.Sends != want || res.Acked != want || res.Rejected != 0 || res.Errors != 0 || res.Duplicates != 0 {
		t.Fatalf("sends %d acked %d rejected %d (%v: %s) errors %d (%s), want %d acked",
			res.Sends, res.Acked, res.Rejected, res.RejectedByCode, res.FirstRejection, res.Errors, res.FirstError, want)
	}
	if res.SessionsStarted != S || res.SessionsCommitted != S || res.SessionsFailed != 0 || res.SessionsAbandoned != 0 {
		t.Fatalf("sessions %+v", res)
	}
	if res.Throughput <= 0 || res.Elapsed <= 0 {
		t.Fatalf("throughput %v elapsed %v", res.Throughput, res.Elapsed)
	}
	if res.ModeVersion != "1.0.0" || res.Mode != loadgen.ModeDecision {
		t.Fatalf("mode %s %s", res.Mode, res.ModeVersion)
	}
	checkLatency(t, res.Latency, want)
	checkLog(t, a, log.String(), int(want))
	// Every session is RESOLVED.
	for _, md := range a.Runtime().ListSessions(context.Background(), coord.Identity{Sender: loadgen.DefaultInitiator}) {
		if md.State != macpv1.SessionState_SESSION_STATE_RESOLVED {
			t.Errorf("session %s is %v", md.SessionId, md.State)
		}
	}
}

// One session, many concurrent senders.
func TestRunConcurrentSenders(t *testing.T) {
	a := startApp(t)
	var log syncBuffer
	const M = 50
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr: a.Addr(), Sessions: 1, Messages: M, SendersPerSession: 8, Commit: true, AckedLog: &log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1 + M + 1); res.Acked != want || res.Rejected != 0 || res.Errors != 0 {
		t.Fatalf("acked %d rejected %d (%s) errors %d, want %d", res.Acked, res.Rejected, res.FirstRejection, res.Errors, want)
	}
	checkLatency(t, res.Latency, res.Sends)
	checkLog(t, a, log.String(), int(res.Acked))
	streams := map[string]bool{}
	acked, _ := loadgen.ReadAckedLog(strings.NewReader(log.String()))
	for _, e := range acked {
		streams[e.Stream] = true
	}
	if len(streams) != 8 {
		t.Fatalf("%d streams in the log, want 8", len(streams))
	}
}

func TestRunOtherModes(t *testing.T) {
	a := startApp(t)
	for _, m := range []string{"proposal", "multi_round"} {
		for _, senders := range []int{1, 3} {
			res, err := loadgen.Run(context.Background(), loadgen.Config{
				Addr: a.Addr(), Mode: m, Sessions: 2, Messages: 12, Concurrency: 2, SendersPerSession: senders,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Acked != 2*13 || res.Rejected != 0 || res.Errors != 0 {
				t.Errorf("%s senders %d: acked %d rejected %d (%s) errors %d (%s)", m, senders, res.Acked, res.Rejected, res.FirstRejection, res.Errors, res.FirstError)
			}
		}
	}
	if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: a.Addr(), Mode: "proposal", Sessions: 1, Commit: true}); err == nil {
		t.Error("Commit with the proposal pattern: no error")
	}
	if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: a.Addr(), Mode: "macp.mode.task.v1", Sessions: 1}); err == nil {
		t.Error("unknown pattern: no error")
	}
}

// Rejections are counted and never logged.
func TestRunRejectionsNotLogged(t *testing.T) {
	a := startApp(t)
	var log syncBuffer
	// A mode version the runtime does not have: every SessionStart is
	// rejected.
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr: a.Addr(), ModeVersion: "9.9.9", Sessions: 3, Messages: 5, AckedLog: &log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rejected != 3 || res.Acked != 0 || res.SessionsFailed != 3 || len(res.RejectedByCode) == 0 {
		t.Fatalf("%+v", res)
	}
	if log.String() != "" {
		t.Fatalf("acked log has lines for rejected sends: %q", log.String())
	}
}

// proxy forwards TCP connections to target until kill, which drops every
// connection at once: to the client, the server died.
type proxy struct {
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) kill() {
	p.lis.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// The server dies mid-run (every connection drops, new ones are refused):
// the run ends by itself, errors counted, and every logged message is in
// history once and in order.
func TestRunServerDies(t *testing.T) {
	runUntilServerDies(t, loadgen.Config{Sessions: 100000, Messages: 20, Concurrency: 4, SendersPerSession: 2}, 50)
}

// runUntilServerDies runs cfg through a proxy to an in-process macpd and
// drops every connection once the acked log has afterLines lines: the
// run must end (giving up), count errors, and have logged only what is
// in the history.
func runUntilServerDies(t *testing.T, cfg loadgen.Config, afterLines int) {
	t.Helper()
	a := startApp(t)
	p := startProxy(t, a.Addr())
	var log syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan *loadgen.Result, 1)
	cfg.Addr, cfg.AckedLog, cfg.CallTimeout, cfg.GiveUpAfter = p.lis.Addr().String(), &log, 2*time.Second, 300*time.Millisecond
	go func() {
		res, err := loadgen.Run(ctx, cfg)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	for strings.Count(log.String(), "\n") < afterLines {
		if ctx.Err() != nil {
			t.Fatal("no progress")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.kill()
	var res *loadgen.Result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("load generator did not end after the server went away")
	}
	if res.Errors == 0 || res.Acked == 0 || !res.GaveUp {
		t.Fatalf("acked %d errors %d gave up %v", res.Acked, res.Errors, res.GaveUp)
	}
	acked, err := loadgen.ReadAckedLog(strings.NewReader(log.String()))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(acked)) != res.Acked {
		t.Fatalf("log has %d lines, %d acked", len(acked), res.Acked)
	}
	rep := loadgen.Checker{History: storeHistory{a.Runtime().Store()}}.Check(context.Background(), acked)
	if !rep.OK() {
		t.Fatalf("%s: %v", rep.Summary(), rep.Problems[:min(5, len(rep.Problems))])
	}
}

func TestRunDuration(t *testing.T) {
	a := startApp(t)
	t0 := time.Now()
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		// Sessions end with a Commitment: on a fast machine more than the
		// default open-session cap (100 per initiator) start in 300 ms.
		Addr: a.Addr(), Messages: 5, Concurrency: 2, Duration: 300 * time.Millisecond, Commit: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("ran %v", d)
	}
	if res.Acked == 0 || res.Errors != 0 || res.Rejected != 0 {
		t.Fatalf("%+v", res)
	}
}

func TestRunEcho(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := loadgen.NewEchoServer()
	go g.Serve(lis)
	defer g.Stop()
	var log syncBuffer
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr: lis.Addr().String(), Transport: loadgen.TransportEcho, Sessions: 4, Messages: 10, Concurrency: 2, Commit: true, AckedLog: &log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acked != 4*12 || res.Errors != 0 || res.Rejected != 0 {
		t.Fatalf("%+v", res)
	}
	checkLatency(t, res.Latency, 48)
	if n := strings.Count(log.String(), "\n"); n != 48 {
		t.Fatalf("%d log lines", n)
	}
}

func TestPercentile(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {90, 90 * time.Millisecond}, {99, 99 * time.Millisecond}, {99.9, 100 * time.Millisecond}, {100, 100 * time.Millisecond}} {
		if got := loadgen.Percentile(d, c.q); got != c.want {
			t.Errorf("p%v = %v, want %v", c.q, got, c.want)
		}
	}
	if got := loadgen.Percentile(d[:1], 99.9); got != time.Millisecond {
		t.Errorf("one value: %v", got)
	}
	l := loadgen.Summarize([]time.Duration{3, 1, 2})
	if l.P50 != 2 || l.Max != 3 || l.Mean != 2 || l.Count != 3 {
		t.Errorf("%+v", l)
	}
	if l := loadgen.Summarize(nil); l.Count != 0 {
		t.Errorf("%+v", l)
	}
}

func TestAckedLogFlushes(t *testing.T) {
	var b syncBuffer
	l := loadgen.NewAckedLog(&b, 10*time.Millisecond)
	l.Record("s1", "m1", 0, "Proposal")
	deadline := time.Now().Add(2 * time.Second)
	for b.String() == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if b.String() != "s1\tm1\t0\tProposal\n" {
		t.Fatalf("periodic flush: %q", b.String())
	}
	l.Record("s1", "m2", 1, "Evaluation")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "s1\tm2\t1\tEvaluation\n") {
		t.Fatalf("close flush: %q", b.String())
	}
}
