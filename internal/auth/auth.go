package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"

	"github.com/macpd/macpd/internal/coord"
)

// ErrNoCredentials means the request carries no credentials the
// authenticator understands.
var ErrNoCredentials = errors.New("auth: no credentials")

// Credentials are what a request presents, whatever its transport: the
// values of the headers the authenticators read (Headers) and the client
// certificate chains the TLS handshake verified. Each binding builds them
// from its own request (Collect for the headers); the authenticators see
// nothing else.
type Credentials struct {
	// Authorization holds the values of the authorization header.
	Authorization []string
	// AgentID holds the values of the x-macp-agent-id header.
	AgentID []string
	// Token holds the values of the x-macp-token header.
	Token []string
	// VerifiedChains are the client certificate chains the TLS handshake
	// verified (tls.ConnectionState.VerifiedChains); nil without TLS or
	// without a verified client certificate.
	VerifiedChains [][]*x509.Certificate
}

// Authenticator resolves a request's credentials to an identity. It must
// not keep c after Authenticate returns (bindings may reuse it); the
// strings in it it may keep. c may be nil: no credentials.
type Authenticator interface {
	Authenticate(ctx context.Context, c *Credentials) (coord.Identity, error)
}

// Headers are the header (metadata) keys the authenticators of this
// package read, in the order Collect looks them up. Every one of them
// takes a bearer token ("authorization") first and reads the other
// headers only when there is none (BearerToken), so Collect looks the
// others up only then.
var Headers = []string{"authorization", "x-macp-agent-id", "x-macp-token"}

// Collect fills c's header fields from values, which returns the values
// of a request header by its lower-case name (gRPC metadata, or an HTTP
// header, which is case-insensitive). When the request carries a bearer
// token the other headers are left out (a lookup may cost: gRPC walks the
// call's context chain for each), as no authenticator reads them then. A
// new authenticator that reads another header, or reads one despite a
// bearer token, must change Credentials, Headers and this.
func Collect(c *Credentials, values func(key string) []string) {
	c.Authorization = values(Headers[0])
	if c.BearerToken() != "" {
		return
	}
	c.AgentID = values(Headers[1])
	c.Token = values(Headers[2])
}

// Chain tries authenticators in order.
type Chain []Authenticator

// Authenticate implements Authenticator.
func (c Chain) Authenticate(ctx context.Context, cr *Credentials) (coord.Identity, error) {
	for _, a := range c {
		id, err := a.Authenticate(ctx, cr)
		if errors.Is(err, ErrNoCredentials) {
			continue
		}
		return id, err
	}
	return coord.Identity{}, ErrNoCredentials
}

// BearerToken returns the token of an "authorization: Bearer <token>"
// header, or "" if there is none (or c is nil).
func (c *Credentials) BearerToken() string {
	if c == nil {
		return ""
	}
	return BearerToken(c.Authorization)
}

// BearerToken returns the token of the first "Bearer <token>" among the
// values of an authorization header, or "" if there is none.
func BearerToken(authorization []string) string {
	for _, v := range authorization {
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			return strings.TrimSpace(v[7:])
		}
	}
	return ""
}

// first returns the first of vals, trimmed, or "".
func first(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	return strings.TrimSpace(vals[0])
}

// ValidSender reports whether s can be an authenticated sender id: non-empty,
// at most 256 bytes, valid UTF-8 (it travels in proto3 string fields, which
// refuse anything else), printable, no surrounding space, and not starting
// with '_' (reserved for the runtime's own envelopes, coord.RuntimeSender).
func ValidSender(s string) bool { return coord.ValidAgentID(s) }

// Dev is the development authenticator: the bearer token (or the
// x-macp-agent-id header) IS the agent id. It must only be enabled with the
// insecure switch; anyone can claim any identity with it.
type Dev struct {
	// Caps are granted to every dev identity.
	Caps coord.Capabilities
}

// Authenticate implements Authenticator.
func (d Dev) Authenticate(_ context.Context, c *Credentials) (coord.Identity, error) {
	id := c.BearerToken()
	if id == "" && c != nil {
		id = first(c.AgentID)
	}
	if id == "" {
		return coord.Identity{}, ErrNoCredentials
	}
	if !ValidSender(id) {
		return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "dev identity %q is not a valid sender id", id)
	}
	return coord.Identity{Sender: id, Caps: d.Caps}, nil
}
