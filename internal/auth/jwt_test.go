package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/macpd/macpd/internal/coord"
)

const (
	testIssuer   = "https://issuer.test"
	testAudience = "macp-runtime"
)

var (
	rsaOnce sync.Once
	rsaKeys [2]*rsa.PrivateKey
)

// rsaKey returns one of two 2048-bit RSA keys generated once per run.
func testRSAKey(t *testing.T, i int) *rsa.PrivateKey {
	t.Helper()
	rsaOnce.Do(func() {
		for j := range rsaKeys {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			rsaKeys[j] = k
		}
	})
	return rsaKeys[i]
}

func testECKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PublicKey) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]any {
	b, err := k.Bytes() // uncompressed point 04 || X || Y
	if err != nil {
		panic(err)
	}
	return map[string]any{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(b[1:33]), "y": b64(b[33:65])}
}

func octJWK(kid string, secret []byte) map[string]any {
	return map[string]any{"kty": "oct", "kid": kid, "k": b64(secret)}
}

func jwks(keys ...map[string]any) string {
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// claims returns valid claims for sub, expiring in 5 minutes.
func claims(sub string) jwt.MapClaims {
	return jwt.MapClaims{"iss": testIssuer, "aud": testAudience, "sub": sub,
		"exp": time.Now().Add(5 * time.Minute).Unix(), "iat": time.Now().Unix()}
}

func sign(t *testing.T, m jwt.SigningMethod, kid string, c jwt.MapClaims, key any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func bearer(tok string) *Credentials { return creds("authorization", "Bearer "+tok) }

func newJWT(t *testing.T, o JWTOptions) *JWT {
	t.Helper()
	if o.Issuer == "" {
		o.Issuer = testIssuer
	}
	if o.Audience == "" {
		o.Audience = testAudience
	}
	j, err := NewJWT(o)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func wantUnauth(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if coord.CodeOf(err) != coord.CodeUnauthenticated || errors.Is(err, ErrNoCredentials) {
		t.Errorf("%s: %v, want UNAUTHENTICATED", what, err)
		return
	}
	if msg != "" && !strings.Contains(err.Error(), msg) {
		t.Errorf("%s: %v, want a message containing %q", what, err, msg)
	}
}

// checklist SEC-2: RS256 and ES256 JWTs verified against an inline JWKS;
// the sender is "sub"; no macp_scopes grants the defaults.
func TestJWTValid(t *testing.T) {
	rk, ek := testRSAKey(t, 0), testECKey(t)
	j := newJWT(t, JWTOptions{JWKSJSON: jwks(rsaJWK("r1", &rk.PublicKey), ecJWK("e1", &ek.PublicKey))})
	ctx := context.Background()
	for name, tok := range map[string]string{
		"RS256":        sign(t, jwt.SigningMethodRS256, "r1", claims("agent://alice"), rk),
		"ES256":        sign(t, jwt.SigningMethodES256, "e1", claims("agent://alice"), ek),
		"RS256 no kid": sign(t, jwt.SigningMethodRS256, "", claims("agent://alice"), rk),
		"ES256 no kid": sign(t, jwt.SigningMethodES256, "", claims("agent://alice"), ek),
	} {
		id, err := j.Authenticate(ctx, bearer(tok))
		if err != nil || id.Sender != "agent://alice" || !reflectZero(id.Caps) {
			t.Errorf("%s: %+v %v", name, id, err)
		}
	}
	// aud may be a list.
	c := claims("bob")
	c["aud"] = []string{"other", testAudience}
	if id, err := j.Authenticate(ctx, bearer(sign(t, jwt.SigningMethodRS256, "r1", c, rk))); err != nil || id.Sender != "bob" {
		t.Errorf("aud list: %+v %v", id, err)
	}
	// Not JWT-shaped, or no bearer: left to the next authenticator.
	for _, m := range []*Credentials{nil, creds(), bearer("opaque-token"), bearer("a.b"), bearer("a.b.c"), bearer("x.y.z.w"),
		creds("x-macp-token", sign(t, jwt.SigningMethodRS256, "r1", claims("alice"), rk)),
		bearer(b64([]byte(`{"typ":"JWT"}`)) + ".e30.sig")} {
		if _, err := j.Authenticate(ctx, m); !errors.Is(err, ErrNoCredentials) {
			t.Errorf("Authenticate(%v): %v, want ErrNoCredentials", m, err)
		}
	}
}

func reflectZero(c coord.Capabilities) bool {
	return c.AllowedModes == nil && !c.CannotStartSessions && c.MaxOpenSessions == 0 && !c.CanManageModeRegistry && !c.IsObserver
}

// exp (required) and nbf are checked with a 30 s leeway; iss and aud must
// match; the signature must verify with the configured key.
func TestJWTRejected(t *testing.T) {
	rk, other := testRSAKey(t, 0), testRSAKey(t, 1)
	ek := testECKey(t)
	j := newJWT(t, JWTOptions{JWKSJSON: jwks(rsaJWK("r1", &rk.PublicKey), ecJWK("e1", &ek.PublicKey))})
	ctx := context.Background()
	now := time.Now()
	with := func(k string, v any) jwt.MapClaims {
		c := claims("alice")
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	for name, tc := range map[string]struct {
		tok, msg string
	}{
		"expired":          {sign(t, jwt.SigningMethodRS256, "r1", with("exp", now.Add(-time.Minute).Unix()), rk), "expired"},
		"nbf in future":    {sign(t, jwt.SigningMethodRS256, "r1", with("nbf", now.Add(time.Minute).Unix()), rk), "not valid yet"},
		"no exp":           {sign(t, jwt.SigningMethodRS256, "r1", with("exp", nil), rk), "missing"},
		"wrong issuer":     {sign(t, jwt.SigningMethodRS256, "r1", with("iss", "https://evil.test"), rk), "issuer"},
		"no issuer":        {sign(t, jwt.SigningMethodRS256, "r1", with("iss", nil), rk), ""},
		"wrong audience":   {sign(t, jwt.SigningMethodRS256, "r1", with("aud", "other"), rk), "audience"},
		"no audience":      {sign(t, jwt.SigningMethodRS256, "r1", with("aud", nil), rk), ""},
		"other key":        {sign(t, jwt.SigningMethodRS256, "r1", claims("alice"), other), "signature"},
		"other key no kid": {sign(t, jwt.SigningMethodRS256, "", claims("alice"), other), "signature"},
		"kid of EC key":    {sign(t, jwt.SigningMethodRS256, "e1", claims("alice"), rk), "kid"},
		"unknown kid":      {sign(t, jwt.SigningMethodRS256, "nope", claims("alice"), rk), `kid "nope"`},
		"HS256 not enabled": {sign(t, jwt.SigningMethodHS256, "", claims("alice"),
			[]byte("0123456789abcdef0123456789abcdef")), "algorithm"},
		"RS512":        {sign(t, jwt.SigningMethodRS512, "r1", claims("alice"), rk), "algorithm"},
		"alg none":     {sign(t, jwt.SigningMethodNone, "", claims("alice"), jwt.UnsafeAllowNoneSignatureType), "algorithm"},
		"no sub":       {sign(t, jwt.SigningMethodRS256, "r1", with("sub", nil), rk), `"sub"`},
		"sub number":   {sign(t, jwt.SigningMethodRS256, "r1", with("sub", 7), rk), ""},
		"sub reserved": {sign(t, jwt.SigningMethodRS256, "r1", with("sub", "_runtime"), rk), "valid sender"},
		"bad scopes":   {sign(t, jwt.SigningMethodRS256, "r1", with(ScopesClaim, "all"), rk), ScopesClaim},
		"bad scope type": {sign(t, jwt.SigningMethodRS256, "r1", with(ScopesClaim, map[string]any{"is_observer": "yes"}), rk),
			ScopesClaim},
		"negative max": {sign(t, jwt.SigningMethodRS256, "r1", with(ScopesClaim, map[string]any{"max_open_sessions": -1}), rk),
			ScopesClaim},
	} {
		_, err := j.Authenticate(ctx, bearer(tc.tok))
		wantUnauth(t, name, err, tc.msg)
	}
	// A tampered payload.
	tok := sign(t, jwt.SigningMethodES256, "e1", claims("alice"), ek)
	parts := strings.Split(tok, ".")
	parts[1] = b64([]byte(`{"iss":"` + testIssuer + `","aud":"` + testAudience + `","sub":"mallory","exp":9999999999}`))
	_, err := j.Authenticate(ctx, bearer(strings.Join(parts, ".")))
	wantUnauth(t, "tampered", err, "signature")
	// HS256 with the RSA public key as the secret (algorithm confusion).
	_, err = j.Authenticate(ctx, bearer(sign(t, jwt.SigningMethodHS256, "r1", claims("alice"), rk.PublicKey.N.Bytes())))
	wantUnauth(t, "alg confusion", err, "algorithm")
}

// exp and nbf tolerate 30 s of clock skew, not more.
func TestJWTLeeway(t *testing.T) {
	rk := testRSAKey(t, 0)
	j := newJWT(t, JWTOptions{JWKSJSON: jwks(rsaJWK("r1", &rk.PublicKey))})
	now := time.Unix(1_800_000_000, 0)
	j.now = func() time.Time { return now }
	at := func(exp, nbf time.Duration) error {
		c := claims("alice")
		c["exp"], c["nbf"] = now.Add(exp).Unix(), now.Add(nbf).Unix()
		_, err := j.Authenticate(context.Background(), bearer(sign(t, jwt.SigningMethodRS256, "r1", c, rk)))
		return err
	}
	if err := at(-20*time.Second, 0); err != nil {
		t.Errorf("expired 20 s ago: %v", err)
	}
	if err := at(-40*time.Second, 0); err == nil {
		t.Error("expired 40 s ago accepted")
	}
	if err := at(time.Minute, 20*time.Second); err != nil {
		t.Errorf("nbf 20 s ahead: %v", err)
	}
	if err := at(time.Minute, 40*time.Second); err == nil {
		t.Error("nbf 40 s ahead accepted")
	}
}

// The macp_scopes claim, in the reference runtime's format.
func TestJWTScopes(t *testing.T) {
	rk := testRSAKey(t, 0)
	j := newJWT(t, JWTOptions{JWKSJSON: jwks(rsaJWK("r1", &rk.PublicKey))})
	for name, tc := range map[string]struct {
		scopes any
		want   coord.Capabilities
	}{
		"full": {map[string]any{"allowed_modes": []string{"macp.mode.decision.v1"}, "can_start_sessions": true,
			"max_open_sessions": 5, "can_manage_mode_registry": true, "is_observer": true},
			coord.Capabilities{AllowedModes: []string{"macp.mode.decision.v1"}, MaxOpenSessions: 5, CanManageModeRegistry: true, IsObserver: true}},
		"empty object":      {map[string]any{}, coord.Capabilities{}},
		"no start":          {map[string]any{"can_start_sessions": false}, coord.Capabilities{CannotStartSessions: true}},
		"zero max":          {map[string]any{"max_open_sessions": 0}, coord.Capabilities{CannotStartSessions: true}},
		"empty modes":       {map[string]any{"allowed_modes": []string{}}, coord.Capabilities{AllowedModes: []string{}}},
		"null modes":        {map[string]any{"allowed_modes": nil}, coord.Capabilities{}},
		"unknown field":     {map[string]any{"tenant": "t1"}, coord.Capabilities{}},
		"observer false":    {map[string]any{"is_observer": false}, coord.Capabilities{}},
		"null scopes claim": {nil, coord.Capabilities{}},
	} {
		c := claims("alice")
		c[ScopesClaim] = tc.scopes
		id, err := j.Authenticate(context.Background(), bearer(sign(t, jwt.SigningMethodRS256, "r1", c, rk)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		g, w := id.Caps, tc.want
		if (g.AllowedModes == nil) != (w.AllowedModes == nil) || strings.Join(g.AllowedModes, ",") != strings.Join(w.AllowedModes, ",") ||
			g.CannotStartSessions != w.CannotStartSessions || g.MaxOpenSessions != w.MaxOpenSessions ||
			g.CanManageModeRegistry != w.CanManageModeRegistry || g.IsObserver != w.IsObserver {
			t.Errorf("%s: caps %+v, want %+v", name, g, w)
		}
	}
	// allowed_modes present but empty allows no mode (reference runtime).
	c := claims("alice")
	c[ScopesClaim] = map[string]any{"allowed_modes": []string{}}
	id, _ := j.Authenticate(context.Background(), bearer(sign(t, jwt.SigningMethodRS256, "r1", c, rk)))
	if id.Caps.AllowsMode("macp.mode.decision.v1") {
		t.Error("empty allowed_modes allows a mode")
	}
}

// MACP_AUTH_SENDER_CLAIM names another claim for the sender.
func TestJWTSenderClaim(t *testing.T) {
	rk := testRSAKey(t, 0)
	j := newJWT(t, JWTOptions{JWKSJSON: jwks(rsaJWK("r1", &rk.PublicKey)), SenderClaim: "agent_id"})
	c := claims("user-123")
	c["agent_id"] = "agent://planner"
	if id, err := j.Authenticate(context.Background(), bearer(sign(t, jwt.SigningMethodRS256, "r1", c, rk))); err != nil || id.Sender != "agent://planner" {
		t.Fatalf("%+v %v", id, err)
	}
	_, err := j.Authenticate(context.Background(), bearer(sign(t, jwt.SigningMethodRS256, "r1", claims("x"), rk)))
	wantUnauth(t, "missing sender claim", err, `"agent_id"`)
}

// HS256 is refused unless MACP_AUTH_ALLOW_HS256 is on; then it verifies
// with MACP_AUTH_HS256_SECRET or an "oct" key of the inline JWKS.
func TestJWTHS256(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	octSecret := []byte("fedcba9876543210fedcba9876543210!")
	rk := testRSAKey(t, 0)
	ctx := context.Background()
	hs := func(kid string, key []byte) *Credentials {
		return bearer(sign(t, jwt.SigningMethodHS256, kid, claims("alice"), key))
	}

	// Not enabled: oct keys in the JWKS are ignored, HS256 tokens refused.
	j := newJWT(t, JWTOptions{JWKSJSON: jwks(rsaJWK("r1", &rk.PublicKey), octJWK("o1", octSecret))})
	_, err := j.Authenticate(ctx, hs("o1", octSecret))
	wantUnauth(t, "HS256 not enabled", err, "algorithm")
	// Only oct keys and HS256 not enabled: no usable key, startup fails.
	if _, err := NewJWT(JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: jwks(octJWK("o1", octSecret))}); err == nil ||
		!strings.Contains(err.Error(), "HS256 is not enabled") {
		t.Errorf("oct-only JWKS without HS256: %v", err)
	}
	// A secret without the switch fails.
	if _, err := NewJWT(JWTOptions{Issuer: testIssuer, Audience: testAudience, HS256Secret: secret}); err == nil {
		t.Error("HS256 secret accepted without AllowHS256")
	}

	j = newJWT(t, JWTOptions{AllowHS256: true, HS256Secret: secret})
	for name, m := range map[string]*Credentials{"secret": hs("", secret), "secret, any kid": hs("k9", secret)} {
		if id, err := j.Authenticate(ctx, m); err != nil || id.Sender != "alice" {
			t.Errorf("%s: %+v %v", name, id, err)
		}
	}
	_, err = j.Authenticate(ctx, hs("", []byte("another-secret-another-secret-!!")))
	wantUnauth(t, "wrong secret", err, "signature")
	// RS256 still works alongside when keys are configured.
	j = newJWT(t, JWTOptions{AllowHS256: true, JWKSJSON: jwks(rsaJWK("r1", &rk.PublicKey), octJWK("o1", octSecret))})
	if id, err := j.Authenticate(ctx, hs("o1", octSecret)); err != nil || id.Sender != "alice" {
		t.Errorf("oct key: %+v %v", id, err)
	}
	if id, err := j.Authenticate(ctx, bearer(sign(t, jwt.SigningMethodRS256, "r1", claims("bob"), rk))); err != nil || id.Sender != "bob" {
		t.Errorf("RS256 beside HS256: %+v %v", id, err)
	}
	// Reference-runtime JWKS often carry the secret in standard base64.
	std := base64.StdEncoding.EncodeToString(octSecret)
	j = newJWT(t, JWTOptions{AllowHS256: true, JWKSJSON: `{"keys":[{"kty":"oct","alg":"HS256","k":"` + std + `"}]}`})
	if id, err := j.Authenticate(ctx, hs("test-key", octSecret)); err != nil || id.Sender != "alice" {
		t.Errorf("standard base64 k: %+v %v", id, err)
	}
}

// A malformed JWT configuration makes NewJWT fail (startup stops), never a
// silently disabled authenticator.
func TestNewJWTErrors(t *testing.T) {
	rk := testRSAKey(t, 0)
	good := jwks(rsaJWK("r1", &rk.PublicKey))
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		o    JWTOptions
		want string
	}{
		"no issuer":        {JWTOptions{Audience: testAudience, JWKSJSON: good}, "MACP_AUTH_ISSUER"},
		"no audience":      {JWTOptions{Issuer: testIssuer, JWKSJSON: good}, "audience"},
		"no keys":          {JWTOptions{Issuer: testIssuer, Audience: testAudience}, "no verification keys"},
		"both sources":     {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: good, JWKSURL: "https://x/j"}, "both"},
		"bad json":         {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `{"keys": [`}, "invalid JWKS JSON"},
		"not a set":        {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `[]`}, "invalid JWKS"},
		"no keys array":    {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `{"kty":"RSA"}`}, `no "keys"`},
		"empty set":        {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `{"keys":[]}`}, "no usable key"},
		"bad RSA n":        {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `{"keys":[{"kty":"RSA","n":"!!","e":"AQAB"}]}`}, `"n"`},
		"bad RSA e":        {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `{"keys":[{"kty":"RSA","n":"AQAB","e":"AAAAAAAA"}]}`}, `"e"`},
		"bad EC point":     {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `{"keys":[{"kty":"EC","crv":"P-256","x":"` + b64(make([]byte, 32)) + `","y":"` + b64(make([]byte, 32)) + `"}]}`}, "EC key"},
		"only small RSA":   {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: jwks(rsaJWK("s", &small.PublicKey))}, "below 2048"},
		"only P-384":       {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `{"keys":[{"kty":"EC","crv":"P-384","x":"AA","y":"AA"}]}`}, "not supported"},
		"only enc keys":    {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSJSON: `{"keys":[{"kty":"RSA","use":"enc","n":"AQAB","e":"AQAB"}]}`}, "use"},
		"short oct":        {JWTOptions{Issuer: testIssuer, Audience: testAudience, AllowHS256: true, JWKSJSON: jwks(octJWK("o", []byte("short")))}, "at least 32"},
		"short secret":     {JWTOptions{Issuer: testIssuer, Audience: testAudience, AllowHS256: true, HS256Secret: []byte("short")}, "at least 32"},
		"relative URL":     {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSURL: "/jwks"}, "MACP_AUTH_JWKS_URL"},
		"ftp URL":          {JWTOptions{Issuer: testIssuer, Audience: testAudience, JWKSURL: "ftp://x/jwks"}, "MACP_AUTH_JWKS_URL"},
		"allow, no secret": {JWTOptions{Issuer: testIssuer, Audience: testAudience, AllowHS256: true}, "no verification keys"},
	} {
		if _, err := NewJWT(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
	// Unusable keys beside usable ones are skipped, not fatal.
	if _, err := NewJWT(JWTOptions{Issuer: testIssuer, Audience: testAudience,
		JWKSJSON: jwks(rsaJWK("r1", &rk.PublicKey), map[string]any{"kty": "OKP", "crv": "Ed25519", "x": "AA"}, rsaJWK("s", &small.PublicKey))}); err != nil {
		t.Errorf("usable key beside unusable ones: %v", err)
	}
}

// jwksServer serves a JWKS that tests may change, counting requests.
type jwksServer struct {
	*httptest.Server
	mu     sync.Mutex
	body   string
	status int
	hits   atomic.Int64
}

func newJWKSServer(t *testing.T, body string) *jwksServer {
	s := &jwksServer{body: body, status: http.StatusOK}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.WriteHeader(s.status)
		_, _ = w.Write([]byte(s.body))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(status int, body string) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

// MACP_AUTH_JWKS_URL: fetched on first use and cached for the TTL; a token
// with an unknown kid triggers a refresh (key rotation), rate-limited; a
// failed fetch keeps the keys in force.
func TestJWTJWKSURL(t *testing.T) {
	k1, k2 := testRSAKey(t, 0), testRSAKey(t, 1)
	srv := newJWKSServer(t, jwks(rsaJWK("k1", &k1.PublicKey)))
	j := newJWT(t, JWTOptions{JWKSURL: srv.URL, JWKSTTL: time.Hour, RefreshInterval: time.Minute})
	clk := &clock{t: time.Now()}
	j.now = clk.now
	ctx := context.Background()
	auth := func(kid string, key *rsa.PrivateKey, sub string) error {
		c := claims(sub)
		c["exp"] = clk.now().Add(5 * time.Minute).Unix()
		id, err := j.Authenticate(ctx, bearer(sign(t, jwt.SigningMethodRS256, kid, c, key)))
		if err == nil && id.Sender != sub {
			t.Fatalf("sender %q", id.Sender)
		}
		return err
	}
	if srv.hits.Load() != 0 {
		t.Fatal("JWKS fetched at startup")
	}
	if err := auth("k1", k1, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := auth("k1", k1, "alice"); err != nil || srv.hits.Load() != 1 {
		t.Fatalf("cached: %v, %d fetches", err, srv.hits.Load())
	}

	// Rotation: k2 appears; a token with kid k2 triggers one refresh.
	srv.set(http.StatusOK, jwks(rsaJWK("k1", &k1.PublicKey), rsaJWK("k2", &k2.PublicKey)))
	clk.add(2 * time.Minute)
	if err := auth("k2", k2, "bob"); err != nil || srv.hits.Load() != 2 {
		t.Fatalf("unknown kid then refresh: %v, %d fetches", err, srv.hits.Load())
	}
	// Another unknown kid right away: no fetch (rate-limited), refused.
	err := auth("k3", k2, "bob")
	wantUnauth(t, "unknown kid k3", err, `kid "k3"`)
	if srv.hits.Load() != 2 {
		t.Fatalf("refresh not rate-limited: %d fetches", srv.hits.Load())
	}
	// After the refresh interval an unknown kid may refresh again.
	clk.add(2 * time.Minute)
	wantUnauth(t, "unknown kid k3 later", auth("k3", k2, "bob"), "k3")
	if srv.hits.Load() != 3 {
		t.Fatalf("%d fetches, want 3", srv.hits.Load())
	}

	// TTL: refetched once it has passed; a failing endpoint keeps the keys.
	srv.set(http.StatusInternalServerError, "oops")
	clk.add(2 * time.Hour)
	if err := auth("k2", k2, "bob"); err != nil {
		t.Fatalf("stale keys kept on a failed refresh: %v", err)
	}
	if srv.hits.Load() != 4 {
		t.Fatalf("%d fetches, want 4", srv.hits.Load())
	}
	// Failed fetches are rate-limited too.
	for range 3 {
		_ = auth("k2", k2, "bob")
	}
	if srv.hits.Load() != 4 {
		t.Fatalf("failing endpoint hammered: %d fetches", srv.hits.Load())
	}
	// Keys removed at the source stop working after the next refresh.
	srv.set(http.StatusOK, jwks(rsaJWK("k1", &k1.PublicKey)))
	clk.add(2 * time.Minute)
	if err := auth("k1", k1, "alice"); err != nil {
		t.Fatal(err)
	}
	wantUnauth(t, "removed key", auth("k2", k2, "bob"), "k2")
}

// An unreachable or broken JWKS endpoint: UNAUTHENTICATED, never a panic or
// acceptance; malformed documents are rejected.
func TestJWTJWKSURLUnavailable(t *testing.T) {
	k1 := testRSAKey(t, 0)
	tok := sign(t, jwt.SigningMethodRS256, "k1", claims("alice"), k1)
	for name, tc := range map[string]struct {
		status int
		body   string
	}{
		"500":       {http.StatusInternalServerError, jwks(rsaJWK("k1", &k1.PublicKey))},
		"not JSON":  {http.StatusOK, "<html>"},
		"no keys":   {http.StatusOK, `{"keys": []}`},
		"oct keys":  {http.StatusOK, jwks(octJWK("k1", []byte("0123456789abcdef0123456789abcdef")))},
		"too large": {http.StatusOK, `{"keys": [], "pad": "` + strings.Repeat("x", maxJWKSBytes) + `"}`},
	} {
		srv := newJWKSServer(t, tc.body)
		srv.set(tc.status, tc.body)
		j := newJWT(t, JWTOptions{JWKSURL: srv.URL, AllowHS256: true, HS256Secret: []byte("0123456789abcdef0123456789abcdef")})
		_, err := j.Authenticate(context.Background(), bearer(tok))
		wantUnauth(t, name, err, "")
	}
	// Nothing listening.
	srv := newJWKSServer(t, "")
	url := srv.URL
	srv.Close()
	j := newJWT(t, JWTOptions{JWKSURL: url, FetchTimeout: 2 * time.Second})
	_, err := j.Authenticate(context.Background(), bearer(tok))
	wantUnauth(t, "unreachable", err, "unavailable")
	// A slow endpoint is bounded by the fetch timeout.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	j = newJWT(t, JWTOptions{JWKSURL: slow.URL, FetchTimeout: 100 * time.Millisecond})
	start := time.Now()
	_, err = j.Authenticate(context.Background(), bearer(tok))
	wantUnauth(t, "slow", err, "")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("fetch took %v despite a 100ms timeout", d)
	}
}

// Concurrent first use fetches the JWKS once (run with -race).
func TestJWTJWKSConcurrent(t *testing.T) {
	k1 := testRSAKey(t, 0)
	srv := newJWKSServer(t, jwks(rsaJWK("k1", &k1.PublicKey)))
	j := newJWT(t, JWTOptions{JWKSURL: srv.URL})
	tok := sign(t, jwt.SigningMethodRS256, "k1", claims("alice"), k1)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.Authenticate(context.Background(), bearer(tok)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("%d fetches, want 1", n)
	}
}
