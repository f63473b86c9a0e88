package server_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const decisionMode = "macp.mode.decision.v1"

// testEnv is one in-process macpd and a client connected to it over real
// gRPC on 127.0.0.1.
type testEnv struct {
	app  *app.App // nil for startService
	rt   *runtime.Runtime
	conn *grpc.ClientConn
	c    macpv1.MACPRuntimeServiceClient
}

// testConfig is the development configuration every server test starts
// from: plaintext with dev bearer identities, on an ephemeral port (never
// 50051, which another process uses).
func testConfig() config.Config {
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.BindAddr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	// Tests drive many sessions from one sender; the rate limits have
	// their own tests (limits_enforced_test.go, abuse_test.go).
	cfg.Limits.SessionStartsPerMinute, cfg.Limits.MessagesPerMinute = 0, 0
	// Nor the open-session cap (its own test: hardlimits_test.go).
	cfg.MaxOpenSessions = 0
	return cfg
}

// startApp starts internal/app with cfg and connects a client.
func startApp(t *testing.T, cfg config.Config) *testEnv {
	t.Helper()
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	e := &testEnv{app: a, rt: a.Runtime()}
	e.dial(t, a.Addr())
	return e
}

// startService serves a server.Service built directly (for Options the app
// does not expose: Info.Endpoint, Roots, runtime options). The service is
// returned too.
func startService(t testing.TB, opts server.Options, rtOpts ...runtime.Options) (*testEnv, *server.Service, *grpc.Server) {
	t.Helper()
	var ro runtime.Options
	if len(rtOpts) > 0 {
		ro = rtOpts[0]
	}
	st := memstore.New()
	reg := registry.New(st, builtin.Modes(), policy.DefaultOnly{}, registry.Options{})
	rt := runtime.New(st, reg, reg, ro)
	if opts.Registry == nil {
		opts.Registry = reg
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc := server.New(rt, auth.Chain{auth.Dev{}}, opts)
	g, _ := svc.NewGRPCServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); rt.Close() })
	e := &testEnv{rt: rt}
	e.dial(t, lis.Addr().String())
	return e, svc, g
}

func (e *testEnv) dial(t testing.TB, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.conn = conn
	e.c = macpv1.NewMACPRuntimeServiceClient(conn)
}

// as authenticates as agent with a dev bearer token (RFC-MACP-0004 §3;
// checklist SEC-2 "authorization: Bearer <token>").
func as(agent string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+agent)
}

