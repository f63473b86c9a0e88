package soak_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/tlsconf/tlstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Soak (issue #6 done-when): an abusive client and a well-behaved client
// against one macpd (TLS, static tokens, the default limits). The
// well-behaved client runs Decision sessions (start, proposal, vote,
// commitment) at a steady pace, spread over goodPairs initiator/peer
// identities so that each stays within the default per-sender rates:
// alone, then while the abuser floods - SessionStarts and messages far
// over its rates, frames over the receive limit, invalid protobuf over raw
// HTTP/2, calls without or with bad credentials, more streams than it may
// open (left idle), TCP connections that never handshake - then alone
// again. Every well-behaved session must resolve, and the p99 of its call
// latency under abuse must stay within maxP99Factor of its p99 alone
// (measured before and after the abuse, in the same run).
//
// The abuser runs in its own process on one CPU (abuser_test.go), so the
// test measures what the runtime does with the flood rather than how two
// clients share one Go scheduler.
//
// Measured on a 2-CPU machine that other test runs were sharing (load
// average 7-9): with -race, p50 1.6-1.8 ms alone and 3.1-6.1 ms under
// abuse, p99 12-63 ms alone and 184-358 ms under abuse, factor 3.1-21;
// without -race, p50 0.12-0.15 ms and 0.27-0.31 ms, p99 2.1-4.1 ms and
// 29-39 ms, factor 2.9-3.9 (against the 10 ms floor). maxP99Factor leaves
// more than twice the worst of those as margin for CI machines.
const (
	maxP99Factor = 50.0
	// p99Floor is the least baseline p99 the factor is computed against:
	// a baseline of a few milliseconds would turn scheduler jitter into a
	// large ratio.
	p99Floor = 10 * time.Millisecond

	baselineFor = 4 * time.Second // alone: this long before the abuse and again after it
	abuseFor    = 10 * time.Second
	workers     = 4                      // concurrent well-behaved sessions
	pace        = 200 * time.Millisecond // per worker: one session started every pace
	// goodPairs initiator/peer identities share the well-behaved load: 20
	// sessions a second in all, so each initiator starts 30 a minute and
	// sends 60 other messages (default limits: 60 and 600).
	goodPairs = 40
)

const (
	mallory = "agent://mallory"
	mode    = "macp.mode.decision.v1"
)

func goodID(i int) string   { return fmt.Sprintf("agent://good-%d", i%goodPairs) }
func goodPeer(i int) string { return fmt.Sprintf("agent://peer-%d", i%goodPairs) }

func token(sender string) string { return "soak-token-" + sender[len("agent://"):] + "-8d0f1e2a" }

func TestSoakAbuseVersusWellBehaved(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test: skipped with -short")
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "soak CA")
	certPath, keyPath := ca.Server(t, "macpd").Write(t, dir, "server")
	list := []map[string]any{{"token": token(mallory), "sender": mallory, "max_open_sessions": 1000}}
	for i := range goodPairs {
		list = append(list, map[string]any{"token": token(goodID(i)), "sender": goodID(i)},
			map[string]any{"token": token(goodPeer(i)), "sender": goodPeer(i)})
	}
	toks, _ := json.Marshal(list)
	cfg := config.Default()
	// Both clients connect from 127.0.0.1: the per-address cap would
	// measure itself, not the limits this test is about.
	cfg.Limits.MaxConnectionsPerAddr = 0
	// The abuser dials its connections up front and uses some only later;
	// the first-call deadline has its own test (internal/server).
	cfg.Limits.FirstCallTimeout = 0
	cfg.MemoryOnly = true
	cfg.BindAddr = "127.0.0.1:0"
	cfg.TLSCertPath, cfg.TLSKeyPath = certPath, keyPath
	cfg.Auth.TokensJSON = string(toks)
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	tlsConf := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(tlsConf.Clone())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	wb := &wellBehaved{c: macpv1.NewMACPRuntimeServiceClient(dial())}
	wb.warmUp(t)
	wb.n.Store(0)
	base := wb.run(t, baselineFor)

	stop := startAbuser(t, a.Addr(), ca.WriteCert(t, dir, "ca.pem")) // returns with every kind of abuse under way
	under := wb.run(t, abuseFor)
	counts := stop()

	// Alone again: the runtime recovered, and a baseline on both sides of
	// the abuse is less sensitive to whatever else the machine does.
	after := wb.run(t, baselineFor)
	base.sessions += after.sessions
	base.latencies = append(base.latencies, after.latencies...)
	base.failures = append(base.failures, after.failures...)

	if len(base.failures)+len(under.failures) > 0 {
		t.Errorf("well-behaved sessions failed: %v %v", base.failures, under.failures)
	}
	if base.sessions == 0 || under.sessions == 0 {
		t.Fatalf("no sessions completed: %d alone, %d under abuse", base.sessions, under.sessions)
	}
	b99, u99 := percentile(base.latencies, 0.99), percentile(under.latencies, 0.99)
	factor := float64(u99) / float64(max(b99, p99Floor))
	t.Logf("well-behaved alone:       %d sessions, %d calls, p50 %v, p99 %v", base.sessions, len(base.latencies),
		percentile(base.latencies, 0.5), b99)
	t.Logf("well-behaved under abuse: %d sessions, %d calls, p50 %v, p99 %v", under.sessions, len(under.latencies),
		percentile(under.latencies, 0.5), u99)
	t.Logf("p99 factor under abuse: %.2f (limit %.0f; baseline floor %v)", factor, maxP99Factor, p99Floor)
	t.Logf("abuser: %s", counts)
	if factor > maxP99Factor {
		t.Errorf("p99 under abuse %v is %.1f times the p99 alone %v (limit %.0f)", u99, factor, b99, maxP99Factor)
	}
	// The abuse was real and was answered with the limits' errors.
	for _, what := range abuseAnswers {
		if counts.get(what) == 0 {
			t.Errorf("the abuser never got %s: %s", what, counts)
		}
	}
	// The abuser's sessions are what its start rate allowed.
	allowed := cfg.Limits.SessionStartsPerMinute * (1 + int((abuseFor+2*time.Second)/time.Minute+1))
	if n := openSessionsOf(t, a, mallory); n > allowed {
		t.Errorf("the abuser has %d open sessions, more than its start rate allows (%d)", n, allowed)
	}
}

