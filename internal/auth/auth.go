package auth

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc/metadata"
)

// ErrNoCredentials means the request carries no credentials the
// authenticator understands.
var ErrNoCredentials = errors.New("auth: no credentials")

// Authenticator resolves request metadata to an identity. It must not keep
// md after Authenticate returns (AuthenticateIncoming reuses it).
type Authenticator interface {
	Authenticate(ctx context.Context, md metadata.MD) (coord.Identity, error)
}

// Headers are the metadata keys the authenticators of this package read.
// Every one of them takes a bearer token ("authorization") first and
// reads the other headers only when there is none (BearerToken), so
// AuthenticateIncoming looks the others up only then.
var Headers = []string{"authorization", "x-macp-agent-id", "x-macp-token"}

// mdPool recycles the small metadata maps AuthenticateIncoming builds.
var mdPool = sync.Pool{New: func() any { return make(metadata.MD, len(Headers)) }}

// AuthenticateIncoming runs a on the incoming request metadata under
// Headers, and nothing else: metadata.FromIncomingContext copies every
// header of every call (about 2% of the server's CPU at 64 concurrent
// sessions), and a map per call is most of what is left, so the map is
// recycled: authenticators must not keep md (the strings in it they may).
// When the call carries a bearer token the other headers are left out
// (each lookup walks the call's context chain), as no authenticator reads
// them then. A new authenticator that reads another header, or reads one
// despite a bearer token, must change Headers and this.
func AuthenticateIncoming(ctx context.Context, a Authenticator) (coord.Identity, error) {
	md := mdPool.Get().(metadata.MD)
	if v := metadata.ValueFromIncomingContext(ctx, Headers[0]); len(v) > 0 {
		md[Headers[0]] = v
	}
	if BearerToken(md) == "" {
		for _, k := range Headers[1:] {
			if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
				md[k] = v
			}
		}
	}
	id, err := a.Authenticate(ctx, md)
	clear(md)
	mdPool.Put(md)
	return id, err
}

// Chain tries authenticators in order.
type Chain []Authenticator

// Authenticate implements Authenticator.
func (c Chain) Authenticate(ctx context.Context, md metadata.MD) (coord.Identity, error) {
	for _, a := range c {
		id, err := a.Authenticate(ctx, md)
		if errors.Is(err, ErrNoCredentials) {
			continue
		}
		return id, err
	}
	return coord.Identity{}, ErrNoCredentials
}

// BearerToken returns the token of an "authorization: Bearer <token>"
// header, or "" if there is none.
func BearerToken(md metadata.MD) string {
	for _, v := range md.Get("authorization") {
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			return strings.TrimSpace(v[7:])
		}
	}
	return ""
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
func (d Dev) Authenticate(_ context.Context, md metadata.MD) (coord.Identity, error) {
	id := BearerToken(md)
	if id == "" {
		if v := md.Get("x-macp-agent-id"); len(v) > 0 {
			id = strings.TrimSpace(v[0])
		}
	}
	if id == "" {
		return coord.Identity{}, ErrNoCredentials
	}
	if !ValidSender(id) {
		return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "dev identity %q is not a valid sender id", id)
	}
	return coord.Identity{Sender: id, Caps: d.Caps}, nil
}
