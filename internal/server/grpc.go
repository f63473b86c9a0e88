package server

import (
	"context"
	"errors"
	"github.com/macpd/macpd/internal/hub"
	"github.com/macpd/macpd/internal/streambudget"
	"log/slog"
	"maps"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Info describes the runtime to clients (Initialize, GetManifest).
type Info struct {
	Name, Title, Version, Description, WebsiteURL string
	// AgentID is the runtime's own manifest id (GetManifest with an empty
	// or matching agent_id).
	AgentID string
	// Endpoint is the advertised gRPC URI, e.g. "grpc://127.0.0.1:50051".
	Endpoint     string
	Instructions string
}

// Options configure the gRPC binding.
type Options struct {
	Info Info
	// Experimental are extra capabilities.experimental.features that
	// Initialize advertises (for example the HTTP listener's protocol-mode
	// session resume and its replay window), beside macpd's own.
	Experimental map[string]string
	// Roots are the runtime's advertised roots (ListRoots).
	Roots []*macpv1.Root
	// MaxRecvBytes bounds a whole request message, so oversized frames are
	// refused before they are decoded.
	MaxRecvBytes int
	// StreamHeartbeat is how often an idle bound StreamSession gets an
	// ambient heartbeat Signal; 0 disables heartbeats.
	StreamHeartbeat time.Duration
	// Limits are the transport abuse limits (limits.go); zero = none.
	Limits Limits
	Logger *slog.Logger
	// Registry serves the mode and policy registry RPCs and the modes
	// Initialize and ListModes report; it must be the lookup the runtime
	// was built with (runtime.New).
	Registry *registry.Registry
}

// Service implements macp.v1.MACPRuntimeService.
type Service struct {
	macpv1.UnimplementedMACPRuntimeServiceServer
	rt   *runtime.Runtime
	auth auth.Authenticator
	opts Options
	log  *slog.Logger

	// drain is cancelled by Drain; every stream's context is derived from
	// it so open streams end when the server drains.
	drain    context.Context
	drainNow context.CancelFunc

	lim   *streamLimits // stream counters (limits.go)
	guard *connGuard    // per-address connections, first-call deadline (connguard.go)
}

// New returns the service over rt, authenticating with a.
func New(rt *runtime.Runtime, a auth.Authenticator, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	drain, drainNow := context.WithCancel(context.Background())
	return &Service{rt: rt, auth: a, opts: opts, log: opts.Logger, drain: drain, drainNow: drainNow, lim: newStreamLimits(opts.Limits),
		guard: newConnGuard(opts.Limits, opts.Logger)}
}

// Drain ends every open stream (the watch streams idle until the client
// leaves) with UNAVAILABLE and refuses new ones, so clients reconnect
// elsewhere and grpc.Server.GracefulStop then only waits for in-flight
// unary calls. Without it GracefulStop blocks for as long as any watcher
// stays connected. Call it before GracefulStop; it is idempotent.
func (s *Service) Drain() { s.drainNow() }

var errDraining = status.Error(codes.Unavailable, "macpd is shutting down; reconnect")

// publicMethods may be called without credentials: the discovery calls the
// official SDKs make before they authenticate (RFC-MACP-0005).
var publicMethods = map[string]bool{
	macpv1.MACPRuntimeService_Initialize_FullMethodName:  true,
	macpv1.MACPRuntimeService_ListModes_FullMethodName:   true,
	macpv1.MACPRuntimeService_GetManifest_FullMethodName: true,
	macpv1.MACPRuntimeService_ListRoots_FullMethodName:   true,
	// Registry and roots change hints and the extension-mode list are
	// discovery too; the official SDKs call them without metadata.
	macpv1.MACPRuntimeService_ListExtModes_FullMethodName:      true,
	macpv1.MACPRuntimeService_WatchModeRegistry_FullMethodName: true,
	macpv1.MACPRuntimeService_WatchRoots_FullMethodName:        true,
}

type identityKey struct{}

// identityFrom returns the authenticated identity of the call.
func identityFrom(ctx context.Context) (coord.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(coord.Identity)
	return id, ok
}

// authenticate resolves the caller; public methods tolerate no credentials.
func (s *Service) authenticate(ctx context.Context, method string) (context.Context, error) {
	if !isMACPMethod(method) {
		return ctx, nil // health, reflection
	}
	id, err := authenticateIncoming(ctx, s.auth)
	switch {
	case err == nil:
		s.guard.authenticated(ctx) // connguard.go: the connection keeps MACP_MAX_CONNECTION_IDLE_MS
		return context.WithValue(ctx, identityKey{}, id), nil
	case publicMethods[method] && errors.Is(err, auth.ErrNoCredentials):
		return ctx, nil
	case errors.Is(err, auth.ErrNoCredentials):
		return nil, statusErr(coord.Errorf(coord.CodeUnauthenticated, "credentials are required: send authorization: Bearer <token>"))
	default:
		s.log.Info("authentication failed", "method", method, "err", err)
		return nil, statusErr(coord.AsErrorCode(err, coord.CodeUnauthenticated))
	}
}

// credsPool recycles the Credentials authenticateIncoming builds: a call
// pays no allocation for them (authenticators must not keep them).
var credsPool = sync.Pool{New: func() any { return new(auth.Credentials) }}

// authenticateIncoming runs a on the credentials of the incoming call: the
// metadata under auth.Headers, looked up one key at a time
// (metadata.FromIncomingContext copies every header of every call, about
// 2% of the server's CPU at 64 concurrent sessions), and the client
// certificate chains the TLS handshake verified.
func authenticateIncoming(ctx context.Context, a auth.Authenticator) (coord.Identity, error) {
	c := credsPool.Get().(*auth.Credentials)
	auth.Collect(c, func(k string) []string { return metadata.ValueFromIncomingContext(ctx, k) })
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			c.VerifiedChains = ti.State.VerifiedChains
		}
	}
	id, err := a.Authenticate(ctx, c)
	*c = auth.Credentials{}
	credsPool.Put(c)
	return id, err
}

