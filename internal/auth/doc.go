// Package auth turns transport credentials into a coord.Identity
// (RFC-MACP-0004 §3-4). The envelope sender is always the identity an
// Authenticator returns, never what a client asserts.
//
// Authentication is transport-neutral: an Authenticator reads a
// Credentials, the values of the headers it understands (Headers) and the
// client certificate chains the TLS handshake verified. Each binding
// builds them from its own request (internal/server from the gRPC
// metadata and peer, internal/httpapi from the HTTP headers and TLS
// state, both through Collect); this package imports no transport.
//
// Authenticators are tried in order by a Chain. Each answers one of:
// an Identity; ErrNoCredentials (the request carries nothing this
// authenticator understands, so the next one may try); or an error with
// code UNAUTHENTICATED (credentials it understands but rejects — the chain
// stops there).
//
// The authenticators are JWT (JWT bearer tokens verified against a JWKS),
// Tokens (opaque bearer tokens from a static list, also read from
// x-macp-token), MTLS (the verified TLS client certificate) and Dev (the
// bearer value or x-macp-agent-id is the agent id; development only).
// FromConfig builds the chain from the configuration in that order, Dev
// last; docs/security.md describes the settings and the order.
package auth
