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

// RFC-MACP-0006 TRN-1 / RFC-MACP-0004: the HTTP listener serves TLS with
// the gRPC listener's certificate, and a verified client certificate is an
// identity there as on gRPC (mTLS); without one, a request has no
// credentials.
func TestHTTPSWithClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "macpd").Write(t, dir, "server")
	cfg := testConfig()
	cfg.AllowInsecure = false
	cfg.TLSCertPath, cfg.TLSKeyPath = cert, key
	cfg.Auth.TLSClientCAPath = ca.WriteCert(t, dir, "ca")
	cfg.Auth.TLSClientAuth = config.ClientAuthRequest
	e := startAppTLS(t, cfg)
	client := func(leaf *tlstest.Leaf) *http.Client {
		tc := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
		if leaf != nil {
			tc.Certificates = []tls.Certificate{leaf.TLSCertificate(t)}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	alice := client(ca.Client(t, "alice", nil, nil))
	get := func(c *http.Client, path string) (int, string) {
		resp, err := c.Get(strings.Replace(e.base, "http://", "https://", 1) + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := get(alice, "/macp/sessions"); code != 200 {
		t.Fatalf("alice by client certificate: %d %s", code, b)
	}
	if code, b := get(client(nil), "/macp/sessions"); code != 401 || !strings.Contains(b, "UNAUTHENTICATED") {
		t.Fatalf("no client certificate: %d %s", code, b)
	}
	if code, b := get(client(nil), "/.well-known/macp.json"); code != 200 || !strings.Contains(b, "https://") || !strings.Contains(b, "wss://") {
		t.Fatalf("manifest over TLS: %d %s", code, b)
	}
	// Plain HTTP to the TLS listener is refused.
	resp, err := http.Get(e.base + "/macp/modes")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plaintext request served by the TLS listener")
		}
	}
}
