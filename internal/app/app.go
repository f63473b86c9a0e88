// Package app wires a Config into a running macpd: store, the mode and
// policy registries (internal/registry: the lookups the runtime's core
// resolves against, loaded before the runtime recovers, served by the
// bindings and reloaded by the cluster feed), runtime, authentication, the
// gRPC server, the metrics registry and the optional admin HTTP endpoint
// (internal/admin). cmd/macpd is a thin
// wrapper around it, and end-to-end tests start an App on 127.0.0.1:0.
package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"

	"github.com/macpd/macpd/internal/admin"
	"github.com/macpd/macpd/internal/admin/grpcmetrics"
	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/httpapi"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/store/pebblestore"
	"github.com/macpd/macpd/internal/tlsconf"
	"github.com/macpd/macpd/internal/version"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
)

// Version is the version macpd reports to clients (Initialize,
// GetManifest): read from the build information (internal/version).
var Version = version.Current()

// App is one running macpd.
type App struct {
	cfg    config.Config
	log    *slog.Logger
	store  store.Store
	rt     *runtime.Runtime
	regs   *registry.Registry
	svc    *server.Service
	grpc   *grpc.Server
	health *health.Server
	lis    net.Listener
	served chan error
	once   sync.Once
	cl     clusterState // MACP_STORE=nats (cluster.go)

	metrics    *prometheus.Registry
	admin      *admin.Server // nil unless cfg.AdminAddr is set
	adminLis   net.Listener
	adminServe chan struct{} // closed when the admin Serve returns

	snap *snapshots   // snapshots.go
	http *httpBinding // nil unless cfg.HTTP.Addr is set (http.go)
}

