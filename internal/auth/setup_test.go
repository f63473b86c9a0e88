package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/macpd/macpd/internal/config"
)

func kinds(c Chain) []string {
	var out []string
	for _, a := range c {
		out = append(out, reflect.TypeOf(a).String())
	}
	return out
}

// auth.FromConfig: the chain order is JWT, static tokens, client
// certificate, dev identities (last).
func TestFromConfigOrder(t *testing.T) {
	rk := testRSAKey(t, 0)
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.AllowInsecure = true
	cfg.Auth.TokensJSON = tokenList
	cfg.Auth.Issuer, cfg.Auth.JWKSJSON = testIssuer, jwks(rsaJWK("r1", &rk.PublicKey))
	cfg.Auth.TLSClientCAPath = "ca.pem"
	c, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"*auth.JWT", "*auth.Tokens", "auth.MTLS", "auth.Dev"}
	if got := kinds(c); !reflect.DeepEqual(got, want) {
		t.Fatalf("chain %v, want %v", got, want)
	}
	if !reflect.DeepEqual(c[3].(Dev).Caps, DevCaps) {
		t.Fatal("dev caps")
	}
	ctx := context.Background()
	// A configured static token resolves to its sender, not to a dev
	// identity named after the token.
	if id, err := c.Authenticate(ctx, creds("authorization", "Bearer alice-token-0123456789")); err != nil || id.Sender != "agent://alice" {
		t.Fatalf("static token: %+v %v", id, err)
	}
	// With dev identities on, an unknown bearer is a dev identity...
	if id, err := c.Authenticate(ctx, creds("authorization", "Bearer carol")); err != nil || id.Sender != "carol" || !id.Caps.CanManageModeRegistry {
		t.Fatalf("dev identity: %+v %v", id, err)
	}
	// ... but a JWT that fails verification is not.
	cl := claims("alice")
	cl["iss"] = "https://evil.test"
	_, err = c.Authenticate(ctx, bearer(sign(t, jwt.SigningMethodRS256, "r1", cl, rk)))
	wantUnauth(t, "bad JWT with dev identities", err, "issuer")
	if id, err := c.Authenticate(ctx, bearer(sign(t, jwt.SigningMethodRS256, "r1", claims("agent://jwt"), rk))); err != nil || id.Sender != "agent://jwt" {
		t.Fatalf("JWT: %+v %v", id, err)
	}
}

// Without dev identities an unknown bearer is UNAUTHENTICATED.
func TestFromConfigNoDev(t *testing.T) {
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.Auth.AllowPlaintext = true
	cfg.Auth.TokensJSON = tokenList
	c, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(c); !reflect.DeepEqual(got, []string{"*auth.Tokens"}) {
		t.Fatalf("chain %v", got)
	}
	ctx := context.Background()
	_, err = c.Authenticate(ctx, creds("authorization", "Bearer carol"))
	wantUnauth(t, "unknown token", err, "unknown bearer token")
	_, err = c.Authenticate(ctx, creds("x-macp-agent-id", "carol"))
	if !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("dev header without dev identities: %v", err)
	}
	// Only dev identities (MACP_ALLOW_DEV_IDENTITIES, not insecure).
	cfg = config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.Auth.AllowDevIdentities = true
	if c, err = FromConfig(cfg, nil); err != nil || !reflect.DeepEqual(kinds(c), []string{"auth.Dev"}) {
		t.Fatalf("dev only: %v %v", kinds(c), err)
	}
}

// No authenticator, or a malformed one, stops startup with a clear error.
func TestFromConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		mut  func(*config.Config)
		want string
	}{
		"nothing":         {func(c *config.Config) {}, "no authenticator configured"},
		"bad tokens":      {func(c *config.Config) { c.Auth.TokensJSON = `{"tokens": [{"token": "x"}]}` }, "MACP_AUTH_TOKENS_JSON"},
		"missing tokens":  {func(c *config.Config) { c.Auth.TokensFile = filepath.Join(dir, "none.json") }, "MACP_AUTH_TOKENS_FILE"},
		"bad jwks":        {func(c *config.Config) { c.Auth.Issuer, c.Auth.JWKSJSON = "iss", "{" }, "MACP_AUTH_JWKS_JSON"},
		"issuer, no jwks": {func(c *config.Config) { c.Auth.Issuer = "iss" }, "no verification keys"},
		"missing hs file": {func(c *config.Config) {
			c.Auth.Issuer, c.Auth.AllowHS256, c.Auth.HS256SecretFile = "iss", true, filepath.Join(dir, "x")
		}, "MACP_AUTH_HS256_SECRET_FILE"},
		"bad tokens + dev": {func(c *config.Config) { c.AllowInsecure, c.Auth.TokensJSON = true, "[" }, "MACP_AUTH_TOKENS_JSON"},
	} {
		cfg := config.Default()
		cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
		cfg.Auth.AllowPlaintext = true
		tc.mut(&cfg)
		if _, err := FromConfig(cfg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// MACP_AUTH_HS256_SECRET_FILE: the file's content without a trailing
// newline is the secret; too short a secret fails.
func TestFromConfigHS256File(t *testing.T) {
	dir := t.TempDir()
	secret := "0123456789abcdef0123456789abcdef"
	path := filepath.Join(dir, "hs256")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.Auth.AllowPlaintext = true
	cfg.Auth.Issuer, cfg.Auth.Audience, cfg.Auth.AllowHS256, cfg.Auth.HS256SecretFile = testIssuer, testAudience, true, path
	c, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := c.Authenticate(context.Background(), bearer(sign(t, jwt.SigningMethodHS256, "", claims("alice"), []byte(secret)))); err != nil || id.Sender != "alice" {
		t.Fatalf("%+v %v", id, err)
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := FromConfig(cfg, nil); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("short secret file: %v", err)
	}
}