// nowMs is the runtime's clock (Runtime.Clock) in Unix milliseconds: the
// one time every binding stamps and compares with.
func (s *Service) nowMs() int64 { return s.rt.Clock().Now().UnixMilli() }

func isMACPMethod(m string) bool {
	return strings.HasPrefix(m, "/macp.v1.MACPRuntimeService/")
}

// UnaryInterceptor authenticates unary calls.
func (s *Service) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := s.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *authedStream) Context() context.Context { return a.ctx }

// StreamInterceptor authenticates streaming calls and ends them when the
// service drains (Drain).
func (s *Service) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if s.drain.Err() != nil {
		return errDraining
	}
	ctx, err := s.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.drain, cancel)()
	err = h(srv, &authedStream{ServerStream: ss, ctx: ctx})
	if s.drain.Err() != nil && ss.Context().Err() == nil && (err == nil || status.Code(err) == codes.Canceled) {
		// The stream ended because of Drain, not because the client left.
		return errDraining
	}
	return err
}

// Stream workers: enough for the unary calls a busy server has in flight.
const (
	streamWorkersPerCPU = 64
	minStreamWorkers    = 128
)

// Inbound flow-control windows (static; see NewGRPCServer).
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// NewGRPCServer builds a grpc.Server with the service, health and
// reflection registered. extra options are appended (credentials, ...).
func (s *Service) NewGRPCServer(extra ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	opts := []grpc.ServerOption{
		// connguard.go: the connection made a call; limits.go: after
		// authentication; codec.go.
		grpc.ChainUnaryInterceptor(s.guard.unarySeen, s.UnaryInterceptor, s.limitUnary, s.decodeUnary),
		// connguard.go; limits.go: stream slots, WatchSignals filter; codec.go.
		grpc.ChainStreamInterceptor(s.guard.streamSeen, s.StreamInterceptor, s.limitStream, s.decodeStream),
		// Undecodable requests are the client's error, not INTERNAL (codec.go).
		grpc.ForceServerCodecV2(newRequestCodec()),
	}
	opts = append(opts, s.limitOptions()...) // limits.go: streams per connection, keepalive, handshake
	if s.opts.MaxRecvBytes > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(s.opts.MaxRecvBytes))
	}
	opts = append(opts, TransportOptions()...)
	g := grpc.NewServer(append(opts, extra...)...)
	macpv1.RegisterMACPRuntimeServiceServer(g, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	hs.SetServingStatus(macpv1.MACPRuntimeService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(g)
	return g, hs
}

// TransportOptions are the grpc-go settings macpd serves with, besides
// its interceptors and limits; the durable echo floor (echo-bench
// --durable) uses them too, so that comparing macpd with it leaves the
// transport out.
func TransportOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		// A pool of stream workers instead of a new goroutine per RPC: a
		// worker's stack has already grown to what a Send needs, where a fresh
		// goroutine copies its stack several times per call (runtime.copystack
		// was ~5% of the server's CPU under load). A Send holds its worker
		// while its commit syncs, so the pool must cover the calls in flight,
		// not the CPUs: with one worker per CPU nearly every call found them
		// busy and got a fresh goroutine after all. When every worker is busy
		// (more calls in flight, long-lived streams), grpc-go starts a
		// goroutine as before. An idle worker costs a parked goroutine.
		grpc.NumStreamWorkers(uint32(max(streamWorkersPerCPU*goruntime.GOMAXPROCS(0), minStreamWorkers))),
		// Static inbound flow-control windows instead of grpc-go's dynamic
		// ones: the dynamic window's bandwidth estimator answers incoming
		// data with a window update and a PING whenever no estimate is under
		// way, which at many small Sends is frames, syscalls and client work
		// on every round trip (64 concurrent sessions, 16 alternating 5 s
		// pairs: throughput higher in 12, median +8%; server CPU per ack lower
		// in 13; but scripts/bench.sh, builds alternated twice, and one session
		// with 16 senders: no difference beyond noise).
		// The windows cover a largest Send (1 MiB payload) per stream and four
		// per connection; the dynamic window may grow to 16 MiB.
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow),
	}
}

