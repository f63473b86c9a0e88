package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/conformance"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/testutil"
	"github.com/macpd/macpd/internal/tlsconf/tlstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// The authorization matrix of docs/security.md, one test per cell, over
// real gRPC with TLS on and static bearer tokens (no dev identities).

// Senders of the matrix. Capabilities are in secTokens.
const (
	secInitiator    = "agent://initiator"
	secParticipant  = "agent://participant"
	secParticipant2 = "agent://participant2"
	secOutsider     = "agent://outsider"
	secObserver     = "agent://observer"
	secNoStart      = "agent://nostart"
	secDecisionOnly = "agent://decision-only"
	secCapped       = "agent://capped"
	secZeroOpen     = "agent://zero-open"
	secAdmin        = "agent://admin"
)

// secTokens is the token list of the matrix: one entry per sender, with
// the capabilities the matrix needs.
func secTokens(extraSenders ...string) []map[string]any {
	toks := []map[string]any{
		{"sender": secInitiator},
		{"sender": secParticipant},
		{"sender": secParticipant2},
		{"sender": secOutsider},
		{"sender": secObserver, "is_observer": true, "can_start_sessions": false},
		{"sender": secNoStart, "can_start_sessions": false},
		{"sender": secDecisionOnly, "allowed_modes": []string{decisionMode}},
		{"sender": secCapped, "max_open_sessions": 1},
		{"sender": secZeroOpen, "max_open_sessions": 0},
		{"sender": secAdmin, "can_manage_mode_registry": true},
	}
	for _, s := range extraSenders {
		toks = append(toks, map[string]any{"sender": s})
	}
	return toks
}

// secToken is the bearer token of sender in every secure test runtime.
func secToken(sender string) string {
	return "tok-" + strings.NewReplacer(":", "-", "/", "-").Replace(sender) + "-5c1e0d9b7a"
}

// secureEnv is macpd serving TLS with static tokens, and a client that
// verifies its certificate.
type secureEnv struct {
	app  *app.App
	rt   *runtime.Runtime
	addr string
	tls  *tls.Config
	conn *grpc.ClientConn
	c    macpv1.MACPRuntimeServiceClient
}

// startSecure starts macpd with TLS (a tlstest CA) and the static tokens
// toks (each gets its token from secToken); mutate adjusts the
// configuration (limits).
func startSecure(t *testing.T, toks []map[string]any, mutate func(*config.Config)) *secureEnv {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "macpd test CA")
	certPath, keyPath := ca.Server(t, "macpd").Write(t, dir, "server")
	for _, tok := range toks {
		tok["token"] = secToken(tok["sender"].(string))
	}
	list, err := json.Marshal(toks)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.BindAddr = "127.0.0.1:0"
	cfg.TLSCertPath, cfg.TLSKeyPath = certPath, keyPath
	cfg.Auth.TokensJSON = string(list)
	if mutate != nil {
		mutate(&cfg)
	}
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
	e := &secureEnv{app: a, rt: a.Runtime(), addr: a.Addr(), tls: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}
	e.conn = e.dial(t)
	e.c = macpv1.NewMACPRuntimeServiceClient(e.conn)
	return e
}

// dial opens another client connection.
func (e *secureEnv) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(e.tls.Clone())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// as is a call context authenticated as sender ("" = no credentials),
// bounded to 15 s.
func (e *secureEnv) as(t *testing.T, sender string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	if sender == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secToken(sender))
}

func (e *secureEnv) send(t *testing.T, sender string, env *macpv1.Envelope) *macpv1.Ack {
	t.Helper()
	r, err := e.c.Send(e.as(t, sender), &macpv1.SendRequest{Envelope: env})
	if err != nil {
		t.Fatalf("Send %s as %s: %v", env.GetMessageType(), sender, err)
	}
	return r.Ack
}

func (e *secureEnv) accept(t *testing.T, sender string, env *macpv1.Envelope) *macpv1.Ack {
	t.Helper()
	ack := e.send(t, sender, env)
	if !ack.Ok || ack.Duplicate {
		t.Fatalf("%s's %s %s: want accepted, got %v", sender, env.MessageType, env.MessageId, ack)
	}
	return ack
}

