package sdk_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/testutil/apptest"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// startApp starts an in-process macpd on 127.0.0.1:0 with dev identities.
func startApp(t *testing.T, mutate ...func(*config.Config)) *app.App {
	t.Helper()
	return apptest.Start(t, mutate...)
}

// dial connects as agent (dev bearer identity; "" = no credentials).
func dial(t *testing.T, addr, agent string, opts ...sdk.Option) *sdk.Client {
	t.Helper()
	opts = append([]sdk.Option{sdk.WithInsecure()}, opts...)
	if agent != "" {
		opts = append(opts, sdk.WithBearer(agent))
	}
	c, err := sdk.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode asserts err is an *sdk.Error with code.
func wantCode(t *testing.T, err error, code sdk.Code) *sdk.Error {
	t.Helper()
	var e *sdk.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *sdk.Error %s, got %T %v", code, err, err)
	}
	if e.Code != code || sdk.CodeOf(err) != code || !errors.Is(err, &sdk.Error{Code: code}) {
		t.Fatalf("want %s, got %v", code, err)
	}
	return e
}

// mustOK(t, what)(ack, err) asserts an accepted ack.
func mustOK(t *testing.T, what string) func(*macpv1.Ack, error) *macpv1.Ack {
	return func(ack *macpv1.Ack, err error) *macpv1.Ack {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !ack.GetOk() {
			t.Fatalf("%s: ack not ok: %v", what, ack)
		}
		return ack
	}
}

func startDecision(t *testing.T, c *sdk.Client, participants ...string) *sdk.DecisionSession {
	t.Helper()
	d := c.Decision("")
	mustOK(t, "start")(d.Start(ctxT(t), "pick", participants, time.Minute))
	return d
}

func TestInitializeListModesManifest(t *testing.T) {
	a := startApp(t)
	c := dial(t, a.Addr(), "") // discovery calls need no credentials
	ctx := ctxT(t)
	init, err := c.Initialize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if init.SelectedProtocolVersion != "1.0" || init.RuntimeInfo.GetName() != "macpd" ||
		!slices.Contains(init.SupportedModes, sdk.DecisionMode) || !init.Capabilities.GetSessions().GetWatchSessions() {
		t.Fatalf("initialize: %v", init)
	}
	modes, err := c.ListModes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(modes, func(m *macpv1.ModeDescriptor) bool { return m.Mode == sdk.DecisionMode })
	if i < 0 || modes[i].ModeVersion != sdk.DecisionModeVersion || !slices.Contains(modes[i].MessageTypes, sdk.TypeVote) {
		t.Fatalf("modes: %v", modes)
	}
	m, err := c.GetManifest(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if m.AgentId != "macpd" || !slices.Contains(m.SupportedModes, sdk.DecisionMode) {
		t.Fatalf("manifest: %v", m)
	}
	// An unknown agent is NOT_FOUND without a MACP code.
	_, err = c.GetManifest(ctx, "nobody")
	if status.Code(err) != codes.NotFound || sdk.CodeOf(err) != "" {
		t.Fatalf("unknown manifest: %v", err)
	}
}

// One complete Decision session (RFC-MACP-0007) through DecisionSession,
// with each agent on its own Client.
func TestDecisionSession(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord, alice, bob := dial(t, a.Addr(), "coord"), dial(t, a.Addr(), "alice"), dial(t, a.Addr(), "bob")

	d := coord.Decision("")
	d.ContextID = "ctx:db-choice"
	ack := mustOK(t, "start")(d.Start(ctx, "choose a database", []string{"alice", "bob"}, time.Minute))
	if ack.SessionId != d.ID || ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("start ack: %v", ack)
	}
	mustOK(t, "propose")(d.Propose(ctx, "p1", "postgres", "boring and solid"))
	da, db := alice.Decision(d.ID), bob.Decision(d.ID)
	mustOK(t, "evaluate")(da.Evaluate(ctx, "p1", "APPROVE", 0.9, "fits"))
	mustOK(t, "object")(db.Object(ctx, "p1", "low", "ops cost"))
	mustOK(t, "vote a")(da.Vote(ctx, "p1", "APPROVE", ""))
	mustOK(t, "vote b")(db.Vote(ctx, "p1", "APPROVE", "ok"))

	// A second vote by the same participant is rejected, and the ack says so.
	ack, err := db.Vote(ctx, "p1", "REJECT", "")
	wantCode(t, err, sdk.CodeInvalidEnvelope)
	if ack == nil || ack.Ok || ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("rejected vote ack: %v", ack)
	}

	commit := &macpv1.CommitmentPayload{Action: "decision.selected", AuthorityScope: "team", Reason: "unanimous", OutcomePositive: true}
	// Only the initiator may commit (RFC-MACP-0007 §2.1).
	_, err = db.Commit(ctx, commit)
	if e := wantCode(t, err, sdk.CodeForbidden); e.SessionID != d.ID || e.MessageID == "" {
		t.Fatalf("forbidden error: %+v", e)
	}
	ack = mustOK(t, "commit")(d.Commit(ctx, commit))
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("commit ack: %v", ack)
	}
	if commit.CommitmentId != "" || commit.ModeVersion != "" {
		t.Fatal("Commit modified its argument")
	}
	_, err = da.Vote(ctx, "p1", "ABSTAIN", "")
	wantCode(t, err, sdk.CodeSessionNotOpen)

	md, err := da.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if md.State != macpv1.SessionState_SESSION_STATE_RESOLVED || md.Initiator != "coord" || md.ContextId != "ctx:db-choice" ||
		md.ModeVersion != sdk.DecisionModeVersion || md.ConfigurationVersion != sdk.DefaultConfigurationVersion ||
		!slices.Equal(md.Participants, []string{"alice", "bob"}) {
		t.Fatalf("metadata: %v", md)
	}
	// Cancelling a resolved session is answered with its state.
	ack = mustOK(t, "cancel resolved")(d.Cancel(ctx, "late"))
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("cancel of resolved: %v", ack)
	}
}