func (s *Service) capabilities() *macpv1.Capabilities {
	return &macpv1.Capabilities{
		Sessions:       &macpv1.SessionsCapability{Stream: true, ListSessions: true, WatchSessions: true},
		Cancellation:   &macpv1.CancellationCapability{CancelSession: true},
		Progress:       &macpv1.ProgressCapability{Progress: false},
		Manifest:       &macpv1.ManifestCapability{GetManifest: true},
		ModeRegistry:   &macpv1.ModeRegistryCapability{ListModes: true, ListChanged: true},
		Roots:          &macpv1.RootsCapability{ListRoots: true, ListChanged: true},
		PolicyRegistry: &macpv1.PolicyRegistryCapability{RegisterPolicy: true, ListPolicies: true, ListChanged: true},
		Experimental:   &macpv1.ExperimentalCapabilities{Features: s.experimental()},
	}
}

// experimental is macpd's own experimental feature plus Options.Experimental.
func (s *Service) experimental() map[string]string {
	f := map[string]string{
		"ext_mode_lifecycle":    "true",
		"macpd.profile":         s.rt.Profile(),
		"macpd.profiles":        strings.Join(coord.Profiles, ","),
		"session_suspension":    "true",
		"list_sessions_paging":  "true",
		"commitment_supersedes": "true",
	}
	maps.Copy(f, s.opts.Experimental)
	return f
}

// Initialize negotiates the protocol version (RFC-MACP-0001 §5).
func (s *Service) Initialize(_ context.Context, req *macpv1.InitializeRequest) (*macpv1.InitializeResponse, error) {
	if len(req.GetSupportedProtocolVersions()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "supported_protocol_versions must list at least one version")
	}
	if !slices.Contains(req.GetSupportedProtocolVersions(), coord.ProtocolVersion) {
		return nil, statusErr(coord.Errorf(coord.CodeUnsupportedProtocolVersion,
			"no common protocol version: client offers %v, runtime supports [%s]", req.GetSupportedProtocolVersions(), coord.ProtocolVersion))
	}
	i := s.opts.Info
	return &macpv1.InitializeResponse{
		SelectedProtocolVersion: coord.ProtocolVersion,
		RuntimeInfo:             &macpv1.RuntimeInfo{Name: i.Name, Title: i.Title, Version: i.Version, Description: i.Description, WebsiteUrl: i.WebsiteURL},
		Capabilities:            s.capabilities(),
		SupportedModes:          s.opts.Registry.Modes().IDs(),
		Instructions:            i.Instructions,
	}, nil
}