// NewLogger builds the structured logger the config asks for.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	o := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// New validates cfg and builds the App; Start serves it.
func New(cfg config.Config, log *slog.Logger) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Everything that can refuse the configuration comes before anything
	// is written to disk: a refused start creates no data store.
	// Authenticators in chain order (JWT, static tokens, client
	// certificate, dev identities last); see auth.FromConfig.
	authn, err := auth.FromConfig(cfg, log)
	if err != nil {
		return nil, err
	}
	var tc *tlsconf.Server
	if cfg.TLSCertPath != "" {
		// TLS 1.2+, optional client certificates, reloaded on change.
		if tc, err = tlsconf.FromConfig(cfg, log); err != nil {
			return nil, fmt.Errorf("loading TLS certificate: %w", err)
		}
	}
	var st store.Store
	reg := newRegistry()
	defer func() {
		if err != nil && st != nil {
			_ = st.Close() // release the data directory's lock
		}
	}()
	var cl clusterState // cluster.go: MACP_STORE=nats
	if cfg.MemoryOnly {
		st = memstore.New()
	} else if cfg.NATS.Store == config.StoreNATS {
		if cl.ns, err = openNATS(cfg, log); err != nil {
			return nil, err
		}
		st = cl.ns
	} else {
		ps, err := pebblestore.Open(cfg.DataDir, pebblestore.Options{Logger: log})
		if err != nil {
			return nil, fmt.Errorf("opening the store in %s: %w", cfg.DataDir, err)
		}
		st = ps
		reg.MustRegister(ps.Collector())       // macpd_store_*
		reg.MustRegister(ps.HealthCollector()) // macpd_store_failed
	}
	rm := runtime.NewMetrics() // macpd_commit_*, macpd_sessions_*, ...
	reg.MustRegister(rm)
	lim := session.Limits{
		MaxTTLMs:        cfg.MaxTTL.Milliseconds(),
		Profile:         cfg.Profile,
		MaxSuspendMs:    cfg.MaxSuspend.Milliseconds(),
		MaxParticipants: cfg.MaxParticipants,
		MaxPayloadBytes: cfg.MaxPayloadBytes,
		MaxStartSkewMs:  cfg.StartSkew.Milliseconds(),
	}
	// The registries (extension modes, policies) are the lookups the
	// runtime's core resolves against; the bindings and the cluster feed
	// use them directly.
	regs := registry.New(st, builtin.Modes(), policy.DefaultOnly{}, registry.Options{
		Limits: registryLimits(cfg), // limits.go
		Logger: log,
	})
	fwd, err := cl.forwarder(cfg, log) // cluster.go: MACP_CLUSTER_OWNERSHIP
	if err != nil {
		return nil, err
	}
	rt := runtime.New(st, regs, regs, runtime.Options{
		Forwarder:                   fwd,
		Limits:                      lim,
		MaxOpenSessionsPerInitiator: cfg.MaxOpenSessions,
		Rates:                       runtimeRates(cfg),    // limits.go
		StreamBuffers:               streamBuffers(cfg),   // limits.go
		MaxCommitsInFlight:          commitsInFlight(cfg), // limits.go
		StrictRecovery:              cfg.StrictRecovery,
		Retention:                   cfg.Retention,
		EvictAfter:                  cfg.EvictAfter,
		Logger:                      log,
		Metrics:                     rm,
		// Send's bound (the server leaves it out of its per-call context).
		CommitTimeout: cfg.Limits.UnaryTimeout,
	})
	if err := cl.prepare(rt, cfg); err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, log: log, store: st, rt: rt, regs: regs, served: make(chan error, 1), metrics: reg, cl: cl}
	var experimental map[string]string
	if cfg.HTTP.Addr != "" { // protocol-mode resume (internal/httpapi) is served
		experimental = httpapi.ResumeFeatures(cfg.Resume.ReplayWindow)
	}
	svc := server.New(rt, authn, server.Options{
		Experimental: experimental,
		Info: server.Info{
			Name:        "macpd",
			Title:       "macpd",
			Version:     Version,
			Description: "MACP runtime: binding multi-agent coordination sessions",
			WebsiteURL:  "https://github.com/macpd/macpd",
			AgentID:     "macpd",
			Endpoint:    endpointURI(cfg),
		},
		// The envelope's payload may use the whole payload limit; leave
		// room for the rest of the request.
		MaxRecvBytes:    cfg.MaxPayloadBytes + 64<<10,
		StreamHeartbeat: cfg.StreamHeartbeat,
		Limits:          serverLimits(cfg), // limits.go
		Logger:          log,
		Registry:        regs,
	})
	// gRPC metrics outermost: grpc-go runs the interceptor set with
	// grpc.UnaryInterceptor / grpc.StreamInterceptor before the chained
	// ones of server.NewGRPCServer (authentication, limits), so calls
	// those reject are counted too.
	gm := grpcmetrics.New()
	a.metrics.MustRegister(gm)
	opts := []grpc.ServerOption{
		grpc.UnaryInterceptor(gm.UnaryServerInterceptor),
		grpc.StreamInterceptor(gm.StreamServerInterceptor),
	}
	var httpTLS *tls.Config // the HTTP listener's: the same certificates
	if tc != nil {
		opts = append(opts, grpc.Creds(tc.Credentials()))
		httpTLS = tc.Config()
	} else if !cfg.AllowInsecure { // Start warns about MACP_ALLOW_INSECURE itself
		log.Warn("plaintext transport (MACP_ALLOW_PLAINTEXT): traffic and bearer tokens are unencrypted; do not use in production")
	}
	if err := a.newSnapshots(); err != nil { // snapshots.go
		return nil, err
	}
	a.svc = svc
	a.grpc, a.health = svc.NewGRPCServer(opts...)
	if cfg.AdminAddr != "" {
		a.admin = admin.New(cfg, a.metrics, log)
		if f, ok := st.(interface{ Failed() error }); ok {
			a.admin.SetHealth(f.Failed) // /healthz: 503 once the store failed
		}
	}
	if cfg.HTTP.Addr != "" {
		a.http = &httpBinding{srv: newHTTP(cfg, rt, authn, svc, httpTLS, a)}
		a.mountSnapshots() // http.go
		a.mountConsole()   // console.go
	}
	return a, nil
}

// newRegistry is the App's metrics registry with the Go runtime and
// process collectors (go_*, process_*).
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// endpointURI is the advertised gRPC endpoint (manifest transport_endpoints).
// It is omitted when the bind address names no concrete host and port.
func endpointURI(cfg config.Config) string {
	host, port, err := net.SplitHostPort(cfg.BindAddr)
	if ip := net.ParseIP(host); err != nil || port == "0" || host == "" || (ip != nil && ip.IsUnspecified()) {
		return ""
	}
	scheme := "grpcs://"
	if cfg.TLSCertPath == "" {
		scheme = "grpc://"
	}
	return scheme + cfg.BindAddr
}