// A DecisionSession that did not Start the session takes the commitment's
// version binding from GetSession.
func TestDecisionCommitFillsBindingFromMetadata(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord := dial(t, a.Addr(), "coord")
	d := coord.Decision("")
	d.ConfigurationVersion = "cfg-7"
	mustOK(t, "start")(d.Start(ctx, "x", []string{"coord", "alice"}, time.Minute))
	mustOK(t, "propose")(d.Propose(ctx, "p1", "x", ""))
	again := coord.Decision(d.ID) // default ConfigurationVersion "v1" would be wrong
	ack := mustOK(t, "commit")(again.Commit(ctx, &macpv1.CommitmentPayload{Action: "decision.rejected", AuthorityScope: "s", Reason: "no"}))
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("ack: %v", ack)
	}
}

func TestSendDuplicateAndBuilders(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	c := dial(t, a.Addr(), "coord")
	sid := sdk.NewSessionID()
	start, err := sdk.NewSessionStart(sid, sdk.DecisionMode, sdk.StartPayload{
		Intent: "i", Participants: []string{"coord"}, TTL: 1500 * time.Microsecond,
		ModeVersion: "1.0.0", ConfigurationVersion: "c",
	})
	if err != nil {
		t.Fatal(err)
	}
	var sp macpv1.SessionStartPayload
	if err := proto.Unmarshal(start.Payload, &sp); err != nil || sp.TtlMs != 2 {
		t.Fatalf("ttl rounds up to whole ms: %v %v", sp.TtlMs, err)
	}
	start, _ = sdk.NewSessionStart(sid, sdk.DecisionMode, sdk.StartPayload{
		Intent: "i", Participants: []string{"coord"}, TTL: time.Minute, ModeVersion: "1.0.0", ConfigurationVersion: "c",
	})
	if start.MacpVersion != "1.0" || start.Sender != "" || start.TimestampUnixMs == 0 || start.MessageId == "" {
		t.Fatalf("builder: %v", start)
	}
	ack := mustOK(t, "start")(c.Send(ctx, start))
	if ack.Duplicate || ack.MessageId != start.MessageId {
		t.Fatalf("first send: %v", ack)
	}
	// Resending the same SessionStart (same message_id) is a duplicate.
	ack = mustOK(t, "resend")(c.Send(ctx, start))
	if !ack.Duplicate {
		t.Fatalf("resend must be a duplicate: %v", ack)
	}
	// A new SessionStart for the same session is SESSION_ALREADY_EXISTS.
	start2 := proto.CloneOf(start)
	start2.MessageId = sdk.NewMessageID()
	_, err = c.Send(ctx, start2)
	wantCode(t, err, sdk.CodeSessionAlreadyExists)

	p, _ := sdk.NewProposal(sid, &decisionv1.ProposalPayload{ProposalId: "p1", Option: "x"})
	mustOK(t, "proposal")(c.Send(ctx, p))
	ack = mustOK(t, "proposal again")(c.Send(ctx, p))
	if !ack.Duplicate {
		t.Fatalf("duplicate proposal: %v", ack)
	}
	for _, build := range []func() (*macpv1.Envelope, error){
		func() (*macpv1.Envelope, error) {
			return sdk.NewEvaluation(sid, &decisionv1.EvaluationPayload{ProposalId: "p1", Recommendation: "REVIEW", Confidence: 0.5})
		},
		func() (*macpv1.Envelope, error) {
			return sdk.NewObjection(sid, &decisionv1.ObjectionPayload{ProposalId: "p1", Severity: "high", Reason: "r"})
		},
		func() (*macpv1.Envelope, error) {
			return sdk.NewVote(sid, &decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE"})
		},
		func() (*macpv1.Envelope, error) {
			return sdk.NewCommitment(sid, sdk.DecisionMode, &macpv1.CommitmentPayload{CommitmentId: "c1", Action: "decision.selected",
				AuthorityScope: "s", Reason: "r", ModeVersion: "1.0.0", ConfigurationVersion: "c", OutcomePositive: true})
		},
	} {
		env, err := build()
		if err != nil {
			t.Fatal(err)
		}
		mustOK(t, env.MessageType)(c.Send(ctx, env))
	}
	md, err := c.GetSession(ctx, sid)
	if err != nil || md.State != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("get: %v %v", md, err)
	}

	// Send fills macp_version, message_id and timestamp without touching
	// its argument.
	bare := &macpv1.Envelope{Mode: sdk.DecisionMode, MessageType: "Vote", SessionId: sid}
	_, err = c.Send(ctx, bare)
	wantCode(t, err, sdk.CodeSessionNotOpen)
	if bare.MacpVersion != "" || bare.MessageId != "" {
		t.Fatal("Send modified its argument")
	}
	if _, err := c.Send(ctx, nil); err == nil {
		t.Fatal("nil envelope accepted")
	}
}

