package auth

import (
	"context"
	"crypto/x509"

	"github.com/macpd/macpd/internal/coord"
)

// MTLS authenticates callers by the client certificate the TLS handshake
// verified (MACP_TLS_CLIENT_CA_PATH with MACP_TLS_CLIENT_AUTH request or
// require; see internal/tlsconf). The sender is CertIdentity of the leaf
// certificate. A connection without a verified client certificate has no
// credentials for it (the next authenticator may try).
type MTLS struct {
	// Caps are granted to every certificate identity.
	Caps coord.Capabilities
}

// Authenticate implements Authenticator.
func (m MTLS) Authenticate(_ context.Context, c *Credentials) (coord.Identity, error) {
	if c == nil || len(c.VerifiedChains) == 0 || len(c.VerifiedChains[0]) == 0 {
		return coord.Identity{}, ErrNoCredentials
	}
	leaf := c.VerifiedChains[0][0]
	id := CertIdentity(leaf)
	if id == "" {
		return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "the client certificate names no identity (no URI or DNS SAN, no CN)")
	}
	if !ValidSender(id) {
		return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "client certificate identity %q is not a valid sender id", id)
	}
	return coord.Identity{Sender: id, Caps: m.Caps}, nil
}

// CertIdentity is the identity a client certificate names: its first URI
// SAN (e.g. a SPIFFE id, spiffe://example.org/agent/a), else its first DNS
// SAN, else its subject common name; "" if it has none of these.
func CertIdentity(c *x509.Certificate) string {
	if len(c.URIs) > 0 && c.URIs[0] != nil {
		return c.URIs[0].String()
	}
	if len(c.DNSNames) > 0 {
		return c.DNSNames[0]
	}
	return c.Subject.CommonName
}
