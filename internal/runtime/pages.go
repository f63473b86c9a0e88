package runtime

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
)

// MaxPageSize caps ListSessions page_size (macp-proto 0.1.6 pagination:
// "the server MAY cap it").
const MaxPageSize = 1000

// ErrBadPageToken is returned for a page token this runtime did not issue
// (the transports answer INVALID_ARGUMENT / 400).
var ErrBadPageToken = errors.New("runtime: page_token is not a token this runtime issued; start again with an empty page_token")

// ErrBadPageSize is returned for a negative page_size.
var ErrBadPageSize = errors.New("runtime: page_size must not be negative")

// pageTokenPrefix versions the token format.
const pageTokenPrefix = "p1:"

// ListSessionsPage is ListSessions one page at a time (macp-proto 0.1.6):
// the sessions the caller may see in ListSessions order (started_at, then
// session id), at most size of them after the position token names, and
// the token of the next page ("" on the last page). size 0 with an empty
// token returns every session in one page, as before pagination existed
// (clients of the April spec send neither field); size 0 with a token, or
// a size above MaxPageSize, uses MaxPageSize. The token is opaque to
// clients: it encodes the position (started_at and session id of the last
// session returned), so it stays valid as sessions are added and never
// repeats or skips a session that existed when the walk began.
func (r *Runtime) ListSessionsPage(ctx context.Context, id coord.Identity, size int32, token string) ([]*macpv1.SessionMetadata, string, error) {
	if size < 0 {
		return nil, "", ErrBadPageSize
	}
	var after *macpv1.SessionMetadata
	if token != "" {
		var ok bool
		if after, ok = decodePageToken(token); !ok {
			return nil, "", ErrBadPageToken
		}
	}
	all := r.ListSessions(ctx, id)
	if size == 0 && token == "" {
		return all, "", nil
	}
	n := int(size)
	if n == 0 || n > MaxPageSize {
		n = MaxPageSize
	}
	start := 0
	if after != nil {
		for start < len(all) && compareListed(all[start], after) <= 0 {
			start++
		}
	}
	end := min(start+n, len(all))
	page := all[start:end]
	next := ""
	if end < len(all) && len(page) > 0 {
		next = encodePageToken(page[len(page)-1])
	}
	return page, next, nil
}

func compareListed(a, b *macpv1.SessionMetadata) int {
	switch {
	case a.StartedAtUnixMs < b.StartedAtUnixMs:
		return -1
	case a.StartedAtUnixMs > b.StartedAtUnixMs:
		return 1
	}
	return strings.Compare(a.SessionId, b.SessionId)
}

func encodePageToken(last *macpv1.SessionMetadata) string {
	raw := pageTokenPrefix + strconv.FormatInt(last.StartedAtUnixMs, 10) + ":" + last.SessionId
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodePageToken(token string) (*macpv1.SessionMetadata, bool) {
	if len(token) > 512 {
		return nil, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return nil, false
	}
	rest, ok := strings.CutPrefix(string(raw), pageTokenPrefix)
	if !ok {
		return nil, false
	}
	ms, sid, ok := strings.Cut(rest, ":")
	if !ok || sid == "" {
		return nil, false
	}
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return nil, false
	}
	return &macpv1.SessionMetadata{StartedAtUnixMs: at, SessionId: sid}, true
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
