package tlsconf

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/tlsconf/tlstest"
)

// serve accepts TLS connections with cfg on 127.0.0.1:0 until the test
// ends; each accepted connection completes its handshake, sends one byte
// and is closed.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err == nil {
					_, _ = c.Write([]byte{1})
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// dial connects, reads the server's byte and returns the connection state.
func dial(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// With TLS 1.3 a refused client certificate shows on the first read.
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return tls.ConnectionState{}, err
	}
	return c.ConnectionState(), nil
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// lockedBuf is a log sink safe for the server goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// RFC-MACP-0004 §2 (checklist SEC-1): TLS 1.2 or higher; the served
// certificate is the configured one and h2 is negotiated for gRPC.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t, "server-1").Write(t, dir, "server")
	s, err := New(Options{CertPath: cert, KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	if s.Config().MinVersion != tls.VersionTLS12 || s.Current().MinVersion != tls.VersionTLS12 {
		t.Fatal("MinVersion is not TLS 1.2")
	}
	addr := serve(t, s.Config())
	st, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if cn := st.PeerCertificates[0].Subject.CommonName; cn != "server-1" || st.NegotiatedProtocol != "h2" {
		t.Fatalf("served %s, alpn %q", cn, st.NegotiatedProtocol)
	}
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("TLS 1.1 accepted")
	}
	st, err = dial(addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12})
	if err != nil || st.Version != tls.VersionTLS12 {
		t.Fatalf("TLS 1.2: %v", err)
	}
}

// tlsconf doc: the files are re-read when they change (checked at most
// every CheckInterval); new connections get the new certificate; a bad new
// pair keeps the old one and is logged; a later good pair is picked up.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t, "server-1").Write(t, dir, "server")
	var logs lockedBuf
	s, err := New(Options{CertPath: cert, KeyPath: key, CheckInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Now()}
	s.now = clk.now
	s.lastCheck.Store(clk.now().UnixNano())
	addr := serve(t, s.Config())
	client := &tls.Config{RootCAs: ca.Pool()}
	served := func() string {
		t.Helper()
		st, err := dial(addr, client)
		if err != nil {
			t.Fatal(err)
		}
		return st.PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "server-1" {
		t.Fatalf("served %s", cn)
	}

	// Swap the files: not picked up before the interval, then picked up.
	ca.Server(t, "server-2").Write(t, dir, "server")
	if cn := served(); cn != "server-1" {
		t.Fatalf("reloaded before the check interval: %s", cn)
	}
	clk.add(time.Hour)
	if cn := served(); cn != "server-2" {
		t.Fatalf("after swap: served %s", cn)
	}

	// A key that does not match the certificate: the old pair stays.
	other := ca.Server(t, "server-3")
	if err := os.WriteFile(cert, other.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Hour)
	if cn := served(); cn != "server-2" {
		t.Fatalf("after a bad pair: served %s", cn)
	}
	if !strings.Contains(logs.String(), "keeping the configuration in force") {
		t.Fatalf("bad pair not logged: %s", logs.String())
	}
	// The key follows (rotation written in two steps): picked up.
	if err := os.WriteFile(key, other.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Hour)
	if cn := served(); cn != "server-3" {
		t.Fatalf("after the key: served %s", cn)
	}
	// Files removed: the configuration in force stays.
	if err := os.Remove(cert); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Hour)
	if cn := served(); cn != "server-3" {
		t.Fatalf("after removal: served %s", cn)
	}
}

// Reloading with the real clock and the default-style interval: a swap is
// seen by a new connection once the interval has passed.
func TestReloadRealClock(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t, "old").Write(t, dir, "server")
	s, err := New(Options{CertPath: cert, KeyPath: key, CheckInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config())
	ca.Server(t, "new").Write(t, dir, "server")
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := dial(addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		if st.PeerCertificates[0].Subject.CommonName == "new" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("new certificate never served")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// MACP_TLS_CLIENT_AUTH=require: a client certificate issued by the client
// CA is required and verified.
func TestClientAuthRequire(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "server-ca")
	clientCA := tlstest.NewCA(t, "client-ca")
	cert, key := ca.Server(t, "server").Write(t, dir, "server")
	s, err := New(Options{CertPath: cert, KeyPath: key, ClientCAPath: clientCA.WriteCert(t, dir, "clients.pem"), ClientAuth: config.ClientAuthRequire})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config())
	good := clientCA.Client(t, "agent-a", []string{"spiffe://example.org/agent/a"}, nil).TLSCertificate(t)
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{good}}); err != nil {
		t.Fatalf("verified client: %v", err)
	}
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool()}); err == nil {
		t.Fatal("no client certificate accepted")
	}
	// Issued by another CA.
	bad := ca.Client(t, "agent-b", nil, nil).TLSCertificate(t)
	force := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &bad, nil }
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), GetClientCertificate: force}); err == nil {
		t.Fatal("client certificate from an untrusted CA accepted")
	}
}

