package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/macpd/macpd/internal/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Timeouts of the admin http.Server.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	// WriteTimeout bounds writing a response. Recent releases of
	// net/http/pprof extend it by the requested duration for
	// /debug/pprof/profile and /trace; a minute also covers go tool
	// pprof's default 30 s profile where they do not.
	WriteTimeout   = time.Minute
	IdleTimeout    = 2 * time.Minute
	MaxHeaderBytes = 64 << 10
)

// Server is the admin HTTP endpoint.
type Server struct {
	srv    *http.Server
	log    *slog.Logger
	health *healthState // health.go
}

// New builds the endpoint for cfg (cfg.AdminPprof decides whether the
// profiler is mounted) serving reg's metrics. reg also receives promhttp's
// own metrics (promhttp_metric_handler_*). log may be nil.
func New(cfg config.Config, reg *prometheus.Registry, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{log},
		ErrorHandling: promhttp.ContinueOnError, // serve what could be gathered
		Registry:      reg,                      // promhttp_metric_handler_errors_total
	})
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(reg, metrics))
	hs := &healthState{}
	mux.HandleFunc("GET /healthz", hs.serve) // health.go
	if cfg.AdminPprof {
		// pprof.Index serves the named profiles (heap, goroutine, ...)
		// under /debug/pprof/<name>; it expects exactly this prefix.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return &Server{
		health: hs,
		log:    log,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: ReadHeaderTimeout,
			ReadTimeout:       ReadTimeout,
			WriteTimeout:      WriteTimeout,
			IdleTimeout:       IdleTimeout,
			MaxHeaderBytes:    MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.With("component", "admin").Handler(), slog.LevelWarn),
		},
	}
}

// Handler is the endpoint's routes (tests).
func (s *Server) Handler() http.Handler { return s.srv.Handler }

// Serve serves ln until Shutdown; it then returns nil. Any other error
// ends serving and is returned.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for in-flight requests
// until ctx ends, then closes the remaining connections and returns ctx's
// error. A later or concurrent Serve returns at once.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	return err
}

// Loopback reports whether addr is a loopback address (127.0.0.0/8, ::1).
// For a listener bound to a name, pass the listener's Addr, which holds the
// resolved IP.
func Loopback(addr net.Addr) bool {
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.IP.IsLoopback()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// promLogger sends promhttp's errors (failed collections, failed writes)
// to the structured log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("metrics exposition", "component", "admin", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}