func TestTypedErrors(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord, eve, anon := dial(t, a.Addr(), "coord"), dial(t, a.Addr(), "eve"), dial(t, a.Addr(), "")
	d := startDecision(t, coord, "alice")

	// Non-Send RPCs: gRPC status with a MACPError detail.
	_, err := coord.GetSession(ctx, sdk.NewSessionID())
	e := wantCode(t, err, sdk.CodeSessionNotFound)
	if status.Code(err) != codes.NotFound || e.Unwrap() == nil || e.Message == "" {
		t.Fatalf("SESSION_NOT_FOUND as status: %v (%v)", err, status.Code(err))
	}
	_, err = eve.GetSession(ctx, d.ID)
	wantCode(t, err, sdk.CodeForbidden)
	_, err = eve.CancelSession(ctx, d.ID, "mine now")
	wantCode(t, err, sdk.CodeForbidden)
	_, err = anon.ListSessions(ctx)
	wantCode(t, err, sdk.CodeUnauthenticated)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unauthenticated status: %v", err)
	}

	// Send: rejections come in the ack, typed the same way.
	env, _ := sdk.NewVote(sdk.NewSessionID(), &decisionv1.VotePayload{ProposalId: "p", Vote: "APPROVE"})
	ack, err := coord.Send(ctx, env)
	if e := wantCode(t, err, sdk.CodeSessionNotFound); e.Unwrap() != nil || ack == nil || ack.Ok {
		t.Fatalf("ack rejection: %v %v", ack, err)
	}
	env, _ = sdk.NewProposal(d.ID, &decisionv1.ProposalPayload{ProposalId: "p", Option: "o"})
	_, err = eve.Send(ctx, env)
	wantCode(t, err, sdk.CodeForbidden)
	env.MacpVersion = "9.9"
	_, err = coord.Send(ctx, env)
	wantCode(t, err, sdk.CodeUnsupportedProtocolVersion)
	env, _ = sdk.NewSessionStart("Not-A-Session-Id", sdk.DecisionMode, sdk.StartPayload{Participants: []string{"a"}, TTL: time.Second, ModeVersion: "1.0.0", ConfigurationVersion: "c"})
	_, err = coord.Send(ctx, env)
	wantCode(t, err, sdk.CodeInvalidSessionID)
	env, _ = sdk.NewSessionStart(sdk.NewSessionID(), "macp.mode.nope.v1", sdk.StartPayload{Participants: []string{"a"}, TTL: time.Second, ModeVersion: "1.0.0", ConfigurationVersion: "c"})
	_, err = coord.Send(ctx, env)
	wantCode(t, err, sdk.CodeModeNotSupported)
	// Send without credentials fails as a status (UNAUTHENTICATED).
	_, err = anon.Send(ctx, env)
	wantCode(t, err, sdk.CodeUnauthenticated)

	if sdk.CodeOf(nil) != "" || sdk.CodeOf(errors.New("x")) != "" {
		t.Fatal("CodeOf of a non-MACP error")
	}
	pe := &sdk.Error{Code: sdk.CodePolicyDenied, Message: "m", Details: []byte(`{"reasons":["quorum not met"]}`)}
	if !slices.Equal(pe.Reasons(), []string{"quorum not met"}) || pe.Error() != "POLICY_DENIED: m" {
		t.Fatalf("reasons: %v %q", pe.Reasons(), pe.Error())
	}
}