// refuse asserts a rejection with code and that the Ack says nothing
// about the session (no state, not a duplicate): what outsiders get.
func (e *secureEnv) refuse(t *testing.T, sender string, env *macpv1.Envelope, code string) *macpv1.Ack {
	t.Helper()
	ack := e.refuseMember(t, sender, env, code)
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_UNSPECIFIED {
		t.Fatalf("%s's refused %s reveals the session state: %v", sender, env.MessageType, ack)
	}
	return ack
}

// refuseMember asserts a rejection with code (members may see the state).
func (e *secureEnv) refuseMember(t *testing.T, sender string, env *macpv1.Envelope, code string) *macpv1.Ack {
	t.Helper()
	ack := e.send(t, sender, env)
	if ack.Ok || ack.Duplicate || ack.GetError().GetCode() != code {
		t.Fatalf("%s's %s %s: want %s, got %v", sender, env.MessageType, env.MessageId, code, ack)
	}
	return ack
}

// start starts an OPEN Decision session.
func (e *secureEnv) start(t *testing.T, initiator string, participants ...string) string {
	t.Helper()
	sid := uuid.NewString()
	e.accept(t, initiator, envelope(sid, "SessionStart", "start", startPayload(t, participants...)))
	return sid
}

// Cell: unauthenticated callers reach only the discovery RPCs the
// official SDKs call without credentials; every other RPC, and every RPC
// with credentials that are not valid, is UNAUTHENTICATED.
func TestAuthzUnauthenticatedOnlyDiscovery(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	public := []string{"Initialize", "ListModes", "GetManifest", "ListRoots", "ListExtModes", "WatchModeRegistry", "WatchRoots"}
	for name, call := range rpcCalls(e.c) {
		t.Run(name, func(t *testing.T) {
			err := call(e.as(t, ""))
			if slices.Contains(public, name) {
				if err != nil {
					t.Fatalf("anonymous %s: %v", name, err)
				}
			} else {
				wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
			}
			bad := metadata.AppendToOutgoingContext(e.as(t, ""), "authorization", "Bearer not-a-configured-token-0000")
			wantStatus(t, call(bad), codes.Unauthenticated, "UNAUTHENTICATED")
		})
	}
}

// Cells: who may start sessions, and in which modes (can_start_sessions,
// allowed_modes, max_open_sessions). A refused start creates nothing.
func TestAuthzStartSession(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	startEnv := func(mode string) *macpv1.Envelope {
		env := envelope(uuid.NewString(), "SessionStart", "start", startPayload(t, secParticipant))
		env.Mode = mode
		return env
	}
	gone := func(t *testing.T, env *macpv1.Envelope) {
		t.Helper()
		if _, err := e.rt.GetSession(context.Background(), observer(), env.SessionId); err == nil {
			t.Fatalf("refused SessionStart created session %s", env.SessionId)
		}
	}
	t.Run("default identity may start any mode", func(t *testing.T) {
		e.accept(t, secInitiator, startEnv(decisionMode))
		env := envelope(uuid.NewString(), "SessionStart", "start", mustMarshal(t, &macpv1.SessionStartPayload{
			Intent: "t", Participants: []string{secInitiator, secParticipant}, ModeVersion: "1.0.0", ConfigurationVersion: "c", TtlMs: 60000}))
		env.Mode = "macp.mode.task.v1"
		e.accept(t, secInitiator, env)
	})
	t.Run("anonymous", func(t *testing.T) {
		env := startEnv(decisionMode)
		_, err := e.c.Send(e.as(t, ""), &macpv1.SendRequest{Envelope: env})
		wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
		gone(t, env)
	})
	for _, who := range []string{secNoStart, secObserver, secZeroOpen} {
		t.Run(who+" may not start sessions", func(t *testing.T) {
			env := startEnv(decisionMode)
			e.refuse(t, who, env, "FORBIDDEN")
			gone(t, env)
		})
	}
	t.Run("allowed_modes", func(t *testing.T) {
		e.accept(t, secDecisionOnly, startEnv(decisionMode))
		env := startEnv("macp.mode.proposal.v1")
		e.refuse(t, secDecisionOnly, env, "FORBIDDEN")
		gone(t, env)
	})
	t.Run("max_open_sessions", func(t *testing.T) {
		first := startEnv(decisionMode)
		e.accept(t, secCapped, first)
		second := startEnv(decisionMode)
		e.refuse(t, secCapped, second, "RATE_LIMITED")
		gone(t, second)
		if _, err := e.c.CancelSession(e.as(t, secCapped), &macpv1.CancelSessionRequest{SessionId: first.SessionId}); err != nil {
			t.Fatal(err)
		}
		e.accept(t, secCapped, second) // the slot is free again
	})
}