// MACP_TLS_CLIENT_AUTH=request: a client certificate is optional, but one
// that is sent must verify.
func TestClientAuthRequest(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t, "server").Write(t, dir, "server")
	s, err := New(Options{CertPath: cert, KeyPath: key, ClientCAPath: ca.WriteCert(t, dir, "ca.pem"), ClientAuth: config.ClientAuthRequest})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config())
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool()}); err != nil {
		t.Fatalf("no client certificate: %v", err)
	}
	good := ca.Client(t, "agent-a", nil, nil).TLSCertificate(t)
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{good}}); err != nil {
		t.Fatalf("verified client: %v", err)
	}
	// crypto/tls clients only send a certificate from a CA the server
	// names; force it.
	bad := tlstest.NewCA(t, "other").Client(t, "x", nil, nil).TLSCertificate(t)
	force := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &bad, nil }
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), GetClientCertificate: force}); err == nil {
		t.Fatal("unverifiable client certificate accepted")
	}
}

// Startup fails on any bad file or option, naming the setting.
func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t, "server").Write(t, dir, "server")
	otherCert, _ := ca.Server(t, "other").Write(t, dir, "other")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	caPath := ca.WriteCert(t, dir, "ca.pem")
	for name, tc := range map[string]struct {
		o    Options
		want string
	}{
		"missing cert":       {Options{CertPath: filepath.Join(dir, "nope"), KeyPath: key}, "no such file"},
		"no key path":        {Options{CertPath: cert}, "MACP_TLS_KEY_PATH"},
		"mismatched key":     {Options{CertPath: otherCert, KeyPath: key}, "MACP_TLS_CERT_PATH"},
		"not PEM":            {Options{CertPath: notPEM, KeyPath: key}, "MACP_TLS_CERT_PATH"},
		"CA without PEM":     {Options{CertPath: cert, KeyPath: key, ClientCAPath: notPEM, ClientAuth: "require"}, "MACP_TLS_CLIENT_CA_PATH"},
		"require without CA": {Options{CertPath: cert, KeyPath: key, ClientAuth: "require"}, "MACP_TLS_CLIENT_CA_PATH"},
		"CA with none":       {Options{CertPath: cert, KeyPath: key, ClientCAPath: caPath, ClientAuth: "none"}, "MACP_TLS_CLIENT_AUTH"},
		"bad mode":           {Options{CertPath: cert, KeyPath: key, ClientCAPath: caPath, ClientAuth: "always"}, "MACP_TLS_CLIENT_AUTH"},
	} {
		_, err := New(tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want mention of %s", name, err, tc.want)
		}
	}
}

// FromConfig maps the settings, with require as the default mode once a
// client CA is set.
func TestFromConfig(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.TLSCertPath, cfg.TLSKeyPath = ca.Server(t, "server").Write(t, dir, "server")
	s, err := FromConfig(cfg, nil)
	if err != nil || s.Current().ClientAuth != tls.NoClientCert {
		t.Fatalf("%v", err)
	}
	cfg.Auth.TLSClientCAPath = ca.WriteCert(t, dir, "ca.pem")
	s, err = FromConfig(cfg, nil)
	if err != nil || s.Current().ClientAuth != tls.RequireAndVerifyClientCert || s.Current().ClientCAs == nil {
		t.Fatalf("%v", err)
	}
	cfg.Auth.TLSClientAuth = config.ClientAuthRequest
	if s, err = FromConfig(cfg, nil); err != nil || s.Current().ClientAuth != tls.VerifyClientCertIfGiven {
		t.Fatalf("%v", err)
	}
}