// Send admits one envelope (RFC-MACP-0001 §7; RFC-MACP-0006 §3.1).
func (s *Service) Send(ctx context.Context, req *macpv1.SendRequest) (*macpv1.SendResponse, error) {
	id, _ := identityFrom(ctx)
	if req.GetEnvelope() == nil {
		return nil, statusErr(coord.Errorf(coord.CodeInvalidEnvelope, "SendRequest.envelope is required"))
	}
	return &macpv1.SendResponse{Ack: s.rt.Send(ctx, id, req.Envelope)}, nil
}

// GetSession returns session metadata to its initiator, participants and
// observers.
func (s *Service) GetSession(ctx context.Context, req *macpv1.GetSessionRequest) (*macpv1.GetSessionResponse, error) {
	id, _ := identityFrom(ctx)
	if req.GetSessionId() == "" {
		return nil, statusErr(coord.Errorf(coord.CodeInvalidEnvelope, "session_id is required"))
	}
	md, err := s.rt.GetSession(ctx, id, req.SessionId)
	if err != nil {
		return nil, statusErr(err)
	}
	if in, _ := metadata.FromIncomingContext(ctx); len(in.Get(coord.HeaderSessionProfile)) > 0 {
		// Asked for (coord.HeaderSessionProfile): the recorded profile, to
		// a caller GetSession has just authorized.
		var prof string
		if s.rt.Inspect(ctx, req.SessionId, func(ss *session.Session) { prof = ss.Binding.Profile }) == nil && prof != "" {
			_ = grpc.SetHeader(ctx, metadata.Pairs(coord.HeaderSessionProfile, prof))
		}
	}
	return &macpv1.GetSessionResponse{Metadata: md}, nil
}

// SuspendSession pauses an OPEN session on its initiator's request
// (RFC-MACP-0001 §7.5).
func (s *Service) SuspendSession(ctx context.Context, req *macpv1.SuspendSessionRequest) (*macpv1.SuspendSessionResponse, error) {
	id, _ := identityFrom(ctx)
	if req.GetSessionId() == "" {
		return nil, statusErr(coord.Errorf(coord.CodeInvalidEnvelope, "session_id is required"))
	}
	ack, err := s.rt.Suspend(ctx, id, req.SessionId, req.Reason)
	if err != nil {
		return nil, statusErr(err)
	}
	return &macpv1.SuspendSessionResponse{Ack: ack}, nil
}

// ResumeSession reopens a SUSPENDED session on its initiator's request
// (RFC-MACP-0001 §7.5).
func (s *Service) ResumeSession(ctx context.Context, req *macpv1.ResumeSessionRequest) (*macpv1.ResumeSessionResponse, error) {
	id, _ := identityFrom(ctx)
	if req.GetSessionId() == "" {
		return nil, statusErr(coord.Errorf(coord.CodeInvalidEnvelope, "session_id is required"))
	}
	ack, err := s.rt.Resume(ctx, id, req.SessionId, req.Reason)
	if err != nil {
		return nil, statusErr(err)
	}
	return &macpv1.ResumeSessionResponse{Ack: ack}, nil
}

// CancelSession ends a session on its initiator's request: EXPIRED under
// profile 2026-04, CANCELLED under latest (the session's bound profile).
func (s *Service) CancelSession(ctx context.Context, req *macpv1.CancelSessionRequest) (*macpv1.CancelSessionResponse, error) {
	id, _ := identityFrom(ctx)
	if req.GetSessionId() == "" {
		return nil, statusErr(coord.Errorf(coord.CodeInvalidEnvelope, "session_id is required"))
	}
	ack, err := s.rt.Cancel(ctx, id, req.SessionId, req.Reason)
	if err != nil {
		return nil, statusErr(err)
	}
	return &macpv1.CancelSessionResponse{Ack: ack}, nil
}

