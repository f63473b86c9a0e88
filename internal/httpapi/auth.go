package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/coord"
)

// Identify authenticates r with the same authenticators as gRPC: the
// Authorization, X-MACP-Agent-Id and X-MACP-Token headers and the TLS
// client certificate chains the handshake verified are the request's
// auth.Credentials, so bearer tokens, JWTs, client certificates and dev
// identities work alike. When allowTicket is set and the request has no
// credentials, a ?ticket= from POST /macp/auth/ticket is redeemed (once).
// optional: a request without credentials is let through anonymous
// (ok=false, no error).
func (s *Server) Identify(r *http.Request, allowTicket, optional bool) (id coord.Identity, ok bool, cerr *coord.Error) {
	var c auth.Credentials
	auth.Collect(&c, r.Header.Values)
	if r.TLS != nil {
		c.VerifiedChains = r.TLS.VerifiedChains
	}
	id, err := s.auth.Authenticate(r.Context(), &c)
	switch {
	case err == nil:
		markAuthenticated(r)
		return id, true, nil
	case !errors.Is(err, auth.ErrNoCredentials):
		s.log.Info("http authentication failed", "path", r.URL.Path, "err", err)
		return coord.Identity{}, false, coord.AsErrorCode(err, coord.CodeUnauthenticated)
	}
	if t := r.URL.Query().Get("ticket"); allowTicket && t != "" {
		if id, ok := s.tickets.redeem(t); ok {
			markAuthenticated(r)
			return id, true, nil
		}
		return coord.Identity{}, false, coord.Errorf(coord.CodeUnauthenticated, "the ticket is unknown, used or expired; get a new one from POST /macp/auth/ticket")
	}
	if optional {
		return coord.Identity{}, false, nil
	}
	return coord.Identity{}, false, coord.Errorf(coord.CodeUnauthenticated, "credentials are required: send Authorization: Bearer <token>")
}

// tickets are short-lived single-use credentials for browsers, whose
// EventSource and WebSocket cannot send an Authorization header: the page
// POSTs its token once to /macp/auth/ticket and opens the stream with
// ?ticket=. A ticket names the identity it was issued to, is redeemed at
// most once and expires after its TTL, so a URL that ends up in a log or
// the browser history is worthless. Bounded: at most max outstanding,
// perIdentity per identity.
type tickets struct {
	ttl         time.Duration
	max         int
	perIdentity int
	now         func() time.Time

	mu    sync.Mutex
	byTok map[string]ticket
	count map[string]int // outstanding per sender
}

type ticket struct {
	id  coord.Identity
	exp time.Time
}

func newTickets(ttl time.Duration, max int, now func() time.Time) *tickets {
	return &tickets{ttl: ttl, max: max, perIdentity: 16, now: now, byTok: make(map[string]ticket), count: make(map[string]int)}
}

// issue returns a new ticket for id.
func (t *tickets) issue(id coord.Identity) (string, *coord.Error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", coord.Errorf(coord.CodeInternalError, "no randomness for a ticket")
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.byTok) >= t.max || t.count[id.Sender] >= t.perIdentity {
		t.sweepLocked(now)
	}
	if t.count[id.Sender] >= t.perIdentity {
		return "", coord.Errorf(coord.CodeRateLimited, "%s already holds %d unused tickets; use them or wait %v", id.Sender, t.perIdentity, t.ttl)
	}
	if len(t.byTok) >= t.max {
		return "", coord.Errorf(coord.CodeRateLimited, "too many outstanding tickets; retry in %v", t.ttl)
	}
	t.byTok[tok] = ticket{id: id, exp: now.Add(t.ttl)}
	t.count[id.Sender]++
	return tok, nil
}

func (t *tickets) sweepLocked(now time.Time) {
	for k, v := range t.byTok {
		if !now.Before(v.exp) {
			t.dropLocked(k, v)
		}
	}
}

func (t *tickets) dropLocked(tok string, v ticket) {
	delete(t.byTok, tok)
	if t.count[v.id.Sender]--; t.count[v.id.Sender] <= 0 {
		delete(t.count, v.id.Sender)
	}
}

// redeem consumes tok.
func (t *tickets) redeem(tok string) (coord.Identity, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.byTok[tok]
	if !ok {
		return coord.Identity{}, false
	}
	t.dropLocked(tok, v)
	if !t.now().Before(v.exp) {
		return coord.Identity{}, false
	}
	return v.id, true
}

// cors answers CORS for the configured origins and refuses requests from
// other origins: a request carrying an Origin header that is neither this
// server's own nor allowed gets 403 FORBIDDEN before any route runs (so a
// foreign page cannot use a browser's client certificate or a simple
// cross-origin POST).
type cors struct {
	any     bool
	allowed map[string]bool
}

func newCORS(origins []string) *cors {
	c := &cors{allowed: make(map[string]bool)}
	for _, o := range origins {
		if o == "*" {
			c.any = true
		}
		c.allowed[strings.TrimSuffix(o, "/")] = true
	}
	return c
}

// sameOrigin reports whether origin names the scheme and host r was sent
// to (https for a request over TLS, else http).
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) && strings.EqualFold(u.Scheme, scheme)
}

func (c *cors) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || sameOrigin(r, origin) {
			next.ServeHTTP(w, r)
			return
		}
		if !c.any && !c.allowed[origin] {
			WriteError(w, coord.Errorf(coord.CodeForbidden, "origin %s is not allowed (MACP_HTTP_CORS_ORIGINS)", origin))
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", HeaderSessionSeq+", "+HeaderResumeAfter)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, X-MACP-Agent-Id, X-MACP-Token")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unaryCtx bounds a non-streaming request.
func (s *Server) unaryCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.opts.UnaryTimeout)
}
