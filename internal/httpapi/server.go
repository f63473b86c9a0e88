package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/limits"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
)

// Options configure the HTTP binding. Zero durations and counts take the
// defaults noted.
type Options struct {
	// Manifest returns the runtime's manifest (the gRPC service's
	// GetManifest); the HTTP and WebSocket endpoints are added to its
	// transport_endpoints.
	Manifest func() *macpv1.AgentManifest
	// BaseURL is the advertised "http(s)://host:port" of this listener
	// ("" = none advertised); BaseURLFunc, when set, is asked instead (the
	// address is known once bound).
	BaseURL     string
	BaseURLFunc func() string
	// CORSOrigins are the browser origins allowed cross-origin ("*" = any).
	CORSOrigins []string
	// Hosts are the Host values served besides the listener's own
	// address; DevHosts adds the localhost forms (host.go).
	Hosts    []string
	DevHosts bool
	// KeepAlive: SSE comment and WebSocket ping interval (15 s).
	KeepAlive time.Duration
	// WriteTimeout bounds each streamed write (10 s).
	WriteTimeout time.Duration
	// MaxSubscriptions per WebSocket connection (64).
	MaxSubscriptions int
	// TicketTTL: lifetime of browser tickets (30 s).
	TicketTTL time.Duration
	// MaxTickets caps outstanding tickets (4096; 16 per identity).
	MaxTickets int
	// MaxPayloadBytes is the envelope payload limit (1 MiB): bodies and
	// WebSocket messages may be twice it plus 64 KiB.
	MaxPayloadBytes int
	// UnaryTimeout bounds the non-streaming routes (30 s).
	UnaryTimeout time.Duration
	// HandshakeTimeout bounds reading a request's headers (10 s);
	// IdleTimeout closes idle keep-alive connections (5 min).
	HandshakeTimeout, IdleTimeout time.Duration
	// MaxStreamsPerIdentity caps one identity's open SSE streams and
	// WebSocket connections; MaxStreamsPerSession the feeds of one
	// session (0 = no cap).
	MaxStreamsPerIdentity, MaxStreamsPerSession int
	// MaxConnections caps concurrent connections, MaxConnectionsPerAddr
	// those of one IP address and MaxConnectionsPerPrefix64 those of one
	// IPv6 /64 (0 = no cap); beyond a cap a connection is closed when
	// accepted (listener.go).
	MaxConnections, MaxConnectionsPerAddr, MaxConnectionsPerPrefix64 int
	// FirstRequestTimeout closes a connection that started no request
	// this long after it was accepted, or made no authenticated request
	// and has been idle this long (15 s; listener.go).
	FirstRequestTimeout time.Duration
	// BodyTimeout bounds reading a request body (30 s; listener.go).
	BodyTimeout time.Duration
	// TLS, when set, serves HTTPS with it (the gRPC listener's config).
	TLS    *tls.Config
	Logger *slog.Logger
	// ReplayWindow is how many missed records session/resume replays at
	// most (0 = the whole retained history); beyond it the answer is
	// catchup: false and nothing missed is replayed (resume.go).
	ReplayWindow int
	// Registry serves the mode and policy lists; it must be the lookup the
	// runtime was built with (runtime.New).
	Registry *registry.Registry
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.KeepAlive, 15*time.Second)
	def(&o.WriteTimeout, 10*time.Second)
	def(&o.TicketTTL, 30*time.Second)
	def(&o.UnaryTimeout, 30*time.Second)
	def(&o.HandshakeTimeout, 10*time.Second)
	def(&o.IdleTimeout, 5*time.Minute)
	def(&o.FirstRequestTimeout, 15*time.Second)
	def(&o.BodyTimeout, 30*time.Second)
	if o.MaxSubscriptions <= 0 {
		o.MaxSubscriptions = 64
	}
	if o.MaxTickets <= 0 {
		o.MaxTickets = 4096
	}
	if o.MaxPayloadBytes <= 0 {
		o.MaxPayloadBytes = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server is the HTTP binding.
type Server struct {
	rt   *runtime.Runtime
	auth auth.Authenticator
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux
	cors *cors

	tickets *tickets
	enc     *encCache
	perID   *limits.Counter
	perSess *limits.Counter

	attached *attachments // protocol-mode attachments (resume.go)

	// drain ends every stream (Drain).
	drain    context.Context
	drainNow context.CancelFunc

	conns *connLimiter // listener.go

	mu  sync.Mutex
	srv *http.Server
}

// New returns the binding over rt, authenticating with a.
func New(rt *runtime.Runtime, a auth.Authenticator, opts Options) *Server {
	opts.defaults()
	drain, drainNow := context.WithCancel(context.Background())
	s := &Server{
		rt: rt, auth: a, opts: opts, log: opts.Logger, mux: http.NewServeMux(),
		cors:     newCORS(opts.CORSOrigins),
		tickets:  newTickets(opts.TicketTTL, opts.MaxTickets, rt.Clock().Now),
		enc:      newEncCache(),
		attached: newAttachments(),
		perID:    limits.NewCounter(opts.MaxStreamsPerIdentity),
		perSess:  limits.NewCounter(opts.MaxStreamsPerSession),
		drain:    drain, drainNow: drainNow,
		conns: &connLimiter{
			count:        limits.NewConnCounter(opts.MaxConnections, opts.MaxConnectionsPerAddr, opts.MaxConnectionsPerPrefix64),
			firstRequest: opts.FirstRequestTimeout,
			log:          limits.NewLogEvery(opts.Logger, 10*time.Second),
		},
	}
	s.routes()
	return s
}

// Handle mounts an extra route (Go 1.22 pattern, e.g. "GET
// /macp/snapshots/{id}") on the listener; call before Serve. The handler
// gets CORS and the origin check like every route; use Identify to
// authenticate and WriteError / WriteJSON to answer.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Handler is the binding's root handler (the request-body deadline, the
// Host check, CORS and origin check, then the routes).
func (s *Server) Handler() http.Handler { return s.bodyDeadline(s.checkHost(s.cors.wrap(s.mux))) }

// maxBody is the largest request body or WebSocket message accepted.
func (s *Server) maxBody() int64 { return 2*int64(s.opts.MaxPayloadBytes) + 64<<10 }

// Serve serves on l (TLS when Options.TLS is set) until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	l = &limitListener{Listener: l, l: s.conns} // listener.go
	if s.opts.TLS != nil {
		l = tls.NewListener(l, s.opts.TLS)
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.opts.HandshakeTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return context.Background() },
		ConnContext:       connContext,
		ConnState: func(c net.Conn, st http.ConnState) {
			if lc := limitedOf(c); lc != nil {
				lc.state(st)
			}
		},
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Drain ends every SSE stream and WebSocket connection (close 1001) so
// clients reconnect elsewhere; Shutdown calls it.
func (s *Server) Drain() { s.drainNow() }

// Shutdown drains the streams and waits for in-flight requests until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	return err
}

// nowMs is the runtime's clock (Runtime.Clock) in Unix milliseconds, the
// one clock of every binding, so the "live since the stream opened" rule
// reads the same time on every transport. (Network deadlines are wall
// time.)
func (s *Server) nowMs() int64 { return s.rt.Clock().Now().UnixMilli() }
