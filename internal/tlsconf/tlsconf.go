// Package tlsconf builds macpd's server TLS configuration (RFC-MACP-0004 §2:
// TLS 1.2 or higher): the key pair from MACP_TLS_CERT_PATH and
// MACP_TLS_KEY_PATH, optional client-certificate verification against
// MACP_TLS_CLIENT_CA_PATH (MACP_TLS_CLIENT_AUTH none|request|require), and
// reload without restart: the files are checked for changes (modification
// time and size) at most every CheckInterval, on the next handshake after
// it, and new connections use the new files. A changed set that fails to
// load (a half-written key, a certificate that does not match its key, a
// CA file without certificates) keeps the previous configuration in force
// and is logged; startup, in contrast, fails on any bad file.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpd/macpd/internal/config"
	"google.golang.org/grpc/credentials"
)

// DefaultCheckInterval is how often the files are checked for changes.
const DefaultCheckInterval = 5 * time.Second

// Options configure New.
type Options struct {
	CertPath, KeyPath string
	// ClientCAPath holds PEM CA certificates client certificates are
	// verified against; required unless ClientAuth is none or "".
	ClientCAPath string
	// ClientAuth is config.ClientAuthNone (or ""), ClientAuthRequest
	// (verify a certificate when the client sends one) or
	// ClientAuthRequire (a verified certificate is required).
	ClientAuth string
	// CheckInterval defaults to DefaultCheckInterval; negative disables
	// reloading.
	CheckInterval time.Duration
	Logger        *slog.Logger
}

// Server is a reloading server TLS configuration.
type Server struct {
	o         Options
	mode      tls.ClientAuthType
	log       *slog.Logger
	now       func() time.Time
	cur       atomic.Pointer[tls.Config]
	lastCheck atomic.Int64 // unix nanoseconds
	mu        sync.Mutex   // held while checking the files
	stamps    []stamp      // of the files as last loaded (or tried); under mu
	statErr   bool         // under mu
}

type stamp struct {
	mod  time.Time
	size int64
}

// New loads the files; any problem is an error.
func New(o Options) (*Server, error) {
	s := &Server{o: o, log: o.Logger, now: time.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.o.CheckInterval == 0 {
		s.o.CheckInterval = DefaultCheckInterval
	}
	if o.CertPath == "" || o.KeyPath == "" {
		return nil, errors.New("TLS needs both MACP_TLS_CERT_PATH and MACP_TLS_KEY_PATH")
	}
	switch o.ClientAuth {
	case "", config.ClientAuthNone:
		s.mode = tls.NoClientCert
		if o.ClientCAPath != "" {
			return nil, errors.New("MACP_TLS_CLIENT_CA_PATH is set but MACP_TLS_CLIENT_AUTH is none")
		}
	case config.ClientAuthRequest:
		s.mode = tls.VerifyClientCertIfGiven
	case config.ClientAuthRequire:
		s.mode = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("MACP_TLS_CLIENT_AUTH %q: use none, request or require", o.ClientAuth)
	}
	if s.mode != tls.NoClientCert && o.ClientCAPath == "" {
		return nil, fmt.Errorf("MACP_TLS_CLIENT_AUTH %s needs MACP_TLS_CLIENT_CA_PATH", o.ClientAuth)
	}
	st, err := s.stat()
	if err != nil {
		return nil, err
	}
	c, err := s.load()
	if err != nil {
		return nil, err
	}
	s.stamps = st
	s.cur.Store(c)
	s.lastCheck.Store(s.now().UnixNano())
	return s, nil
}

// FromConfig builds the server TLS configuration cfg asks for.
func FromConfig(cfg config.Config, log *slog.Logger) (*Server, error) {
	return New(Options{
		CertPath:     cfg.TLSCertPath,
		KeyPath:      cfg.TLSKeyPath,
		ClientCAPath: cfg.Auth.TLSClientCAPath,
		ClientAuth:   cfg.Auth.EffectiveClientAuth(),
		Logger:       log,
	})
}

func (s *Server) paths() []string {
	p := []string{s.o.CertPath, s.o.KeyPath}
	if s.o.ClientCAPath != "" {
		p = append(p, s.o.ClientCAPath)
	}
	return p
}

func (s *Server) stat() ([]stamp, error) {
	var out []stamp
	for _, p := range s.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out = append(out, stamp{fi.ModTime(), fi.Size()})
	}
	return out, nil
}

// load reads the files into a per-handshake configuration.
func (s *Server) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(s.o.CertPath, s.o.KeyPath)
	if err != nil {
		return nil, fmt.Errorf("loading the TLS key pair (MACP_TLS_CERT_PATH %s, MACP_TLS_KEY_PATH %s): %w", s.o.CertPath, s.o.KeyPath, err)
	}
	if cert.Leaf != nil && s.now().After(cert.Leaf.NotAfter) {
		s.log.Warn("the TLS certificate has expired", "file", s.o.CertPath, "not_after", cert.Leaf.NotAfter)
	}
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// gRPC requires HTTP/2 by ALPN; grpc-go only adds "h2" to the outer
		// configuration, not to one returned by GetConfigForClient.
		NextProtos: []string{"h2"},
		ClientAuth: s.mode,
	}
	if s.o.ClientCAPath != "" {
		pem, err := os.ReadFile(s.o.ClientCAPath)
		if err != nil {
			return nil, fmt.Errorf("MACP_TLS_CLIENT_CA_PATH: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("MACP_TLS_CLIENT_CA_PATH %s holds no PEM certificate", s.o.ClientCAPath)
		}
		c.ClientCAs = pool
	}
	return c, nil
}

// Config is the server tls.Config: TLS 1.2 or higher, with the current
// files chosen per handshake.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.maybeReload()
			return s.cur.Load(), nil
		},
	}
}

// Credentials are gRPC server credentials over Config.
func (s *Server) Credentials() credentials.TransportCredentials {
	return credentials.NewTLS(s.Config())
}

// Current is the configuration in force (for tests and diagnostics).
func (s *Server) Current() *tls.Config { return s.cur.Load() }

func (s *Server) maybeReload() {
	if s.o.CheckInterval < 0 {
		return
	}
	now := s.now().UnixNano()
	if now-s.lastCheck.Load() < int64(s.o.CheckInterval) || !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if now-s.lastCheck.Load() < int64(s.o.CheckInterval) {
		return
	}
	s.lastCheck.Store(now)
	s.reloadLocked()
}

// reloadLocked loads the files if any changed; a failure keeps the
// configuration in force and is logged once per changed version.
func (s *Server) reloadLocked() {
	st, err := s.stat()
	if err != nil {
		if !s.statErr {
			s.log.Error("TLS: cannot stat the certificate files; keeping the configuration in force", "err", err)
			s.statErr = true
		}
		return
	}
	s.statErr = false
	if equalStamps(st, s.stamps) {
		return
	}
	s.stamps = st
	c, err := s.load()
	if err != nil {
		s.log.Error("TLS: the changed certificate files do not load; keeping the configuration in force", "err", err)
		return
	}
	s.cur.Store(c)
	s.log.Info("TLS: certificate files reloaded", "cert", s.o.CertPath)
}

func equalStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}
