package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/macpd/macpd/internal/coord"
)

// JWT defaults.
const (
	// DefaultJWTLeeway is the clock skew tolerated on exp and nbf.
	DefaultJWTLeeway = 30 * time.Second
	// DefaultJWKSRefreshInterval is the least time between two JWKS fetches
	// other than the TTL's (a token with an unknown kid, a failed fetch).
	DefaultJWKSRefreshInterval = 10 * time.Second
	// DefaultJWKSFetchTimeout bounds one JWKS fetch.
	DefaultJWKSFetchTimeout = 10 * time.Second
	// maxJWKSBytes bounds a fetched JWKS document.
	maxJWKSBytes = 1 << 20
	// ScopesClaim is the claim carrying capabilities (the reference
	// runtime's macp_scopes object).
	ScopesClaim = "macp_scopes"
)

// JWTOptions configure NewJWT. Issuer and at least one key source (JWKSJSON,
// JWKSURL, or HS256Secret with AllowHS256) are required.
type JWTOptions struct {
	// Issuer is the required "iss" (MACP_AUTH_ISSUER).
	Issuer string
	// Audience is the required "aud" (MACP_AUTH_AUDIENCE).
	Audience string
	// JWKSJSON is an inline JWK Set (MACP_AUTH_JWKS_JSON).
	JWKSJSON string
	// JWKSURL is a JWK Set endpoint (MACP_AUTH_JWKS_URL), fetched when
	// first needed, cached for JWKSTTL and refetched early when a token
	// names an unknown kid (at most every RefreshInterval).
	JWKSURL string
	JWKSTTL time.Duration
	// SenderClaim names the claim holding the sender; default "sub".
	SenderClaim string
	// AllowHS256 accepts HS256 with HS256Secret and with "oct" keys of
	// JWKSJSON (never with keys fetched from JWKSURL).
	AllowHS256  bool
	HS256Secret []byte
	// HTTPClient fetches JWKSURL; default a client with FetchTimeout.
	HTTPClient *http.Client
	// Leeway defaults to DefaultJWTLeeway; RefreshInterval to
	// DefaultJWKSRefreshInterval; FetchTimeout to DefaultJWKSFetchTimeout.
	Leeway, RefreshInterval, FetchTimeout time.Duration
	Logger                                *slog.Logger
}

// JWT authenticates JWT bearer tokens ("authorization: Bearer <jwt>")
// signed with RS256 or ES256 (HS256 only when enabled). It verifies the
// signature with the key the token's kid names (any key of the token's
// algorithm when it names none), iss, aud, exp (required) and nbf, with a
// leeway. The sender is the SenderClaim claim and the capabilities come
// from the macp_scopes claim. Bearer values that are not JWT-shaped
// (three dot-separated parts whose first decodes to a JSON header with
// "alg") are left to the next authenticator.
type JWT struct {
	parser       *jwt.Parser
	senderClaim  string
	static       []jwk // from JWKSJSON and HS256Secret
	url          string
	client       *http.Client
	ttl          time.Duration
	minRefresh   time.Duration
	fetchTimeout time.Duration
	log          *slog.Logger
	now          func() time.Time

	fetched     atomic.Pointer[fetchedKeys]
	fetchMu     sync.Mutex // serializes fetches
	lastAttempt time.Time  // of the last fetch; under fetchMu
	fetches     atomic.Int64
}

type fetchedKeys struct {
	keys []jwk
	at   time.Time
}

