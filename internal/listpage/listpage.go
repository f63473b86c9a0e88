// Package listpage pages the session list (macp-proto 0.1.6 ListSessions
// pagination): a pure function of the listed sessions, the page size and
// an opaque position token. Clients of the April spec send neither field
// and get every session in one page.
//
// The token encodes the position (started_at and session id of the last
// session returned), not an offset, so it stays valid as sessions are
// added and never repeats or skips a session that existed when the walk
// began. It is versioned ("p1:") and refused when this package did not
// issue it.
package listpage

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// MaxSize caps page_size ("the server MAY cap it").
const MaxSize = 1000

// ErrBadToken is returned for a page token this package did not issue
// (the transports answer INVALID_ARGUMENT / 400).
var ErrBadToken = errors.New("page_token is not a token this runtime issued; start again with an empty page_token")

// ErrBadSize is returned for a negative page_size.
var ErrBadSize = errors.New("page_size must not be negative")

// tokenPrefix versions the token format.
const tokenPrefix = "p1:"

// Page returns the sessions of all (in ListSessions order: started_at,
// then session id) after the position token names, at most size of them,
// and the token of the next page ("" on the last page). size 0 with an
// empty token returns all in one page; size 0 with a token, or a size
// above MaxSize, uses MaxSize.
func Page(all []*macpv1.SessionMetadata, size int32, token string) ([]*macpv1.SessionMetadata, string, error) {
	if size < 0 {
		return nil, "", ErrBadSize
	}
	var after *macpv1.SessionMetadata
	if token != "" {
		var ok bool
		if after, ok = decodeToken(token); !ok {
			return nil, "", ErrBadToken
		}
	}
	if size == 0 && token == "" {
		return all, "", nil
	}
	n := int(size)
	if n == 0 || n > MaxSize {
		n = MaxSize
	}
	start := 0
	if after != nil {
		for start < len(all) && compare(all[start], after) <= 0 {
			start++
		}
	}
	end := min(start+n, len(all))
	page := all[start:end]
	next := ""
	if end < len(all) && len(page) > 0 {
		next = encodeToken(page[len(page)-1])
	}
	return page, next, nil
}

// compare orders sessions as ListSessions lists them.
func compare(a, b *macpv1.SessionMetadata) int {
	switch {
	case a.StartedAtUnixMs < b.StartedAtUnixMs:
		return -1
	case a.StartedAtUnixMs > b.StartedAtUnixMs:
		return 1
	}
	return strings.Compare(a.SessionId, b.SessionId)
}

func encodeToken(last *macpv1.SessionMetadata) string {
	raw := tokenPrefix + strconv.FormatInt(last.StartedAtUnixMs, 10) + ":" + last.SessionId
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeToken(token string) (*macpv1.SessionMetadata, bool) {
	if len(token) > 512 {
		return nil, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return nil, false
	}
	rest, ok := strings.CutPrefix(string(raw), tokenPrefix)
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
