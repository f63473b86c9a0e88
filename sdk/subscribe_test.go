package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// proxy forwards TCP connections to target; sever cuts every connection
// it carries (half of the time with a reset), as a crashed runtime, a
// load balancer or a flaky network would.
type proxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	severs atomic.Int64
	rng    *rand.Rand
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis, target: target, conns: map[net.Conn]bool{}, rng: rand.New(rand.NewPCG(7, 8))}
	go p.serve()
	t.Cleanup(func() { lis.Close(); p.sever() })
	return p
}

func (p *proxy) Addr() string { return p.lis.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(u, c)
		go pipe(c, u)
	}
}

// sever closes every connection the proxy carries.
func (p *proxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	reset := p.rng.IntN(2) == 0
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0) // RST instead of FIN
		}
		c.Close()
	}
	clear(p.conns)
	p.severs.Add(1)
}

// storedEnvelopes is the session's history as stored: sequence numbers
// and envelopes (the TTL expiry record has none and is left out).
func storedEnvelopes(t *testing.T, a *app.App, sid string) []sdk.SessionEvent {
	t.Helper()
	var out []sdk.SessionEvent
	err := a.Runtime().Store().Read(context.Background(), sid, 1, func(r session.Record) error {
		if r.Envelope != nil {
			out = append(out, sdk.SessionEvent{Seq: r.Seq, Envelope: r.Envelope})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// drain reads sub until it ends and returns what it delivered; it fails
// on any error but io.EOF.
func drain(t *testing.T, sub *sdk.Subscription) []sdk.SessionEvent {
	t.Helper()
	var out []sdk.SessionEvent
	for {
		ev, err := sub.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("after %d events (last %d): %v", len(out), sub.Last(), err)
		}
		out = append(out, ev)
	}
}

func sameEvents(t *testing.T, what string, want, got []sdk.SessionEvent) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: got %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		if want[i].Seq != got[i].Seq || !proto.Equal(want[i].Envelope, got[i].Envelope) {
			t.Fatalf("%s: event %d: got seq %d %v, want seq %d %v", what, i, got[i].Seq, got[i].Envelope, want[i].Seq, want[i].Envelope)
		}
	}
}

func ctxLong(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Issue #5 item 6: the subscriber's connections are cut at random moments
// while senders keep writing; the application sees every envelope exactly
// once, in order, numbered like the store, and the subscription ends
// cleanly after the session's SessionCancel.
func TestSubscribeResumesAcrossSeveredConnections(t *testing.T) {
	a := startApp(t, func(c *config.Config) { c.StreamHeartbeat = 3 * time.Millisecond })
	p := newProxy(t, a.Addr())
	ctx := ctxLong(t)
	initC := dial(t, a.Addr(), "init")
	d := startDecision(t, initC, "alice", "bob")

	var reconnectErrs atomic.Int64
	sub := dial(t, p.Addr(), "alice").Subscribe(ctx, d.ID, 0,
		sdk.WithReconnectBackoff(time.Millisecond, 20*time.Millisecond),
		sdk.WithReconnectHook(func(int, error) { reconnectErrs.Add(1) }))
	defer sub.Close()

	// Senders write directly to the runtime, unaffected by the cuts.
	var senders sync.WaitGroup
	for w, who := range []string{"init", "alice", "bob"} {
		c := dial(t, a.Addr(), who)
		senders.Add(1)
		go func() {
			defer senders.Done()
			ds := c.Decision(d.ID)
			for i := 0; i < 150; i++ {
				time.Sleep(500 * time.Microsecond)
				if _, err := ds.Propose(ctx, fmt.Sprintf("w%d-%d", w, i), "x", ""); err != nil {
					t.Errorf("sender %s: %v", who, err)
					return
				}
			}
		}()
	}
	// Cut the subscriber's connections every few milliseconds until it is
	// done, including around the end of the session.
	stopCutting := make(chan struct{})
	cutterDone := make(chan struct{})
	go func() {
		defer close(cutterDone)
		rng := rand.New(rand.NewPCG(9, 10))
		for {
			select {
			case <-stopCutting:
				return
			case <-time.After(time.Duration(2+rng.IntN(20)) * time.Millisecond):
				p.sever()
			}
		}
	}()
	go func() {
		senders.Wait()
		time.Sleep(30 * time.Millisecond)
		if _, err := d.Cancel(ctx, "done"); err != nil {
			t.Errorf("cancel: %v", err)
		}
	}()

	got := drain(t, sub)
	close(stopCutting)
	<-cutterDone

	want := storedEnvelopes(t, a, d.ID)
	if len(want) != 1+3*150+1 {
		t.Fatalf("history has %d envelopes, want %d", len(want), 1+3*150+1)
	}
	sameEvents(t, "subscription across cuts", want, got)
	if got[len(got)-1].Envelope.MessageType != "SessionCancel" {
		t.Fatalf("last event %v, want the SessionCancel", got[len(got)-1].Envelope)
	}
	if sub.Last() != want[len(want)-1].Seq {
		t.Fatalf("Last() = %d, want %d", sub.Last(), want[len(want)-1].Seq)
	}
	if p.severs.Load() < 5 || sub.Reconnects() == 0 || int64(sub.Reconnects()) != reconnectErrs.Load() {
		t.Fatalf("severs %d, reconnects %d, hook calls %d: the test did not exercise reconnection",
			p.severs.Load(), sub.Reconnects(), reconnectErrs.Load())
	}
	t.Logf("%d envelopes, %d cuts, %d reconnects", len(got), p.severs.Load(), sub.Reconnects())

	// Once ended, Next keeps answering io.EOF.
	if _, err := sub.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the end: %v", err)
	}
	// A fresh subscription from 0 sees the same history.
	sameEvents(t, "fresh from 0", want, drain(t, dial(t, a.Addr(), "bob").Subscribe(ctx, d.ID, 0)))
}

// Boundaries through the SDK: a terminal session from 0, from N and
// beyond N; an OPEN session beyond its end numbers live envelopes like the
// store (the resume-after header anchors the count); resuming from Last.
func TestSubscribeBoundaries(t *testing.T) {
	a := startApp(t, func(c *config.Config) { c.StreamHeartbeat = 5 * time.Millisecond })
	ctx := ctxLong(t)
	initC := dial(t, a.Addr(), "init")
	alice := dial(t, a.Addr(), "alice")
	d := startDecision(t, initC, "alice")
	for i := 0; i < 3; i++ {
		mustOK(t, "propose")(d.Propose(ctx, fmt.Sprintf("p%d", i), "x", ""))
	}
	time.Sleep(5 * time.Millisecond) // history strictly before the next stream opens

	// Beyond the end of an OPEN session: live only, correctly numbered.
	sub := alice.Subscribe(ctx, d.ID, 1<<40)
	defer sub.Close()
	evc := make(chan sdk.SessionEvent, 1)
	errc := make(chan error, 1)
	go func() {
		ev, err := sub.Next()
		evc <- ev
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	mustOK(t, "live")(d.Propose(ctx, "live", "x", ""))
	ev, err := <-evc, <-errc
	if err != nil {
		t.Fatal(err)
	}
	hist := storedEnvelopes(t, a, d.ID)
	sameEvents(t, "live beyond the end", hist[4:5], []sdk.SessionEvent{ev})

	// Resuming from Last continues exactly there.
	mustOK(t, "more")(d.Propose(ctx, "more", "x", ""))
	mustOK(t, "commit")(d.Commit(ctx, &macpv1.CommitmentPayload{Action: "decision.selected", AuthorityScope: "s", Reason: "r", OutcomePositive: true}))
	hist = storedEnvelopes(t, a, d.ID)
	n := hist[len(hist)-1].Seq
	sub.Close()
	sameEvents(t, "resume from Last", hist[5:], drain(t, alice.Subscribe(ctx, d.ID, sub.Last())))

	// Terminal session. (Beyond the end is "live since the stream opened":
	// keep the commit out of that millisecond.)
	time.Sleep(5 * time.Millisecond)
	sameEvents(t, "terminal from 0", hist, drain(t, alice.Subscribe(ctx, d.ID, 0)))
	for _, after := range []uint64{n, n + 1, 1 << 40} {
		s := alice.Subscribe(ctx, d.ID, after)
		if got := drain(t, s); len(got) != 0 {
			t.Fatalf("after %d on a terminal session: %d events", after, len(got))
		}
		if s.Last() != n || s.Reconnects() != 0 {
			t.Fatalf("after %d: Last %d reconnects %d, want %d 0", after, s.Last(), s.Reconnects(), n)
		}
	}
}

// Refusals are permanent: no reconnection, and the error stays.
func TestSubscribeRefused(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	d := startDecision(t, dial(t, a.Addr(), "init"), "alice")

	sub := dial(t, a.Addr(), "mallory").Subscribe(ctx, d.ID, 0, sdk.WithReconnectBackoff(time.Millisecond, time.Millisecond))
	_, err := sub.Next()
	wantCode(t, err, sdk.CodeForbidden)
	if status.Code(errors.Unwrap(err)) != codes.PermissionDenied || sub.Reconnects() != 0 {
		t.Fatalf("forbidden: %v, %d reconnects", err, sub.Reconnects())
	}
	_, err2 := sub.Next()
	if err2 != err {
		t.Fatalf("the error is not sticky: %v then %v", err, err2)
	}

	sub = dial(t, a.Addr(), "alice").Subscribe(ctx, sdk.NewSessionID(), 0)
	_, err = sub.Next()
	wantCode(t, err, sdk.CodeSessionNotFound)
	if sub.Reconnects() != 0 {
		t.Fatalf("%d reconnects", sub.Reconnects())
	}

	// Without credentials: UNAUTHENTICATED, permanent too.
	sub = dial(t, a.Addr(), "").Subscribe(ctx, d.ID, 0)
	_, err = sub.Next()
	wantCode(t, err, sdk.CodeUnauthenticated)
}

// A runtime that cannot be reached: the subscription retries
// WithMaxReconnects times with backoff, then returns the transport error.
func TestSubscribeGivesUp(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	var attempts []int
	sub := dial(t, addr, "alice").Subscribe(ctxT(t), sdk.NewSessionID(), 0,
		sdk.WithReconnectBackoff(time.Millisecond, 4*time.Millisecond), sdk.WithMaxReconnects(3),
		sdk.WithReconnectHook(func(n int, err error) {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("hook error %v", err)
			}
			attempts = append(attempts, n)
		}))
	start := time.Now()
	_, err = sub.Next()
	if status.Code(err) != codes.Unavailable || sdk.CodeOf(err) != "" {
		t.Fatalf("want UNAVAILABLE, got %v", err)
	}
	if sub.Reconnects() != 3 || fmt.Sprint(attempts) != "[1 2 3]" {
		t.Fatalf("reconnects %d, hook %v", sub.Reconnects(), attempts)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("giving up took %v", time.Since(start))
	}
}

// Close (or the end of ctx) ends a blocked Next with context.Canceled; All
// stops without an error at the end of the session.
func TestSubscribeCloseAndAll(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	d := startDecision(t, dial(t, a.Addr(), "init"), "alice")
	alice := dial(t, a.Addr(), "alice")

	sub := alice.Subscribe(ctx, d.ID, 1) // after the SessionStart: nothing yet
	done := make(chan error, 1)
	go func() {
		_, err := sub.Next()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	sub.Close()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Next after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Next")
	}

	all := alice.Subscribe(ctx, d.ID, 0)
	defer all.Close()
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = d.Propose(ctx, "p1", "x", "")
		_, _ = d.Cancel(ctx, "bye")
	}()
	var got []sdk.SessionEvent
	for ev, err := range all.All() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	sameEvents(t, "All", storedEnvelopes(t, a, d.ID), got)
	if len(got) != 3 {
		t.Fatalf("got %d events", len(got))
	}
}