// NewJWT validates the options and builds the authenticator. A malformed
// configuration (no issuer, no key source, bad inline JWKS, a short HS256
// secret, a bad URL) is an error; a JWKS URL is not contacted until the
// first token arrives, so an identity provider that is briefly down does
// not stop startup.
func NewJWT(o JWTOptions) (*JWT, error) {
	j := &JWT{
		senderClaim:  o.SenderClaim,
		url:          o.JWKSURL,
		client:       o.HTTPClient,
		ttl:          o.JWKSTTL,
		minRefresh:   o.RefreshInterval,
		fetchTimeout: o.FetchTimeout,
		log:          o.Logger,
		now:          time.Now,
	}
	if j.log == nil {
		j.log = slog.New(slog.DiscardHandler)
	}
	if j.senderClaim == "" {
		j.senderClaim = "sub"
	}
	if j.ttl <= 0 {
		j.ttl = 300 * time.Second
	}
	if j.minRefresh <= 0 {
		j.minRefresh = DefaultJWKSRefreshInterval
	}
	if j.fetchTimeout <= 0 {
		j.fetchTimeout = DefaultJWKSFetchTimeout
	}
	if j.client == nil {
		j.client = &http.Client{Timeout: j.fetchTimeout}
	}
	leeway := o.Leeway
	if leeway <= 0 {
		leeway = DefaultJWTLeeway
	}
	switch {
	case o.Issuer == "":
		return nil, errors.New("JWT authentication needs MACP_AUTH_ISSUER")
	case o.Audience == "":
		return nil, errors.New("JWT authentication needs an audience (MACP_AUTH_AUDIENCE)")
	case o.JWKSJSON != "" && o.JWKSURL != "":
		return nil, errors.New("MACP_AUTH_JWKS_JSON and MACP_AUTH_JWKS_URL are both set: use one")
	case len(o.HS256Secret) > 0 && !o.AllowHS256:
		return nil, errors.New("an HS256 secret is set but HS256 is not enabled (MACP_AUTH_ALLOW_HS256)")
	case len(o.HS256Secret) > 0 && len(o.HS256Secret) < minHS256Bytes:
		return nil, fmt.Errorf("the HS256 secret is %d bytes: at least %d are required", len(o.HS256Secret), minHS256Bytes)
	}
	if o.JWKSJSON != "" {
		keys, skipped, err := parseJWKS([]byte(o.JWKSJSON), o.AllowHS256, true)
		if err != nil {
			return nil, fmt.Errorf("MACP_AUTH_JWKS_JSON: %w", err)
		}
		for _, s := range skipped {
			j.log.Warn("JWT: MACP_AUTH_JWKS_JSON: " + s)
		}
		j.static = keys
	}
	if len(o.HS256Secret) > 0 {
		j.static = append(j.static, jwk{alg: algHS256, key: append([]byte(nil), o.HS256Secret...)})
	}
	if o.JWKSURL != "" {
		u, err := url.Parse(o.JWKSURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("MACP_AUTH_JWKS_URL %q is not an absolute http(s) URL", o.JWKSURL)
		}
		if u.Scheme == "http" && !isLoopback(u.Hostname()) {
			j.log.Warn("JWT: MACP_AUTH_JWKS_URL is plain http: whoever can tamper with that traffic can mint tokens; use https", "url", o.JWKSURL)
		}
	}
	if len(j.static) == 0 && o.JWKSURL == "" {
		return nil, errors.New("JWT authentication has no verification keys: set MACP_AUTH_JWKS_URL or MACP_AUTH_JWKS_JSON " +
			"(or MACP_AUTH_ALLOW_HS256 with MACP_AUTH_HS256_SECRET)")
	}
	methods := []string{algRS256, algES256}
	if o.AllowHS256 {
		methods = append(methods, algHS256)
	}
	j.parser = jwt.NewParser(
		jwt.WithValidMethods(methods),
		jwt.WithIssuer(o.Issuer),
		jwt.WithAudience(o.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(func() time.Time { return j.now() }),
	)
	j.log.Info("JWT bearer authentication configured", "issuer", o.Issuer, "audience", o.Audience,
		"algorithms", strings.Join(methods, ","), "jwks_url", o.JWKSURL, "inline_keys", len(j.static))
	return j, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// jwtShaped reports whether tok looks like a compact JWS: three
// dot-separated parts whose first is a base64url JSON object naming "alg".
func jwtShaped(tok string) bool {
	if strings.Count(tok, ".") != 2 {
		return false
	}
	hdr, err := base64.RawURLEncoding.DecodeString(tok[:strings.IndexByte(tok, '.')])
	if err != nil {
		return false
	}
	var h struct {
		Alg *string `json:"alg"`
	}
	return json.Unmarshal(hdr, &h) == nil && h.Alg != nil
}

// Authenticate implements Authenticator.
func (j *JWT) Authenticate(ctx context.Context, c *Credentials) (coord.Identity, error) {
	tok := c.BearerToken()
	if tok == "" || !jwtShaped(tok) {
		return coord.Identity{}, ErrNoCredentials
	}
	claims := jwt.MapClaims{}
	if _, err := j.parser.ParseWithClaims(tok, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		return j.verificationKeys(ctx, t.Method.Alg(), kid)
	}); err != nil {
		return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "invalid JWT: %s", jwtReason(err))
	}
	sender, _ := claims[j.senderClaim].(string)
	if sender == "" {
		return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "invalid JWT: no %q claim naming the sender", j.senderClaim)
	}
	if !ValidSender(sender) {
		return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "invalid JWT: %s %q is not a valid sender id", j.senderClaim, sender)
	}
	caps, err := scopesCaps(claims[ScopesClaim])
	if err != nil {
		return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "invalid JWT: %v", err)
	}
	return coord.Identity{Sender: sender, Caps: caps}, nil
}