func TestListAndCancel(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord, alice := dial(t, a.Addr(), "coord"), dial(t, a.Addr(), "alice")
	d1 := startDecision(t, coord, "alice")
	d2 := startDecision(t, coord, "bob") // alice may not see d2
	ack := mustOK(t, "cancel")(coord.CancelSession(ctx, d2.ID, "changed my mind"))
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_EXPIRED || ack.SessionId != d2.ID || ack.MessageId == "" {
		t.Fatalf("cancel ack: %v", ack)
	}
	all, err := coord.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]macpv1.SessionState{}
	for _, md := range all {
		states[md.SessionId] = md.State
	}
	if len(all) != 2 || states[d1.ID] != macpv1.SessionState_SESSION_STATE_OPEN || states[d2.ID] != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("list: %v", all)
	}
	mine, err := alice.ListSessions(ctx)
	if err != nil || len(mine) != 1 || mine[0].SessionId != d1.ID {
		t.Fatalf("alice's list: %v %v", mine, err)
	}
	_, err = coord.CancelSession(ctx, sdk.NewSessionID(), "")
	wantCode(t, err, sdk.CodeSessionNotFound)
}

func TestWatchSessions(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord := dial(t, a.Addr(), "coord")
	d1 := startDecision(t, coord, "alice")

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan *macpv1.SessionLifecycleEvent, 16)
	done := make(chan error, 1)
	go func() {
		defer close(events)
		for ev, err := range coord.WatchSessions(wctx) {
			if err != nil {
				done <- err
				return
			}
			events <- ev
		}
		done <- nil
	}()
	next := func() *macpv1.SessionLifecycleEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no lifecycle event")
			return nil
		}
	}
	// Initial sync: the OPEN session is reported as CREATED.
	if ev := next(); ev.EventType != macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED || ev.Session.SessionId != d1.ID {
		t.Fatalf("initial sync: %v", ev)
	}
	mustOK(t, "cancel")(d1.Cancel(ctx, "bye"))
	if ev := next(); ev.EventType != macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED || ev.Session.SessionId != d1.ID {
		t.Fatalf("expired: %v", ev)
	}
	d2 := startDecision(t, coord, "alice")
	if ev := next(); ev.EventType != macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED || ev.Session.SessionId != d2.ID {
		t.Fatalf("created: %v", ev)
	}
	mustOK(t, "propose")(d2.Propose(ctx, "p", "o", ""))
	mustOK(t, "commit")(d2.Commit(ctx, &macpv1.CommitmentPayload{Action: "decision.selected", AuthorityScope: "s", Reason: "r", OutcomePositive: true}))
	if ev := next(); ev.EventType != macpv1.SessionLifecycleEvent_EVENT_TYPE_RESOLVED || ev.Session.State != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("resolved: %v", ev)
	}
	// Ending ctx ends the iteration without an error.
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end")
	}

	// A watch the runtime refuses yields its error once.
	anon := dial(t, a.Addr(), "")
	n := 0
	for ev, err := range anon.WatchSessions(ctx) {
		n++
		if ev != nil || sdk.CodeOf(err) != sdk.CodeUnauthenticated {
			t.Fatalf("anonymous watch: %v %v", ev, err)
		}
	}
	if n != 1 {
		t.Fatalf("anonymous watch yielded %d times", n)
	}
}