// Cells: sending each mode's messages. For every mode, walking its spec
// happy path: before each accepted message, the same envelope (same
// message id) from an outsider and from an observer is FORBIDDEN and
// changes nothing (the real sender's copy is then accepted, not a
// duplicate); before the Commitment, a declared participant without
// commitment authority is FORBIDDEN too. The initiator's and the
// participants' own messages are accepted as the mode's rules say.
func TestAuthzSendPerMode(t *testing.T) {
	fixtures, err := conformance.LoadDirs(testutil.ConformanceDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var senders []string
	var happy []*conformance.Fixture
	for _, f := range fixtures {
		if !strings.HasSuffix(f.Name, "_happy_path") {
			continue
		}
		happy = append(happy, f)
		for _, s := range append([]string{f.Initiator}, f.Participants...) {
			if !slices.Contains(senders, s) {
				senders = append(senders, s)
			}
		}
	}
	if len(happy) < 6 {
		t.Fatalf("found %d happy-path fixtures, want one per mode (6)", len(happy))
	}
	e := startSecure(t, secTokens(senders...), nil)
	for _, f := range happy {
		t.Run(f.Mode, func(t *testing.T) {
			sid := uuid.NewString()
			start, err := f.StartPayload()
			if err != nil {
				t.Fatal(err)
			}
			env := func(typ, id string, payload []byte) *macpv1.Envelope {
				return &macpv1.Envelope{MacpVersion: "1.0", Mode: f.Mode, MessageType: typ, MessageId: id, SessionId: sid,
					TimestampUnixMs: time.Now().UnixMilli(), Payload: payload}
			}
			e.accept(t, f.Initiator, env("SessionStart", "m0", start))
			var member string // a declared participant that is not the initiator
			for _, p := range f.Participants {
				if p != f.Initiator {
					member = p
					break
				}
			}
			for i, m := range f.Messages {
				payload, err := conformance.EncodePayload(m.PayloadType, m.Payload)
				if err != nil {
					t.Fatal(err)
				}
				id := m.MessageID
				if id == "" {
					id = "m" + string(rune('a'+i))
				}
				msg := env(m.MessageType, id, payload)
				e.refuse(t, secOutsider, proto.Clone(msg).(*macpv1.Envelope), "FORBIDDEN")
				e.refuse(t, secObserver, proto.Clone(msg).(*macpv1.Envelope), "FORBIDDEN")
				if m.MessageType == "Commitment" && member != m.Sender {
					e.refuseMember(t, member, proto.Clone(msg).(*macpv1.Envelope), "FORBIDDEN")
				}
				ack := e.accept(t, m.Sender, msg)
				if m.MessageType == "Commitment" && ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
					t.Fatalf("commitment did not resolve: %v", ack)
				}
			}
			// After the session ended an outsider still gets FORBIDDEN
			// (not SESSION_NOT_OPEN: the state is not revealed).
			e.refuse(t, secOutsider, env(f.Messages[0].MessageType, "late", nil), "FORBIDDEN")
		})
	}
}

// Cells: CancelSession is the initiator's; participants, observers and
// outsiders are FORBIDDEN; unknown ids SESSION_NOT_FOUND; anonymous
// UNAUTHENTICATED. A refused cancel changes nothing.
func TestAuthzCancel(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	sid := e.start(t, secInitiator, secParticipant)
	cancel := func(who, id string) error {
		_, err := e.c.CancelSession(e.as(t, who), &macpv1.CancelSessionRequest{SessionId: id, Reason: "r"})
		return err
	}
	for _, who := range []string{secParticipant, secObserver, secOutsider} {
		wantStatus(t, cancel(who, sid), codes.PermissionDenied, "FORBIDDEN")
	}
	wantStatus(t, cancel("", sid), codes.Unauthenticated, "UNAUTHENTICATED")
	wantStatus(t, cancel(secOutsider, uuid.NewString()), codes.NotFound, "SESSION_NOT_FOUND")
	md, err := e.c.GetSession(e.as(t, secInitiator), &macpv1.GetSessionRequest{SessionId: sid})
	if err != nil || md.Metadata.State != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("refused cancels changed the session: %v %v", md, err)
	}
	if err := cancel(secInitiator, sid); err != nil {
		t.Fatal(err)
	}
	md, err = e.c.GetSession(e.as(t, secInitiator), &macpv1.GetSessionRequest{SessionId: sid})
	if err != nil || md.Metadata.State != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("initiator's cancel: %v %v", md, err)
	}
}

