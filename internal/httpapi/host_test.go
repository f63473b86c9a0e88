package httpapi_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/tlsconf/tlstest"
)

// hostReq sends GET path to base with the given Host and Origin ("" =
// none) as alice and returns the status and body.
func hostReq(t *testing.T, c *http.Client, base, path, host, origin string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// docs/security.md "HTTP listener" (issue 26 item 6, DNS rebinding): in
// development mode the listener serves its own address and the localhost
// forms only; a request for evil.example (a rebinding domain resolving to
// this server), same-origin by its own Origin, is refused; and the Origin
// check compares the scheme too.
func TestHostCheckRefusesRebinding(t *testing.T) {
	e := startAppTLS(t, testConfig())
	port := e.a.HTTPAddr()[strings.LastIndex(e.a.HTTPAddr(), ":"):]
	c := http.DefaultClient
	if code, b := hostReq(t, c, e.base, "/macp/sessions", "evil.example"+port, "http://evil.example"+port); code != http.StatusForbidden || !strings.Contains(b, "FORBIDDEN") {
		t.Fatalf("Host evil.example: %d %s", code, b)
	}
	for _, host := range []string{e.a.HTTPAddr(), "localhost" + port, "app.localhost" + port, "[::1]" + port} {
		if code, b := hostReq(t, c, e.base, "/macp/sessions", host, ""); code != http.StatusOK {
			t.Fatalf("Host %s: %d %s", host, code, b)
		}
	}
	// Same host, other scheme: not same-origin (and not an allowed origin).
	if code, b := hostReq(t, c, e.base, "/macp/sessions", e.a.HTTPAddr(), "https://"+e.a.HTTPAddr()); code != http.StatusForbidden {
		t.Fatalf("Origin with another scheme: %d %s", code, b)
	}
	if code, b := hostReq(t, c, e.base, "/macp/sessions", e.a.HTTPAddr(), "http://"+e.a.HTTPAddr()); code != http.StatusOK {
		t.Fatalf("same origin: %d %s", code, b)
	}
}

// In production (TLS, no dev identities) localhost names are not served
// unless configured; MACP_HTTP_HOSTS adds names (without a port: any
// port).
func TestHostCheckProductionList(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "macpd").Write(t, dir, "server")
	cfg := testConfig()
	cfg.AllowInsecure = false
	cfg.TLSCertPath, cfg.TLSKeyPath = cert, key
	cfg.Auth.TLSClientCAPath = ca.WriteCert(t, dir, "ca")
	cfg.Auth.TLSClientAuth = config.ClientAuthRequest
	cfg.HTTP.Hosts = "macp.example.com, other.example:1"
	e := startAppTLS(t, cfg)
	base := strings.Replace(e.base, "http://", "https://", 1)
	port := e.a.HTTPAddr()[strings.LastIndex(e.a.HTTPAddr(), ":"):]
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12, ServerName: "localhost"}}}
	for host, want := range map[string]int{
		"macp.example.com" + port: http.StatusOK,
		"MACP.example.com":        http.StatusOK,
		"other.example:1":         http.StatusOK,
		"other.example" + port:    http.StatusForbidden,
		"localhost" + port:        http.StatusForbidden,
		"evil.example" + port:     http.StatusForbidden,
		e.a.HTTPAddr():            http.StatusOK,
	} {
		if code, b := hostReq(t, c, base, "/.well-known/macp.json", host, ""); code != want {
			t.Errorf("Host %s: %d, want %d (%s)", host, code, want, b)
		}
	}
}