// jwtReason is a short client-facing reason for a failed token.
func jwtReason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		// The keyfunc's own error says which key was missing.
		var uerr error = err
		if u, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range u.Unwrap() {
				if !errors.Is(e, jwt.ErrTokenUnverifiable) {
					uerr = e
				}
			}
		}
		return uerr.Error()
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if strings.Contains(err.Error(), "signing method") {
			return "signing algorithm not accepted"
		}
		return "signature is invalid"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token has expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token is not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "issuer is not accepted"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "audience is not accepted"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "a required claim (exp, iss or aud) is missing"
	}
	return err.Error()
}

// rawScopes is the macp_scopes claim (the reference runtime's format).
type rawScopes struct {
	AllowedModes          *[]string `json:"allowed_modes"`
	CanStartSessions      *bool     `json:"can_start_sessions"`
	MaxOpenSessions       *int      `json:"max_open_sessions"`
	CanManageModeRegistry *bool     `json:"can_manage_mode_registry"`
	IsObserver            *bool     `json:"is_observer"`
}

// scopesCaps maps a macp_scopes claim onto Capabilities. Absent, it grants
// the defaults (every mode, may start sessions, no registry management,
// not an observer). As in the reference runtime, an allowed_modes list that
// is present restricts modes even when empty (then no mode is allowed).
func scopesCaps(v any) (coord.Capabilities, error) {
	if v == nil {
		return coord.Capabilities{}, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return coord.Capabilities{}, fmt.Errorf("malformed %s claim", ScopesClaim)
	}
	var s rawScopes
	if err := json.Unmarshal(b, &s); err != nil {
		return coord.Capabilities{}, fmt.Errorf("malformed %s claim: %v", ScopesClaim, err)
	}
	if s.MaxOpenSessions != nil && *s.MaxOpenSessions < 0 {
		return coord.Capabilities{}, fmt.Errorf("malformed %s claim: negative max_open_sessions", ScopesClaim)
	}
	var modes []string
	if s.AllowedModes != nil {
		modes = *s.AllowedModes
	}
	deref := func(b *bool) bool { return b != nil && *b }
	return capsFromScopes(modes, s.AllowedModes == nil, s.CanStartSessions, s.MaxOpenSessions,
		deref(s.CanManageModeRegistry), deref(s.IsObserver)), nil
}