func TestWatchSignals(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	obs, alice := dial(t, a.Addr(), "obs"), dial(t, a.Addr(), "alice")
	got := make(chan *macpv1.Envelope, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for env, err := range obs.WatchSignals(wctx) {
			if err == nil {
				got <- env
			}
			return // the first signal (or error) is enough
		}
	}()
	sig, err := sdk.NewSignal(&macpv1.SignalPayload{SignalType: "heartbeat", Confidence: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if sig.Mode != "" || sig.SessionId != "" {
		t.Fatalf("signal builder: %v", sig)
	}
	// Signals have no backlog: resend (new message ids) until the watcher,
	// whose stream opens asynchronously, sees one.
	deadline := time.After(5 * time.Second)
	for {
		s := proto.CloneOf(sig)
		s.MessageId = sdk.NewMessageID()
		mustOK(t, "signal")(alice.Send(ctx, s))
		select {
		case env := <-got:
			var p macpv1.SignalPayload
			if err := proto.Unmarshal(env.Payload, &p); err != nil || p.SignalType != "heartbeat" || env.Sender != "alice" {
				t.Fatalf("signal: %v %v", env, err)
			}
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no signal")
		}
	}
}

// unavailable fails the first n calls with Unavailable; if after, the
// failure happens after the call reached the runtime (a lost response).
func unavailable(n int32, after bool, calls *atomic.Int32) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		i := calls.Add(1)
		if i > n {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if after {
			if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
				return err
			}
		}
		return status.Error(codes.Unavailable, "injected")
	}
}