// Cells: GetSession and subscribing (StreamSession subscribe_session_id)
// are for the initiator, declared participants and observers; others are
// FORBIDDEN without any metadata; unknown ids SESSION_NOT_FOUND; anonymous
// UNAUTHENTICATED.
func TestAuthzReadSession(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	sid := e.start(t, secInitiator, secParticipant)
	for _, who := range []string{secInitiator, secParticipant, secObserver} {
		r, err := e.c.GetSession(e.as(t, who), &macpv1.GetSessionRequest{SessionId: sid})
		if err != nil || r.Metadata.SessionId != sid || r.Metadata.Initiator != secInitiator {
			t.Fatalf("%s GetSession: %v %v", who, r, err)
		}
		s := e.subscribeStream(t, who, sid)
		resp, err := s.Recv()
		if err != nil || resp.GetEnvelope().GetMessageType() != "SessionStart" {
			t.Fatalf("%s subscribe: %v %v", who, resp, err)
		}
	}
	for _, who := range []string{secOutsider, secParticipant2, secNoStart} {
		r, err := e.c.GetSession(e.as(t, who), &macpv1.GetSessionRequest{SessionId: sid})
		wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
		if r != nil {
			t.Fatalf("forbidden GetSession returned %v", r)
		}
		noLeak(t, err, who, secInitiator, secParticipant, decisionMode, "OPEN")
		_, err = e.subscribeStream(t, who, sid).Recv()
		wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
		noLeak(t, err, who, secInitiator, secParticipant, decisionMode, "OPEN")
	}
	_, err := e.c.GetSession(e.as(t, ""), &macpv1.GetSessionRequest{SessionId: sid})
	wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	unknown := uuid.NewString()
	_, err = e.c.GetSession(e.as(t, secOutsider), &macpv1.GetSessionRequest{SessionId: unknown})
	wantStatus(t, err, codes.NotFound, "SESSION_NOT_FOUND")
	_, err = e.subscribeStream(t, secOutsider, unknown).Recv()
	wantStatus(t, err, codes.NotFound, "SESSION_NOT_FOUND")
}

// subscribeStream opens a StreamSession as who and subscribes to sid.
func (e *secureEnv) subscribeStream(t *testing.T, who, sid string) grpc.BidiStreamingClient[macpv1.StreamSessionRequest, macpv1.StreamSessionResponse] {
	t.Helper()
	s, err := e.c.StreamSession(e.as(t, who))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sid}); err != nil {
		t.Fatal(err)
	}
	return s
}

// noLeak fails if an error's text names any of secrets (the caller's own
// id, which may contain a secret as a prefix, is left out of the check).
func noLeak(t *testing.T, err error, caller string, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	text := strings.ReplaceAll(err.Error(), caller, "<caller>")
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Fatalf("error %q reveals %q", err, s)
		}
	}
}