// asT is as with a deadline, for streams.
func asT(t *testing.T, agent string) context.Context {
	ctx, cancel := context.WithTimeout(as(agent), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func envelope(sid, typ, id string, payload []byte) *macpv1.Envelope {
	return testutil.DecisionEnv(sid, id, typ, payload)
}

func startPayload(t testing.TB, participants ...string) []byte {
	return mustMarshal(t, &macpv1.SessionStartPayload{Intent: "pick", Participants: participants,
		ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 60000})
}

func proposalPayload(t testing.TB, id string) []byte {
	return mustMarshal(t, &decisionv1.ProposalPayload{ProposalId: id, Option: "x"})
}

func commitmentPayload(t testing.TB) []byte {
	return mustMarshal(t, &macpv1.CommitmentPayload{CommitmentId: "c1", Action: "decision.selected", AuthorityScope: "s",
		Reason: "r", ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", OutcomePositive: true})
}

// send submits env as agent; the RPC itself must succeed (rejections travel
// in the Ack, RFC-MACP-0006 §3.1).
func (e *testEnv) send(t testing.TB, agent string, env *macpv1.Envelope) *macpv1.Ack {
	t.Helper()
	r, err := e.c.Send(as(agent), &macpv1.SendRequest{Envelope: env})
	if err != nil {
		t.Fatalf("Send %s/%s: gRPC error %v", env.GetMessageType(), env.GetMessageId(), err)
	}
	return r.Ack
}

func (e *testEnv) mustAccept(t testing.TB, agent string, env *macpv1.Envelope) *macpv1.Ack {
	t.Helper()
	ack := e.send(t, agent, env)
	if !ack.Ok {
		t.Fatalf("%s %s rejected: %v", agent, env.MessageType, ack.Error)
	}
	return ack
}

// startSession starts an OPEN Decision session initiated by initiator.
func (e *testEnv) startSession(t *testing.T, initiator string, participants ...string) string {
	t.Helper()
	sid := uuid.NewString()
	e.mustAccept(t, initiator, envelope(sid, "SessionStart", "start-"+sid, startPayload(t, participants...)))
	return sid
}

// resolve resolves an OPEN session with a Proposal and the initiator's
// Commitment.
func (e *testEnv) resolve(t *testing.T, initiator, sid string) {
	t.Helper()
	e.mustAccept(t, initiator, envelope(sid, "Proposal", "p-"+sid, proposalPayload(t, "p1")))
	ack := e.mustAccept(t, initiator, envelope(sid, "Commitment", "c-"+sid, commitmentPayload(t)))
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("commitment did not resolve: %v", ack)
	}
}

func (e *testEnv) getSession(t *testing.T, agent, sid string) *macpv1.SessionMetadata {
	t.Helper()
	r, err := e.c.GetSession(as(agent), &macpv1.GetSessionRequest{SessionId: sid})
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	return r.Metadata
}

// wantStatus asserts err is a gRPC status with code want. If macpCode is
// set, the message must start with it and the details must carry a
// macp.v1.MACPError with that code (server/doc.go error surfaces).
func wantStatus(t *testing.T, err error, want codes.Code, macpCode string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %v, got success", want)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a gRPC status: %v", err)
	}
	if st.Code() != want {
		t.Fatalf("status code %v, want %v (%s)", st.Code(), want, st.Message())
	}
	if macpCode == "" {
		return
	}
	if !strings.HasPrefix(st.Message(), macpCode) {
		t.Errorf("message %q does not start with %s", st.Message(), macpCode)
	}
	found := false
	for _, d := range st.Details() {
		if me, ok := d.(*macpv1.MACPError); ok {
			found = true
			if me.Code != macpCode {
				t.Errorf("MACPError detail code %q, want %q", me.Code, macpCode)
			}
			if me.Message == "" {
				t.Errorf("MACPError detail has no message")
			}
		}
	}
	if !found {
		t.Errorf("status details carry no MACPError: %v", st.Details())
	}
}

// wantNack asserts an Ack rejection with the given MACP code.
func wantNack(t *testing.T, ack *macpv1.Ack, code string) {
	t.Helper()
	if ack.Ok || ack.Error == nil || ack.Error.Code != code {
		t.Fatalf("want nack %s, got %v", code, ack)
	}
}

// eventually is the bounded polling helper: it polls cond every 2 ms
// until it holds, failing the test after 5 s (a bound against a hang).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !pollUntil(5*time.Second, 2*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// pollUntil checks cond every `every` until it holds or d has passed, and
// reports whether it held. It is the only place in these tests that
// sleeps.
func pollUntil(d, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}

// startClocked serves a Service (dev identities, as startApp's) over a
// runtime whose clock is a fake the test advances: the stream rules'
// "now" (the instant a stream opened, acceptance times) moves only when
// the test says.
func startClocked(t *testing.T) (*testEnv, *clocktest.Fake) {
	t.Helper()
	clk := clocktest.New()
	e, _, _ := startService(t, server.Options{}, runtime.Options{Clock: clk})
	return e, clk
}

// recvResult is one Recv of a server stream.
type recvResult[T any] struct {
	msg T
	err error
}

// recvAsync pumps a server stream into a channel so tests can wait with a
// timeout and assert that nothing (more) arrives.
func recvAsync[T any](s grpc.ServerStreamingClient[T]) <-chan recvResult[*T] {
	ch := make(chan recvResult[*T], 1024)
	go func() {
		for {
			m, err := s.Recv()
			ch <- recvResult[*T]{m, err}
			if err != nil {
				close(ch)
				return
			}
		}
	}()
	return ch
}

func next[T any](t *testing.T, ch <-chan recvResult[*T]) *T {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("stream closed")
		}
		if r.err != nil {
			t.Fatalf("stream error: %v", r.err)
		}
		return r.msg
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for a stream message")
	}
	return nil
}

// nothing asserts no message arrives within d.
func nothing[T any](t *testing.T, ch <-chan recvResult[*T], d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("unexpected stream message: %v %v", r.msg, r.err)
	case <-time.After(d):
	}
}

// streamErr waits for the stream to end with an error and returns it.
func streamErr[T any](t *testing.T, ch <-chan recvResult[*T]) error {
	t.Helper()
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatal("stream closed without error")
			}
			if r.err != nil {
				return r.err
			}
		case <-time.After(5 * time.Second):
			t.Fatal("timed out waiting for the stream to fail")
		}
	}
}