// GetManifest returns the runtime's own manifest (RFC-MACP-0005).
func (s *Service) GetManifest(_ context.Context, req *macpv1.GetManifestRequest) (*macpv1.GetManifestResponse, error) {
	i := s.opts.Info
	if req.GetAgentId() != "" && req.GetAgentId() != i.AgentID {
		return nil, status.Errorf(codes.NotFound, "no manifest is known for agent %q", req.GetAgentId())
	}
	m := &macpv1.AgentManifest{
		AgentId:            i.AgentID,
		Title:              i.Title,
		Description:        i.Description,
		SupportedModes:     s.opts.Registry.Modes().IDs(),
		InputContentTypes:  []string{"application/macp-envelope+proto"},
		OutputContentTypes: []string{"application/macp-envelope+proto"},
		Metadata:           map[string]string{"runtime": i.Name, "version": i.Version, "profile": s.rt.Profile(), "profiles": strings.Join(coord.Profiles, ",")},
	}
	// The extra capabilities Initialize advertises (the HTTP listener's
	// protocol-mode session resume and its replay window), as
	// /.well-known/macp.json names them.
	for k, v := range s.opts.Experimental {
		m.Metadata["experimental."+k] = v
	}
	if i.Endpoint != "" {
		m.TransportEndpoints = []*macpv1.TransportEndpoint{{
			Transport:    "macp.transport.grpc.v1",
			Uri:          i.Endpoint,
			ContentTypes: []string{"application/macp-envelope+proto"},
		}}
	}
	return &macpv1.GetManifestResponse{Manifest: m}, nil
}

// ListModes lists standards-track modes.
func (s *Service) ListModes(context.Context, *macpv1.ListModesRequest) (*macpv1.ListModesResponse, error) {
	return &macpv1.ListModesResponse{Modes: s.opts.Registry.Modes().Descriptors(mode.Standard)}, nil
}

// ListRoots lists the runtime's configured roots.
func (s *Service) ListRoots(context.Context, *macpv1.ListRootsRequest) (*macpv1.ListRootsResponse, error) {
	return &macpv1.ListRootsResponse{Roots: s.opts.Roots}, nil
}

