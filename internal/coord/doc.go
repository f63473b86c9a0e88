// Package coord is the shared vocabulary of macpd: MACP error codes and the
// typed Error that carries them, well-known message types, protocol
// constants, identities and identifier rules.
//
// It depends on the standard library only and holds no state. Every other
// package speaks in these terms: the pure core (mode, policy, session)
// returns *Error values with a stable Code; the transports map Codes onto
// their own status space at the edge (RFC-MACP-0001 §8, error registry),
// all through one table (codetable.go: HTTP status, gRPC code as a number,
// WebSocket close code, retry class), which the Go SDK's copy is tested
// against.
package coord
