package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/httpapi"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
)

// The HTTP/JSON, SSE and WebSocket listener (MACP_HTTP_ADDR; internal/httpapi):
// the gRPC listener's runtime, authenticators, TLS configuration and
// limits.

// httpBinding is the App's HTTP listener, when on.
type httpBinding struct {
	srv    *httpapi.Server
	lis    net.Listener
	served chan struct{}
}

func newHTTP(cfg config.Config, rt *runtime.Runtime, authn auth.Authenticator, svc *server.Service, tlsCfg *tls.Config, a *App) *httpapi.Server {
	l := cfg.Limits
	return httpapi.New(rt, authn, httpapi.Options{
		Registry: a.regs,
		Manifest: func() *macpv1.AgentManifest {
			resp, err := svc.GetManifest(context.Background(), &macpv1.GetManifestRequest{})
			if err != nil {
				return &macpv1.AgentManifest{}
			}
			return resp.GetManifest()
		},
		BaseURL:               "", // set by Start once the address is bound
		CORSOrigins:           cfg.HTTP.Origins(),
		Hosts:                 cfg.HTTP.HostList(), // MACP_HTTP_HOSTS; httpapi/host.go
		DevHosts:              cfg.AllowInsecure,
		KeepAlive:             cfg.HTTP.KeepAlive,
		WriteTimeout:          cfg.HTTP.WriteTimeout,
		MaxSubscriptions:      cfg.HTTP.MaxSubscriptions,
		TicketTTL:             cfg.HTTP.TicketTTL,
		MaxPayloadBytes:       cfg.MaxPayloadBytes,
		UnaryTimeout:          l.UnaryTimeout,
		HandshakeTimeout:      l.HandshakeTimeout,
		IdleTimeout:           l.MaxConnectionIdle,
		MaxStreamsPerIdentity: l.MaxStreamsPerIdentity,
		MaxStreamsPerSession:  l.MaxStreamsPerSession,
		MaxConnections:        l.MaxConnections,
		// Same caps and first-request deadline as the gRPC listener
		// (counted per listener); httpapi/listener.go.
		MaxConnectionsPerAddr:     l.MaxConnectionsPerAddr,
		MaxConnectionsPerPrefix64: l.MaxConnectionsPerPrefix64,
		FirstRequestTimeout:       l.FirstCallTimeout,
		BodyTimeout:               cfg.HTTP.BodyTimeout,
		TLS:                       tlsCfg,
		Logger:                    a.log,
		BaseURLFunc:               a.httpBaseURL,
		ReplayWindow:              cfg.Resume.ReplayWindow,
	})
}

// httpBaseURL is the advertised base URL of the HTTP listener, "" when
// its address names no concrete host.
func (a *App) httpBaseURL() string {
	if a.http == nil || a.http.lis == nil {
		return ""
	}
	host, port, err := net.SplitHostPort(a.http.lis.Addr().String())
	if ip := net.ParseIP(host); err != nil || ip == nil || ip.IsUnspecified() {
		return ""
	}
	scheme := "https://"
	if a.cfg.TLSCertPath == "" {
		scheme = "http://"
	}
	return scheme + net.JoinHostPort(host, port)
}

// startHTTP binds and serves the HTTP listener, if on.
func (a *App) startHTTP() error {
	if a.http == nil {
		return nil
	}
	lis, err := net.Listen("tcp", a.cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s (MACP_HTTP_ADDR): %w", a.cfg.HTTP.Addr, err)
	}
	a.http.lis, a.http.served = lis, make(chan struct{})
	go func() {
		defer close(a.http.served)
		if err := a.http.srv.Serve(lis); err != nil {
			a.log.Error("HTTP listener stopped", "addr", lis.Addr().String(), "err", err)
		}
	}()
	a.log.Info("HTTP/SSE/WebSocket bindings listening", "addr", lis.Addr().String(), "tls", a.cfg.TLSCertPath != "")
	return nil
}

// shutdownHTTP drains the HTTP listener's streams and stops it.
func (a *App) shutdownHTTP(ctx context.Context) {
	if a.http == nil || a.http.lis == nil {
		return
	}
	if err := a.http.srv.Shutdown(ctx); err != nil {
		a.log.Warn("HTTP listener: requests cut short by shutdown", "err", err)
	}
	<-a.http.served
}

// HTTPAddr is the bound HTTP listener address, "" when it is off.
func (a *App) HTTPAddr() string {
	if a.http == nil || a.http.lis == nil {
		return ""
	}
	return a.http.lis.Addr().String()
}

// HTTP is the HTTP binding (nil when MACP_HTTP_ADDR is unset), to mount
// extra routes on before Start (httpapi.Server.Handle).
func (a *App) HTTP() *httpapi.Server {
	if a.http == nil {
		return nil
	}
	return a.http.srv
}

// mountSnapshots serves the snapshot routes (GET
// /macp/session/{id}/state-window, GET /macp/snapshots/{sha256:...}; see
// docs/snapshots.md) on the HTTP listener, authenticated by the binding
// and authorized as GetSession.
func (a *App) mountSnapshots() {
	srv := a.http.srv
	h := a.Snapshots().Handler(a.SnapshotAuthorize(func(r *http.Request) (coord.Identity, error) {
		id, _, cerr := srv.Identify(r, false, false)
		if cerr != nil {
			return coord.Identity{}, cerr
		}
		return id, nil
	}))
	srv.Handle("GET /macp/session/{id}/state-window", h)
	srv.Handle("GET /macp/snapshots/{addr}", h)
}