// WithRetry resends the same envelope: a retry after a lost response is a
// duplicate, not a second action.
func TestRetrySend(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord := dial(t, a.Addr(), "coord")
	d := startDecision(t, coord, "coord")
	var calls atomic.Int32
	flaky := dial(t, a.Addr(), "coord", sdk.WithRetry(3), sdk.WithDialOptions(grpc.WithUnaryInterceptor(unavailable(2, true, &calls))))
	env, _ := sdk.NewProposal(d.ID, &decisionv1.ProposalPayload{ProposalId: "p1", Option: "x"})
	ack := mustOK(t, "retried proposal")(flaky.Send(ctx, env))
	if !ack.Duplicate || calls.Load() != 3 {
		t.Fatalf("retried send: %v after %d calls", ack, calls.Load())
	}

	// Failures before the runtime is reached: the retry is the first accept.
	calls.Store(0)
	early := dial(t, a.Addr(), "coord", sdk.WithRetry(3), sdk.WithDialOptions(grpc.WithUnaryInterceptor(unavailable(2, false, &calls))))
	env, _ = sdk.NewProposal(d.ID, &decisionv1.ProposalPayload{ProposalId: "p2", Option: "y"})
	ack = mustOK(t, "proposal")(early.Send(ctx, env))
	if ack.Duplicate || calls.Load() != 3 {
		t.Fatalf("send: %v after %d calls", ack, calls.Load())
	}

	// Retries are bounded, and the last transport error is returned as is.
	calls.Store(0)
	down := dial(t, a.Addr(), "coord", sdk.WithRetry(1), sdk.WithDialOptions(grpc.WithUnaryInterceptor(unavailable(100, false, &calls))))
	_, err := down.GetSession(ctx, d.ID)
	if status.Code(err) != codes.Unavailable || sdk.CodeOf(err) != "" || calls.Load() != 2 {
		t.Fatalf("bounded retry: %v after %d calls", err, calls.Load())
	}
	// Rejections are not retried.
	calls.Store(0)
	counted := dial(t, a.Addr(), "eve", sdk.WithRetry(3), sdk.WithDialOptions(grpc.WithUnaryInterceptor(unavailable(0, false, &calls))))
	env, _ = sdk.NewProposal(d.ID, &decisionv1.ProposalPayload{ProposalId: "p3", Option: "z"})
	_, err = counted.Send(ctx, env)
	wantCode(t, err, sdk.CodeForbidden)
	if calls.Load() != 1 {
		t.Fatalf("a rejection was retried: %d calls", calls.Load())
	}
}

// WithRetry rides out a runtime that is not up yet.
func TestRetryUntilRuntimeIsUp(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c := dial(t, addr, "coord", sdk.WithRetry(10))
	started := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		cfg := config.Default()
		cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
		cfg.BindAddr, cfg.AllowInsecure = addr, true
		a, err := app.New(cfg, nil)
		if err == nil {
			if err = a.Start(context.Background()); err == nil {
				t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			}
		}
		started <- err
	}()
	init, err := c.Initialize(ctxT(t))
	if serr := <-started; serr != nil {
		t.Fatalf("starting the runtime late: %v", serr)
	}
	if err != nil || init.SelectedProtocolVersion != "1.0" {
		t.Fatalf("initialize through retries: %v %v", init, err)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and returns the
// file paths and a pool trusting it.
func writeCert(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "macpd-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

func TestTLS(t *testing.T) {
	certPath, keyPath, pool := writeCert(t)
	ctx := ctxT(t)
	for _, devIDs := range []bool{false, true} {
		a := startApp(t, func(cfg *config.Config) {
			cfg.TLSCertPath, cfg.TLSKeyPath, cfg.AllowInsecure = certPath, keyPath, devIDs
			// A runtime without any authenticator refuses to start: verify
			// client certificates when sent (this client sends none), so
			// bearers are left to dev identities or refused.
			cfg.Auth.TLSClientCAPath, cfg.Auth.TLSClientAuth = certPath, "request"
		})
		c, err := sdk.Dial(ctx, a.Addr(), sdk.WithTLSConfig(&tls.Config{RootCAs: pool}), sdk.WithBearer("coord"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Initialize(ctx); err != nil {
			t.Fatalf("initialize over TLS: %v", err)
		}
		_, err = c.ListSessions(ctx)
		if devIDs && err != nil {
			t.Fatalf("dev bearer over TLS: %v", err)
		}
		if !devIDs {
			// Without dev identities, every bearer is unknown.
			wantCode(t, err, sdk.CodeUnauthenticated)
		}
		// The default (system roots) does not trust the test certificate.
		sys, err := sdk.Dial(ctx, a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Close()
		if _, err := sys.Initialize(ctx); status.Code(err) != codes.Unavailable {
			t.Fatalf("untrusted certificate: %v", err)
		}
	}
}

func TestIDs(t *testing.T) {
	v4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := sdk.NewSessionID(), sdk.NewMessageID()
	if !v4.MatchString(a) || !v4.MatchString(b) || a == b || a == sdk.NewSessionID() {
		t.Fatalf("ids: %q %q", a, b)
	}
	if _, err := sdk.Dial(canceled(), "127.0.0.1:1"); err == nil {
		t.Fatal("Dial with a done ctx")
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