// The SDK's metadata names are the runtime's.
func TestSubscribeMetadataNames(t *testing.T) {
	if sdk.HeaderSessionSequence != server.HeaderSessionSeq || sdk.HeaderResumeAfter != server.HeaderResumeFrom ||
		sdk.TrailerLastSequence != server.TrailerLastSeq {
		t.Fatal("sdk and server disagree on the stream metadata names")
	}
}

// restartable is a runtime whose gRPC server can be stopped and started
// again on the same address while the runtime (and its store) lives on: a
// macpd restart with durable state.
type restartable struct {
	t    *testing.T
	rt   *runtime.Runtime
	reg  *registry.Registry
	addr string
	svc  *server.Service
	g    *grpc.Server
}

func newRestartable(t *testing.T) *restartable {
	t.Helper()
	st := memstore.New()
	reg := registry.New(st, builtin.Modes(), policy.DefaultOnly{}, registry.Options{})
	rt := runtime.New(st, reg, reg, runtime.Options{})
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := &restartable{t: t, rt: rt, reg: reg, addr: "127.0.0.1:0"}
	r.start()
	t.Cleanup(func() { r.g.Stop(); rt.Close() })
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	r.svc = server.New(r.rt, auth.Chain{auth.Dev{}}, server.Options{StreamHeartbeat: 10 * time.Millisecond, Registry: r.reg})
	r.g, _ = r.svc.NewGRPCServer()
	var lis net.Listener
	var err error
	for i := 0; i < 100; i++ { // the port was just released
		if lis, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = lis.Addr().String()
	go func() { _ = r.g.Serve(lis) }()
}

// stop ends the server: gracefully (Drain: streams end UNAVAILABLE) or
// abruptly (connections closed).
func (r *restartable) stop(graceful bool) {
	if graceful {
		r.svc.Drain()
		r.g.GracefulStop()
	} else {
		r.g.Stop()
	}
}

// The runtime restarts (gracefully, then abruptly) while the subscriber
// waits: the subscription reconnects once the runtime is back, within its
// own backoff rather than gRPC's connection backoff, and misses nothing.
func TestSubscribeSurvivesServerRestart(t *testing.T) {
	r := newRestartable(t)
	ctx := ctxLong(t)
	initC := dial(t, r.addr, "init")
	d := startDecision(t, initC, "alice")
	sub := dial(t, r.addr, "alice").Subscribe(ctx, d.ID, 0, sdk.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond))
	defer sub.Close()
	var got []sdk.SessionEvent
	ev, err := sub.Next() // SessionStart
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, ev)
	for round, graceful := range []bool{true, false} {
		// The subscriber waits in Next while the runtime is down.
		type result struct {
			ev  sdk.SessionEvent
			err error
		}
		res := make(chan result, 1)
		base := sub.Reconnects()
		go func() {
			ev, err := sub.Next()
			res <- result{ev, err}
		}()
		r.stop(graceful)
		// Accepted while the transport is down (in-process, as if through
		// another replica).
		p, _ := sdk.NewProposal(d.ID, &decisionv1.ProposalPayload{ProposalId: fmt.Sprintf("down-%d", round), Option: "x"})
		if ack := r.rt.Send(ctx, coord.Identity{Sender: "init"}, p); !ack.Ok {
			t.Fatal(ack.Error)
		}
		// Enough failed attempts for gRPC's own connection backoff (1 s,
		// then 1.6 s, ±20%) to have kicked in: left to it, every call in
		// the next second would fail at once.
		for sub.Reconnects()-base < 8 {
			select {
			case x := <-res:
				t.Fatalf("round %d: Next returned while the runtime was down: %v %v", round, x.ev, x.err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		r.start()
		restarted := sub.Reconnects()
		x := <-res
		if x.err != nil {
			t.Fatal(x.err)
		}
		got = append(got, x.ev)
		// Counted in the subscription's own attempts, not in wall time:
		// the attempt after the restart reaches it, because the SDK resets
		// gRPC's connection backoff before each one. Left to gRPC's
		// backoff, attempts would keep failing at once (one per 5-50 ms
		// backoff) for a second or more after the restart.
		after := sub.Reconnects() - restarted
		t.Logf("round %d: %d reconnection attempts while down, %d after the restart", round, restarted-base, after)
		if after > 2 {
			t.Errorf("round %d: %d more failed attempts after the restart before the subscription came back", round, after)
		}
	}
	mustOK(t, "cancel")(d.Cancel(ctx, "end"))
	got = append(got, drain(t, sub)...)
	sameEvents(t, "across restarts", storedFrom(t, r.rt, d.ID), got)
}

func storedFrom(t *testing.T, rt *runtime.Runtime, sid string) []sdk.SessionEvent {
	t.Helper()
	var out []sdk.SessionEvent
	if err := rt.Store().Read(context.Background(), sid, 1, func(r session.Record) error {
		if r.Envelope != nil {
			out = append(out, sdk.SessionEvent{Seq: r.Seq, Envelope: r.Envelope})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A real macpd restart on its durable store (same data directory, same
// address): the subscription waits through the outage, resubscribes from
// its cursor against the recovered session, and the application sees the
// history before and after the restart exactly once, in order, up to the
// end of the session.
func TestSubscribeAcrossMacpdRestart(t *testing.T) {
	cfg := config.Default()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	cfg.MemoryOnly = false
	cfg.DataDir = t.TempDir()
	cfg.StreamHeartbeat = 10 * time.Millisecond
	start := func() *app.App {
		t.Helper()
		var err error
		for i := 0; i < 100; i++ { // the port was just released
			var a *app.App
			if a, err = app.New(cfg, nil); err != nil {
				t.Fatal(err)
			}
			if err = a.Start(context.Background()); err == nil {
				t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
				return a
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal(err)
		return nil
	}
	a := start()
	cfg.BindAddr = a.Addr() // restart on the same address
	ctx := ctxLong(t)
	initC := dial(t, a.Addr(), "init", sdk.WithRetry(20))
	d := startDecision(t, initC, "alice")

	sub := dial(t, a.Addr(), "alice").Subscribe(ctx, d.ID, 0, sdk.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond))
	defer sub.Close()
	type result struct {
		evs []sdk.SessionEvent
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		for {
			ev, err := sub.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					r.err = err
				}
				done <- r
				return
			}
			r.evs = append(r.evs, ev)
		}
	}()
	propose := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			mustOK(t, "propose")(d.Propose(ctx, fmt.Sprintf("%s-%d", prefix, i), "x", ""))
		}
	}
	propose("before", 20)
	time.Sleep(20 * time.Millisecond)
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the subscription retries meanwhile
	a = start()
	propose("after", 20)
	mustOK(t, "cancel")(d.Cancel(ctx, "end"))

	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the subscription did not finish")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := storedEnvelopes(t, a, d.ID)
	if len(want) != 1+40+1 {
		t.Fatalf("history has %d envelopes", len(want))
	}
	sameEvents(t, "across a macpd restart", want, r.evs)
	if sub.Reconnects() == 0 {
		t.Fatal("no reconnection")
	}

	// Once more, now that the session is terminal: after recovery the
	// whole history replays and ends, and a subscription at the end ends
	// at once.
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	a = start()
	alice := dial(t, a.Addr(), "alice")
	sameEvents(t, "recovered terminal session", want, drain(t, alice.Subscribe(ctx, d.ID, 0)))
	n := want[len(want)-1].Seq
	if got := drain(t, alice.Subscribe(ctx, d.ID, n)); len(got) != 0 {
		t.Fatalf("after the end of a recovered terminal session: %d events", len(got))
	}
}
