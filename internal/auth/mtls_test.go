package auth

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"testing"

	"github.com/macpd/macpd/internal/coord"
)

func uri(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// docs/security.md: the identity of a client certificate is its first URI
// SAN, else its first DNS SAN, else its subject CN.
func TestCertIdentity(t *testing.T) {
	for _, tc := range []struct {
		c    x509.Certificate
		want string
	}{
		{x509.Certificate{URIs: []*url.URL{uri("spiffe://example.org/agent/a"), uri("urn:x")}, DNSNames: []string{"a.example"},
			Subject: pkix.Name{CommonName: "cn"}}, "spiffe://example.org/agent/a"},
		{x509.Certificate{DNSNames: []string{"a.example", "b.example"}, Subject: pkix.Name{CommonName: "cn"}}, "a.example"},
		{x509.Certificate{Subject: pkix.Name{CommonName: "agent-7"}}, "agent-7"},
		{x509.Certificate{}, ""},
	} {
		if got := CertIdentity(&tc.c); got != tc.want {
			t.Errorf("CertIdentity = %q, want %q", got, tc.want)
		}
	}
}

func verified(c *x509.Certificate) *Credentials {
	return &Credentials{VerifiedChains: [][]*x509.Certificate{{c}}}
}

// MTLS takes the identity of a verified client certificate only.
func TestMTLS(t *testing.T) {
	m := MTLS{Caps: coord.Capabilities{IsObserver: true}}
	leaf := &x509.Certificate{URIs: []*url.URL{uri("spiffe://example.org/agent/a")}}
	ctx := context.Background()
	id, err := m.Authenticate(ctx, verified(leaf))
	if err != nil || id.Sender != "spiffe://example.org/agent/a" || !id.Caps.IsObserver {
		t.Fatalf("%+v %v", id, err)
	}
	// No credentials, no TLS, or a certificate that was not verified: no
	// credentials.
	for name, c := range map[string]*Credentials{
		"no credentials": nil,
		"no TLS":         creds("authorization", "Bearer alice"),
		"empty chain":    {VerifiedChains: [][]*x509.Certificate{{}}},
		"unverified":     {},
	} {
		if _, err := m.Authenticate(ctx, c); !errors.Is(err, ErrNoCredentials) {
			t.Errorf("%s: %v, want ErrNoCredentials", name, err)
		}
	}
	// A verified certificate without a usable name is refused.
	for name, c := range map[string]*x509.Certificate{
		"no name":  {},
		"reserved": {Subject: pkix.Name{CommonName: "_runtime"}},
	} {
		_, err := m.Authenticate(ctx, verified(c))
		if coord.CodeOf(err) != coord.CodeUnauthenticated || errors.Is(err, ErrNoCredentials) {
			t.Errorf("%s: %v, want UNAUTHENTICATED", name, err)
		}
	}
}