// rpcCalls calls every RPC of macp.v1.MACPRuntimeService once with an
// empty request. Streaming calls open the stream and receive once, so a
// call-level failure surfaces as the returned error.
func rpcCalls(c macpv1.MACPRuntimeServiceClient) map[string]func(context.Context) error {
	recv := func(s interface{ RecvMsg(any) error }, err error, m any) error {
		if err != nil {
			return err
		}
		return s.RecvMsg(m)
	}
	return map[string]func(context.Context) error{
		"Initialize": func(ctx context.Context) error {
			_, err := c.Initialize(ctx, &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}})
			return err
		},
		"Send": func(ctx context.Context) error {
			_, err := c.Send(ctx, &macpv1.SendRequest{})
			return err
		},
		"StreamSession": func(ctx context.Context) error {
			s, err := c.StreamSession(ctx)
			return recv(s, err, &macpv1.StreamSessionResponse{})
		},
		"GetSession": func(ctx context.Context) error {
			_, err := c.GetSession(ctx, &macpv1.GetSessionRequest{SessionId: uuid.NewString()})
			return err
		},
		"SuspendSession": func(ctx context.Context) error {
			_, err := c.SuspendSession(ctx, &macpv1.SuspendSessionRequest{SessionId: uuid.NewString()})
			return err
		},
		"ResumeSession": func(ctx context.Context) error {
			_, err := c.ResumeSession(ctx, &macpv1.ResumeSessionRequest{SessionId: uuid.NewString()})
			return err
		},
		"CancelSession": func(ctx context.Context) error {
			_, err := c.CancelSession(ctx, &macpv1.CancelSessionRequest{SessionId: uuid.NewString()})
			return err
		},
		"GetManifest": func(ctx context.Context) error {
			_, err := c.GetManifest(ctx, &macpv1.GetManifestRequest{})
			return err
		},
		"ListModes": func(ctx context.Context) error {
			_, err := c.ListModes(ctx, &macpv1.ListModesRequest{})
			return err
		},
		"WatchModeRegistry": func(ctx context.Context) error {
			s, err := c.WatchModeRegistry(ctx, &macpv1.WatchModeRegistryRequest{})
			return recv(s, err, &macpv1.WatchModeRegistryResponse{})
		},
		"ListRoots": func(ctx context.Context) error {
			_, err := c.ListRoots(ctx, &macpv1.ListRootsRequest{})
			return err
		},
		"WatchRoots": func(ctx context.Context) error {
			s, err := c.WatchRoots(ctx, &macpv1.WatchRootsRequest{})
			return recv(s, err, &macpv1.WatchRootsResponse{})
		},
		"ListExtModes": func(ctx context.Context) error {
			_, err := c.ListExtModes(ctx, &macpv1.ListExtModesRequest{})
			return err
		},
		"RegisterExtMode": func(ctx context.Context) error {
			_, err := c.RegisterExtMode(ctx, &macpv1.RegisterExtModeRequest{})
			return err
		},
		"UnregisterExtMode": func(ctx context.Context) error {
			_, err := c.UnregisterExtMode(ctx, &macpv1.UnregisterExtModeRequest{})
			return err
		},
		"PromoteMode": func(ctx context.Context) error {
			_, err := c.PromoteMode(ctx, &macpv1.PromoteModeRequest{})
			return err
		},
		"WatchSignals": func(ctx context.Context) error {
			s, err := c.WatchSignals(ctx, &macpv1.WatchSignalsRequest{})
			return recv(s, err, &macpv1.WatchSignalsResponse{})
		},
		"ListSessions": func(ctx context.Context) error {
			_, err := c.ListSessions(ctx, &macpv1.ListSessionsRequest{})
			return err
		},
		"WatchSessions": func(ctx context.Context) error {
			s, err := c.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
			return recv(s, err, &macpv1.WatchSessionsResponse{})
		},
		"RegisterPolicy": func(ctx context.Context) error {
			_, err := c.RegisterPolicy(ctx, &macpv1.RegisterPolicyRequest{})
			return err
		},
		"UnregisterPolicy": func(ctx context.Context) error {
			_, err := c.UnregisterPolicy(ctx, &macpv1.UnregisterPolicyRequest{})
			return err
		},
		"GetPolicy": func(ctx context.Context) error {
			_, err := c.GetPolicy(ctx, &macpv1.GetPolicyRequest{})
			return err
		},
		"ListPolicies": func(ctx context.Context) error {
			_, err := c.ListPolicies(ctx, &macpv1.ListPoliciesRequest{})
			return err
		},
		"WatchPolicies": func(ctx context.Context) error {
			s, err := c.WatchPolicies(ctx, &macpv1.WatchPoliciesRequest{})
			return recv(s, err, &macpv1.WatchPoliciesResponse{})
		},
	}
}

// TestRPCCallsCoverService keeps rpcCalls complete: checklist §1 RPC-23
// (22 RPCs).
func TestRPCCallsCoverService(t *testing.T) {
	calls := rpcCalls(nil)
	d := macpv1.MACPRuntimeService_ServiceDesc
	n := 0
	for _, m := range d.Methods {
		n++
		if calls[m.MethodName] == nil {
			t.Errorf("rpcCalls lacks %s", m.MethodName)
		}
	}
	for _, s := range d.Streams {
		n++
		if calls[s.StreamName] == nil {
			t.Errorf("rpcCalls lacks %s", s.StreamName)
		}
	}
	// Checklist RPC-23 counts 22 at 17ca7a1; macp-proto 0.1.3 added
	// SuspendSession and ResumeSession.
	if n != 24 || len(calls) != 24 {
		t.Errorf("service has %d RPCs, rpcCalls %d; want 24 (22 of the April spec + SuspendSession, ResumeSession)", n, len(calls))
	}
}

// observer is an identity that may see every session (for in-process
// inspection through the runtime).
func observer() coord.Identity {
	return coord.Identity{Sender: "observer", Caps: coord.Capabilities{IsObserver: true}}
}

// metadataBearer adds a dev bearer token to ctx.
func metadataBearer(ctx context.Context, agent string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+agent)
}
