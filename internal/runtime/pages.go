package runtime

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/listpage"
)

// ErrBadPageToken and ErrBadPageSize are ListSessionsPage's refusals
// (package listpage).
var (
	ErrBadPageToken = listpage.ErrBadToken
	ErrBadPageSize  = listpage.ErrBadSize
)

// ListSessionsPage is ListSessions one page at a time (macp-proto 0.1.6;
// package listpage: the order, the size rules and the opaque token).
func (r *Runtime) ListSessionsPage(ctx context.Context, id coord.Identity, size int32, token string) ([]*macpv1.SessionMetadata, string, error) {
	if size < 0 {
		return nil, "", ErrBadPageSize
	}
	return listpage.Page(r.ListSessions(ctx, id), size, token)
}

// Profile is the profile new sessions are bound to (Options.Limits.Profile
// resolved: coord.ProfileApril when unset).
func (r *Runtime) Profile() string {
	p, ok := coord.ResolveProfile(r.opts.Limits.Profile)
	if !ok {
		return r.opts.Limits.Profile
	}
	return p
}