// Cells: ListSessions and WatchSessions show a caller the sessions it
// initiated or is a declared participant of; observers see all; others
// see nothing.
func TestAuthzListAndWatchSessions(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	watchers := map[string]<-chan recvResult[*macpv1.WatchSessionsResponse]{}
	viewers := []string{secInitiator, secParticipant, secParticipant2, secDecisionOnly, secObserver, secOutsider}
	for _, who := range viewers {
		w, err := e.c.WatchSessions(e.as(t, who), &macpv1.WatchSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Header(); err != nil { // subscribed
			t.Fatal(err)
		}
		watchers[who] = recvAsync(w)
	}
	s1 := e.start(t, secInitiator, secParticipant)
	s2 := e.start(t, secDecisionOnly, secParticipant2)
	want := map[string][]string{
		secInitiator:    {s1},
		secParticipant:  {s1},
		secParticipant2: {s2},
		secDecisionOnly: {s2},
		secObserver:     {s1, s2},
		secOutsider:     nil,
	}
	for _, who := range viewers {
		r, err := e.c.ListSessions(e.as(t, who), &macpv1.ListSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, md := range r.Sessions {
			got = append(got, md.SessionId)
		}
		if !sameSet(got, want[who]) {
			t.Errorf("%s ListSessions %v, want %v", who, got, want[who])
		}
		var events []string
		for range want[who] {
			ev := next(t, watchers[who]).Event
			events = append(events, ev.Session.SessionId)
		}
		if !sameSet(events, want[who]) {
			t.Errorf("%s WatchSessions %v, want %v", who, events, want[who])
		}
	}
	for _, who := range viewers {
		nothing(t, watchers[who], 50*time.Millisecond)
	}
	// Initial sync of a new watcher: the same rule.
	w, err := e.c.WatchSessions(e.as(t, secOutsider), &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	nothing(t, recvAsync(w), 100*time.Millisecond)
	_, err = e.c.ListSessions(e.as(t, ""), &macpv1.ListSessionsRequest{})
	wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Cells: WatchSignals. A Signal related to a session (correlation_session_id)
// may be sent by that session's members only and is delivered to its
// members and observers only; an unrelated Signal goes to every
// authenticated subscriber; anonymous subscribers are UNAUTHENTICATED.
func TestAuthzWatchSignals(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	sid := e.start(t, secInitiator, secParticipant)
	viewers := []string{secInitiator, secParticipant, secObserver, secOutsider}
	watchers := map[string]<-chan recvResult[*macpv1.WatchSignalsResponse]{}
	for _, who := range viewers {
		w, err := e.c.WatchSignals(e.as(t, who), &macpv1.WatchSignalsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		watchers[who] = recvAsync(w)
	}
	eventually(t, "signal watchers", func() bool { return e.rt.Signals.Len() == len(viewers) })
	signal := func(id, correlation string) *macpv1.Envelope {
		return &macpv1.Envelope{MacpVersion: "1.0", MessageType: "Signal", MessageId: id, TimestampUnixMs: time.Now().UnixMilli(),
			Payload: mustMarshal(t, &macpv1.SignalPayload{SignalType: "status", CorrelationSessionId: correlation})}
	}
	e.refuse(t, secOutsider, signal("s-out", sid), "FORBIDDEN")
	e.accept(t, secParticipant, signal("s-related", sid))
	e.accept(t, secOutsider, signal("s-open", ""))
	for _, who := range viewers {
		first := next(t, watchers[who]).Envelope.MessageId
		switch who {
		case secOutsider:
			if first != "s-open" {
				t.Errorf("outsider received %s first, want only s-open", first)
			}
		default:
			second := next(t, watchers[who]).Envelope.MessageId
			if first != "s-related" || second != "s-open" {
				t.Errorf("%s received %s, %s; want s-related, s-open", who, first, second)
			}
		}
		nothing(t, watchers[who], 20*time.Millisecond)
	}
	w, err := e.c.WatchSignals(e.as(t, ""), &macpv1.WatchSignalsRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
}

// Cells: managing the mode registry needs can_manage_mode_registry
// (ok=false, FORBIDDEN otherwise; the registry is unchanged); reading it
// is discovery. The policy registry: see below.
func TestAuthzRegistries(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	for _, who := range []string{secInitiator, secObserver, secOutsider} {
		r, err := e.c.RegisterExtMode(e.as(t, who), &macpv1.RegisterExtModeRequest{ModeDescriptor: extDescriptor()})
		if err != nil || r.Ok || !strings.HasPrefix(r.Error, "FORBIDDEN") {
			t.Fatalf("%s RegisterExtMode: %v %v", who, r, err)
		}
	}
	_, err := e.c.RegisterExtMode(e.as(t, ""), &macpv1.RegisterExtModeRequest{ModeDescriptor: extDescriptor()})
	wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	ext, err := e.c.ListExtModes(e.as(t, ""), &macpv1.ListExtModesRequest{})
	if err != nil || slices.Contains(modeIDs(ext.Modes), extMode) {
		t.Fatalf("refused registrations changed the registry: %v %v", ext, err)
	}
	if r, err := e.c.RegisterExtMode(e.as(t, secAdmin), &macpv1.RegisterExtModeRequest{ModeDescriptor: extDescriptor()}); err != nil || !r.Ok {
		t.Fatalf("admin RegisterExtMode: %v %v", r, err)
	}
	for _, who := range []string{secInitiator, secOutsider} {
		p, err := e.c.PromoteMode(e.as(t, who), &macpv1.PromoteModeRequest{Mode: extMode})
		if err != nil || p.Ok || !strings.HasPrefix(p.Error, "FORBIDDEN") {
			t.Fatalf("%s PromoteMode: %v %v", who, p, err)
		}
		u, err := e.c.UnregisterExtMode(e.as(t, who), &macpv1.UnregisterExtModeRequest{Mode: extMode})
		if err != nil || u.Ok || !strings.HasPrefix(u.Error, "FORBIDDEN") {
			t.Fatalf("%s UnregisterExtMode: %v %v", who, u, err)
		}
	}
	if u, err := e.c.UnregisterExtMode(e.as(t, secAdmin), &macpv1.UnregisterExtModeRequest{Mode: extMode}); err != nil || !u.Ok {
		t.Fatalf("admin UnregisterExtMode: %v %v", u, err)
	}

	// The policy registry: every RPC needs credentials; mutations need
	// can_manage_mode_registry (the spec names no policy capability;
	// checklist EXT-5, SEC-10); reading it is open to any authenticated
	// identity.
	calls := rpcCalls(e.c)
	for _, name := range []string{"RegisterPolicy", "UnregisterPolicy", "GetPolicy", "ListPolicies", "WatchPolicies"} {
		wantStatus(t, calls[name](e.as(t, "")), codes.Unauthenticated, "UNAUTHENTICATED")
	}
	const pid = "policy.authz.majority"
	for _, who := range []string{secInitiator, secObserver, secOutsider} {
		r, err := e.c.RegisterPolicy(e.as(t, who), &macpv1.RegisterPolicyRequest{PolicyDescriptor: decisionPolicy(pid, majorityRules)})
		if err != nil || r.Ok || !strings.HasPrefix(r.Error, "FORBIDDEN") {
			t.Fatalf("%s RegisterPolicy: %v %v", who, r, err)
		}
	}
	_, err = e.c.GetPolicy(e.as(t, secOutsider), &macpv1.GetPolicyRequest{PolicyId: pid})
	wantStatus(t, err, codes.NotFound, "UNKNOWN_POLICY_VERSION")
	if r, err := e.c.RegisterPolicy(e.as(t, secAdmin), &macpv1.RegisterPolicyRequest{PolicyDescriptor: decisionPolicy(pid, majorityRules)}); err != nil || !r.Ok {
		t.Fatalf("admin RegisterPolicy: %v %v", r, err)
	}
	for _, who := range []string{secInitiator, secObserver, secOutsider} {
		if g, err := e.c.GetPolicy(e.as(t, who), &macpv1.GetPolicyRequest{PolicyId: pid}); err != nil || g.PolicyDescriptor.GetPolicyId() != pid {
			t.Fatalf("%s GetPolicy: %v %v", who, g, err)
		}
		if l, err := e.c.ListPolicies(e.as(t, who), &macpv1.ListPoliciesRequest{}); err != nil || !slices.Contains(policyIDs(l.Descriptors), pid) {
			t.Fatalf("%s ListPolicies: %v %v", who, l, err)
		}
		if err := calls["WatchPolicies"](e.as(t, who)); err != nil {
			t.Fatalf("%s WatchPolicies: %v", who, err)
		}
		u, err := e.c.UnregisterPolicy(e.as(t, who), &macpv1.UnregisterPolicyRequest{PolicyId: pid})
		if err != nil || u.Ok || !strings.HasPrefix(u.Error, "FORBIDDEN") {
			t.Fatalf("%s UnregisterPolicy: %v %v", who, u, err)
		}
	}
	if u, err := e.c.UnregisterPolicy(e.as(t, secAdmin), &macpv1.UnregisterPolicyRequest{PolicyId: pid}); err != nil || !u.Ok {
		t.Fatalf("admin UnregisterPolicy: %v %v", u, err)
	}
}