// ListSessions lists the sessions the caller may see, one page at a time
// when the client asks for pages (macp-proto 0.1.6; see
// runtime.ListSessionsPage).
func (s *Service) ListSessions(ctx context.Context, req *macpv1.ListSessionsRequest) (*macpv1.ListSessionsResponse, error) {
	id, _ := identityFrom(ctx)
	page, next, err := s.rt.ListSessionsPage(ctx, id, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &macpv1.ListSessionsResponse{Sessions: page, NextPageToken: next}, nil
}

// WatchRoots sends one change hint, then one per change (roots are static
// in this build, so the stream idles until the client leaves).
func (s *Service) WatchRoots(_ *macpv1.WatchRootsRequest, stream grpc.ServerStreamingServer[macpv1.WatchRootsResponse]) error {
	if err := stream.Send(&macpv1.WatchRootsResponse{Change: &macpv1.RootsChanged{ObservedAtUnixMs: s.nowMs()}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// WatchModeRegistry sends one hint, then one per registry change. Hints
// are idempotent ("re-query ListModes"), so they are coalesced: hints
// that queued up while the client was slow become one, and a watcher that
// the hub dropped for lagging just gets a fresh hint.
func (s *Service) WatchModeRegistry(_ *macpv1.WatchModeRegistryRequest, stream grpc.ServerStreamingServer[macpv1.WatchModeRegistryResponse]) error {
	return s.watchHints(stream.Context(), s.opts.Registry.ModeChanges, func(at int64) error {
		return stream.Send(&macpv1.WatchModeRegistryResponse{Change: &macpv1.RegistryChanged{Registry: "modes", ObservedAtUnixMs: at}})
	})
}

// watchHints calls send once at once, then once per change published on
// hub, until ctx ends or send fails. Changes are idempotent hints, so
// those that queued up while the client was slow become one, and a
// watcher the hub dropped for lagging is subscribed again and sent one.
func (s *Service) watchHints(ctx context.Context, h *hub.Hub[int64], send func(at int64) error) error {
	sub := h.Subscribe()
	defer func() { h.Unsubscribe(sub) }() // the current sub
	if err := send(s.nowMs()); err != nil {
		return err
	}
	for {
		select {
		case at := <-sub.C:
			for len(sub.C) > 0 {
				at = <-sub.C
			}
			if err := send(at); err != nil {
				return err
			}
		case <-sub.Done():
			sub = h.Subscribe()
			if err := send(s.nowMs()); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// WatchSignals streams ambient signals as they are accepted.
//
// Slow watchers: signals are ephemeral (no backlog, checklist SIG-3), so
// nothing can be replayed, but WatchSignalsResponse has no way to say
// "you missed some". Dropping the oldest queued signals would lose them
// silently, so a watcher whose bounded queue (runtime
// Options.SubscriberBuffer signals, shared envelopes) fills up is ended
// with RATE_LIMITED instead: the loss is visible and the client
// reconnects. The publisher never waits for a watcher either way.
func (s *Service) WatchSignals(_ *macpv1.WatchSignalsRequest, stream grpc.ServerStreamingServer[macpv1.WatchSignalsResponse]) error {
	sub := s.rt.Signals.Subscribe()
	defer s.rt.Signals.Unsubscribe(sub)
	// The encoded copy gRPC keeps until the client reads is charged to the
	// stream buffers (runtime/streambudget.go): a watcher that does not
	// read waits here, its subscription fills up and it is dropped.
	sw := s.newSendWindow(stream.Context())
	defer sw.end()
	w := sw.w
	for {
		select {
		case env := <-sub.C:
			s.rt.Signals.Took(sub, env)
			cost := streambudget.Cost(session.Record{Envelope: env})
			if err := w.Acquire(stream.Context(), cost); err != nil {
				if ce := (*coord.Error)(nil); errors.As(err, &ce) {
					return statusErr(ce)
				}
				return nil
			}
			resp := &macpv1.WatchSignalsResponse{Envelope: env}
			if err := sw.send(resp, cost, func() error { return stream.Send(resp) }); err != nil {
				return err
			}
		case <-sub.Done():
			return statusErr(coord.Errorf(coord.CodeRateLimited, "signal watcher fell behind and was disconnected (signals are not replayed); reconnect to continue"))
		case <-stream.Context().Done():
			return nil
		}
	}
}

// HeaderWatchSubscribed is sent in the WatchSessions response header as
// soon as the watch is subscribed (value: the server's Unix ms), before
// the initial sync. A client re-syncing after a disconnect waits for it
// (ClientStream.Header), then calls ListSessions: every change after the
// ListSessions snapshot arrives on the watch, so taking per session the
// later state (OPEN before RESOLVED/EXPIRED) of the two gives the current
// state, with nothing missed.
const HeaderWatchSubscribed = "macp-watch-subscribed"

// WatchSessions sends a CREATED event for every live session the caller
// may see (initial sync), then lifecycle events as they become durable
// (runtime.SessionWatch, shared with GET /macp/sessions/events).
//
// A slow watcher is not dropped: its missed events are coalesced to the
// latest state of each session, delivered in the order the sessions first
// changed (runtime.LifecycleWatcher). Only when more than
// Options.MaxWatchPending distinct sessions are pending is it ended with
// RATE_LIMITED, telling it to re-sync with ListSessions. Memory per
// watcher is bounded by that cap; acceptance never waits for a watcher.
func (s *Service) WatchSessions(_ *macpv1.WatchSessionsRequest, stream grpc.ServerStreamingServer[macpv1.WatchSessionsResponse]) error {
	ctx := stream.Context()
	id, _ := identityFrom(ctx)
	w := s.rt.WatchSessions(id)
	defer w.Close()
	if err := stream.SendHeader(metadata.Pairs(HeaderWatchSubscribed, strconv.FormatInt(w.SubscribedMs, 10))); err != nil {
		return err
	}
	for _, ev := range w.Sync(ctx) {
		if err := stream.Send(&macpv1.WatchSessionsResponse{Event: ev}); err != nil {
			return err
		}
	}
	for {
		for ev, ok := w.Next(); ok; ev, ok = w.Next() {
			if err := stream.Send(&macpv1.WatchSessionsResponse{Event: ev}); err != nil {
				return err
			}
		}
		select {
		case <-w.Ready():
		case <-w.Done():
			if w.Overflowed() {
				return statusErr(coord.Errorf(coord.CodeRateLimited, "lifecycle watcher fell more than %d sessions behind; re-sync with ListSessions and watch again", w.MaxPending()))
			}
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}