var observerID = coord.Identity{Sender: "soak-observer", Caps: coord.Capabilities{IsObserver: true}}

func openSessionsOf(t *testing.T, a *app.App, sender string) int {
	n := 0
	for _, md := range a.Runtime().ListSessions(context.Background(), observerID) {
		if md.Initiator == sender && md.State == macpv1.SessionState_SESSION_STATE_OPEN {
			n++
		}
	}
	return n
}

// wellBehaved runs Decision sessions at a steady pace and measures every
// call.
type wellBehaved struct {
	c macpv1.MACPRuntimeServiceClient
	n atomic.Int64 // sessions started, picks the identity pair
}

type result struct {
	sessions  int
	latencies []time.Duration
	failures  []string
}

func ctxAs(sender string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token(sender)), cancel
}

func (w *wellBehaved) warmUp(t *testing.T) {
	var r result
	w.session(&r)
	if len(r.failures) > 0 {
		t.Fatalf("warm-up session failed: %v", r.failures)
	}
}

// run runs workers sessions loops for d and returns what they measured.
func (w *wellBehaved) run(t *testing.T, d time.Duration) result {
	t.Helper()
	var mu sync.Mutex
	var total result
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(pace)
			defer tick.Stop()
			time.Sleep(time.Duration(i) * pace / workers) // stagger
			var r result
			for time.Now().Before(end) {
				w.session(&r)
				<-tick.C
			}
			mu.Lock()
			total.sessions += r.sessions
			total.latencies = append(total.latencies, r.latencies...)
			total.failures = append(total.failures, r.failures...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}

// session runs one Decision session to resolution, recording each call's
// latency.
func (w *wellBehaved) session(r *result) {
	sid := uuid.NewString()
	i := int(w.n.Add(1))
	good, peer := goodID(i), goodPeer(i)
	env := func(typ, id string, p proto.Message) *macpv1.Envelope {
		b, _ := proto.Marshal(p)
		return &macpv1.Envelope{MacpVersion: "1.0", Mode: mode, MessageType: typ, MessageId: id, SessionId: sid,
			TimestampUnixMs: time.Now().UnixMilli(), Payload: b}
	}
	steps := []struct {
		sender string
		env    *macpv1.Envelope
	}{
		{good, env("SessionStart", "m0", &macpv1.SessionStartPayload{Intent: "soak", Participants: []string{peer},
			ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 60000})},
		{good, env("Proposal", "m1", &decisionv1.ProposalPayload{ProposalId: "p1", Option: "ship"})},
		{peer, env("Vote", "m2", &decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE", Reason: "ok"})},
		{good, env("Commitment", "m3", &macpv1.CommitmentPayload{CommitmentId: "c1", Action: "decision.selected",
			AuthorityScope: "soak", Reason: "approved", ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", OutcomePositive: true})},
	}
	for _, s := range steps {
		ctx, cancel := ctxAs(s.sender)
		t0 := time.Now()
		resp, err := w.c.Send(ctx, &macpv1.SendRequest{Envelope: s.env})
		r.latencies = append(r.latencies, time.Since(t0))
		cancel()
		if err != nil || !resp.GetAck().GetOk() {
			r.failures = append(r.failures, fmt.Sprintf("%s %s: %v %v", sid, s.env.MessageType, resp.GetAck().GetError(), err))
			return
		}
		if s.env.MessageType == "Commitment" && resp.Ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
			r.failures = append(r.failures, fmt.Sprintf("%s not resolved: %v", sid, resp.Ack))
			return
		}
	}
	r.sessions++
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}
