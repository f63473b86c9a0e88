package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
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

func withPeer(ai credentials.AuthInfo) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: ai})
}

func verified(c *x509.Certificate) credentials.TLSInfo {
	return credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{c},
		VerifiedChains: [][]*x509.Certificate{{c}}}}
}

// MTLS takes the identity of a verified client certificate only.
func TestMTLS(t *testing.T) {
	m := MTLS{Caps: coord.Capabilities{IsObserver: true}}
	leaf := &x509.Certificate{URIs: []*url.URL{uri("spiffe://example.org/agent/a")}}
	id, err := m.Authenticate(withPeer(verified(leaf)), nil)
	if err != nil || id.Sender != "spiffe://example.org/agent/a" || !id.Caps.IsObserver {
		t.Fatalf("%+v %v", id, err)
	}
	// No peer, no TLS, or a certificate that was not verified: no credentials.
	unverified := credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}}
	for name, ctx := range map[string]context.Context{
		"no peer":    context.Background(),
		"no auth":    withPeer(nil),
		"not TLS":    withPeer(fakeAuthInfo{}),
		"no cert":    withPeer(credentials.TLSInfo{}),
		"unverified": withPeer(unverified),
	} {
		if _, err := m.Authenticate(ctx, nil); !errors.Is(err, ErrNoCredentials) {
			t.Errorf("%s: %v, want ErrNoCredentials", name, err)
		}
	}
	// A verified certificate without a usable name is refused.
	for name, c := range map[string]*x509.Certificate{
		"no name":  {},
		"reserved": {Subject: pkix.Name{CommonName: "_runtime"}},
	} {
		_, err := m.Authenticate(withPeer(verified(c)), nil)
		if coord.CodeOf(err) != coord.CodeUnauthenticated || errors.Is(err, ErrNoCredentials) {
			t.Errorf("%s: %v, want UNAUTHENTICATED", name, err)
		}
	}
}

type fakeAuthInfo struct{}

func (fakeAuthInfo) AuthType() string { return "fake" }