// Start recovers state, binds the listener and serves in the background.
func (a *App) Start(ctx context.Context) error {
	if err := a.regs.Load(ctx); err != nil {
		return err
	}
	if err := a.rt.Start(ctx); err != nil {
		return err
	}
	if err := a.cl.start(ctx, a.rt, a.regs, a.log); err != nil {
		a.rt.Close()
		return err
	}
	lis, err := net.Listen("tcp", a.cfg.BindAddr)
	if err != nil {
		a.rt.Close()
		return fmt.Errorf("listening on %s: %w", a.cfg.BindAddr, err)
	}
	if a.admin != nil {
		al, err := net.Listen("tcp", a.cfg.AdminAddr)
		if err != nil {
			lis.Close()
			a.rt.Close()
			return fmt.Errorf("listening on %s (MACP_ADMIN_ADDR): %w", a.cfg.AdminAddr, err)
		}
		a.adminLis, a.adminServe = al, make(chan struct{})
		go func() {
			defer close(a.adminServe)
			if err := a.admin.Serve(al); err != nil {
				a.log.Error("admin endpoint stopped", "addr", al.Addr().String(), "err", err)
			}
		}()
		a.log.Info("admin listening", "addr", al.Addr().String(), "pprof", a.cfg.AdminPprof)
		if !admin.Loopback(al.Addr()) {
			a.log.Warn("the admin endpoint is plaintext and unauthenticated and listens on a non-loopback address; "+
				"make sure only trusted hosts can reach it (MACP_ADMIN_ADDR)", "addr", al.Addr().String(), "pprof", a.cfg.AdminPprof)
		}
	}
	if err := a.startHTTP(); err != nil { // http.go
		lis.Close()
		if a.adminLis != nil {
			_ = a.admin.Shutdown(context.Background())
		}
		a.rt.Close()
		return err
	}
	a.lis = lis
	// snapshots.go: the MACP_SNAPSHOT_DIR writer.
	a.startSnapshots()
	lis = a.svc.GuardListener(lis) // MACP_MAX_CONNECTIONS(_PER_ADDR, _PER_PREFIX64), MACP_FIRST_CALL_TIMEOUT_MS
	go func() { a.served <- a.grpc.Serve(lis) }()
	a.log.Info("macpd serving", "addr", lis.Addr().String(), "version", Version,
		"store", storeName(a.cfg),
		"tls", a.cfg.TLSCertPath != "", "insecure", a.cfg.AllowInsecure)
	if a.cfg.AllowInsecure {
		a.log.Warn("insecure mode: plaintext transport and dev bearer identities are enabled; do not use in production")
	}
	return nil
}

// Addr is the bound listen address.
func (a *App) Addr() string { return a.lis.Addr().String() }

// AdminAddr is the bound admin endpoint address, "" when it is off
// (MACP_ADMIN_ADDR unset) or not started.
func (a *App) AdminAddr() string {
	if a.adminLis == nil {
		return ""
	}
	return a.adminLis.Addr().String()
}

// Metrics is the registry the admin endpoint's /metrics serves (Go runtime,
// process, gRPC server, runtime and, with Pebble, store metrics). Other
// packages may register their collectors on it; it exists whether or not
// the admin endpoint is on.
func (a *App) Metrics() *prometheus.Registry { return a.metrics }

// Runtime exposes the runtime (tests, tools).
func (a *App) Runtime() *runtime.Runtime { return a.rt }

// Registry returns the App's mode and policy registries.
func (a *App) Registry() *registry.Registry { return a.regs }

// Service is the gRPC service (tests read its counters).
func (a *App) Service() *server.Service { return a.svc }

// Served reports the result of Serve once it returns.
func (a *App) Served() <-chan error { return a.served }

// Shutdown stops accepting calls, lets in-flight calls finish until ctx
// ends, stops the admin endpoint (it serves metrics and liveness while the
// gRPC calls drain), then stops the runtime and closes the store.
func (a *App) Shutdown(ctx context.Context) error {
	var err error
	a.once.Do(func() {
		a.health.Shutdown()
		// End watch streams so GracefulStop only waits for unary calls.
		a.svc.Drain()
		a.shutdownHTTP(ctx) // http.go
		stopped := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			a.grpc.Stop()
		}
		if a.adminLis != nil {
			if aerr := a.admin.Shutdown(ctx); aerr != nil {
				a.log.Warn("admin endpoint: requests cut short by shutdown", "err", aerr)
			}
			<-a.adminServe
		}
		a.stopSnapshots()
		a.cl.stop()
		a.rt.Close()
		err = a.store.Close()
		a.log.Info("macpd stopped")
	})
	return err
}
