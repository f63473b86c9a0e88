package runtime

import (
	"crypto/rand"
	"encoding/base64"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
)

// NewSessionID returns a server-minted session id: 128 bits from the
// operating system's CSPRNG (crypto/rand), as 22 characters of unpadded
// base64url, the spec's unguessable form (coord.ValidSessionID;
// RFC-MACP-0004 §6).
func NewSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand: it panics or blocks instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// MintSessionID gives a SessionStart without session_id a server-minted
// one (NewSessionID), in place, and reports whether it did. Send calls it
// first, so every transport (gRPC Send and StreamSession, POST
// /macp/session/start and /macp/envelope, JSON-RPC session/start and
// macp/send) mints in this one place; the Ack's session_id returns the
// id. A client-chosen id is kept as it is: its unguessability is then the
// caller's responsibility (docs/resume.md "Session ids").
func MintSessionID(env *macpv1.Envelope) bool {
	if env == nil || env.MessageType != coord.TypeSessionStart || env.SessionId != "" {
		return false
	}
	env.SessionId = NewSessionID()
	return true
}