// verificationKeys returns the keys to verify a token of algorithm alg
// naming kid: the keys with that kid; failing that (after one rate-limited
// JWKS refresh when a URL is configured) the keys without a kid. A token
// without kid may be verified by any key of its algorithm.
func (j *JWT) verificationKeys(ctx context.Context, alg, kid string) (any, error) {
	keys := j.keys(ctx)
	if kid != "" && !hasKid(keys, alg, kid) && j.url != "" && j.refresh(ctx, true) {
		keys = j.keys(ctx)
	}
	var set jwt.VerificationKeySet
	for _, k := range keys {
		if k.alg == alg && (kid == "" || k.kid == kid) {
			set.Keys = append(set.Keys, k.key)
		}
	}
	if len(set.Keys) == 0 && kid != "" {
		for _, k := range keys {
			if k.alg == alg && k.kid == "" {
				set.Keys = append(set.Keys, k.key)
			}
		}
	}
	switch {
	case len(set.Keys) > 0:
		return set, nil
	case j.url != "" && j.fetched.Load() == nil:
		return nil, errors.New("verification keys are unavailable (the JWKS could not be fetched)")
	case kid != "":
		return nil, fmt.Errorf("no %s verification key with kid %q", alg, kid)
	}
	return nil, fmt.Errorf("no %s verification key", alg)
}

func hasKid(keys []jwk, alg, kid string) bool {
	for _, k := range keys {
		if k.alg == alg && k.kid == kid {
			return true
		}
	}
	return false
}

// keys returns the configured keys and the fetched ones, fetching the JWKS
// first when it was never fetched or its TTL has passed. Once the TTL has
// passed, one caller refreshes while others keep using the old keys.
func (j *JWT) keys(ctx context.Context) []jwk {
	if j.url == "" {
		return j.static
	}
	f := j.fetched.Load()
	switch {
	case f == nil:
		j.refresh(ctx, true)
	case j.now().Sub(f.at) >= j.ttl:
		j.refresh(ctx, false)
	}
	if f = j.fetched.Load(); f == nil {
		return j.static
	}
	if len(j.static) == 0 {
		return f.keys
	}
	return append(append([]jwk(nil), j.static...), f.keys...)
}

// refresh fetches the JWKS unless another fetch happened (or was tried)
// less than RefreshInterval ago. With wait, it waits for a fetch already
// in progress; without, it returns at once. It reports whether the key
// set changed while it ran.
func (j *JWT) refresh(ctx context.Context, wait bool) bool {
	before := j.fetched.Load()
	if wait {
		j.fetchMu.Lock()
	} else if !j.fetchMu.TryLock() {
		return false
	}
	defer j.fetchMu.Unlock()
	if j.fetched.Load() != before {
		return true // another caller fetched while this one waited
	}
	now := j.now()
	if !j.lastAttempt.IsZero() && now.Sub(j.lastAttempt) < j.minRefresh {
		return false
	}
	j.lastAttempt = now
	keys, err := j.fetch(ctx)
	if err != nil {
		j.log.Error("JWT: fetching the JWKS failed; keeping the keys in force", "url", j.url, "err", err)
		return false
	}
	j.fetched.Store(&fetchedKeys{keys: keys, at: now})
	return true
}

// fetch GETs and parses the JWKS. A caller that gives up does not abort
// the fetch others are waiting for; FetchTimeout bounds it.
func (j *JWT) fetch(ctx context.Context) ([]jwk, error) {
	j.fetches.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), j.fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("JWKS larger than %d bytes", maxJWKSBytes)
	}
	keys, skipped, err := parseJWKS(body, false, false)
	for _, s := range skipped {
		j.log.Debug("JWT: fetched JWKS: " + s)
	}
	if err != nil {
		return nil, err
	}
	j.log.Info("JWT: JWKS fetched", "url", j.url, "keys", len(keys))
	return keys, nil
}
