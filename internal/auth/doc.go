// Package auth turns transport credentials into a coord.Identity
// (RFC-MACP-0004 §3-4). The envelope sender is always the identity an
// Authenticator returns, never what a client asserts.
//
// Authenticators are tried in order by a Chain. Each answers one of:
// an Identity; ErrNoCredentials (the request carries nothing this
// authenticator understands, so the next one may try); or an error with
// code UNAUTHENTICATED (credentials it understands but rejects — the chain
// stops there).
package auth
