package config

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

// docs/security.md: every authentication variable is applied.
func TestAuthFromEnv(t *testing.T) {
	c := Default()
	err := c.FromEnv(env(map[string]string{
		"MACP_ALLOW_PLAINTEXT":        "1",
		"MACP_ALLOW_DEV_IDENTITIES":   "true",
		"MACP_AUTH_TOKENS_FILE":       "/etc/macp/tokens.json",
		"MACP_AUTH_TOKENS_JSON":       `[{"token":"t","sender":"s"}]`,
		"MACP_AUTH_ISSUER":            "https://issuer.example",
		"MACP_AUTH_AUDIENCE":          "aud",
		"MACP_AUTH_JWKS_JSON":         `{"keys":[]}`,
		"MACP_AUTH_JWKS_URL":          "https://issuer.example/jwks",
		"MACP_AUTH_JWKS_TTL_SECS":     "60",
		"MACP_AUTH_SENDER_CLAIM":      "agent_id",
		"MACP_AUTH_ALLOW_HS256":       "yes",
		"MACP_AUTH_HS256_SECRET":      "s3cr3t",
		"MACP_AUTH_HS256_SECRET_FILE": "/etc/macp/hs256",
		"MACP_TLS_CLIENT_CA_PATH":     "/etc/macp/clients.pem",
		"MACP_TLS_CLIENT_AUTH":        "request",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := AuthConfig{
		AllowPlaintext: true, AllowDevIdentities: true,
		TokensJSON: `[{"token":"t","sender":"s"}]`, TokensFile: "/etc/macp/tokens.json",
		Issuer: "https://issuer.example", Audience: "aud", JWKSJSON: `{"keys":[]}`, JWKSURL: "https://issuer.example/jwks",
		JWKSTTL: time.Minute, SenderClaim: "agent_id", AllowHS256: true, HS256Secret: "s3cr3t", HS256SecretFile: "/etc/macp/hs256",
		TLSClientCAPath: "/etc/macp/clients.pem", TLSClientAuth: "request",
	}
	if c.Auth != want {
		t.Fatalf("FromEnv\n got %+v\nwant %+v", c.Auth, want)
	}
	for _, kv := range [][2]string{
		{"MACP_ALLOW_PLAINTEXT", "maybe"}, {"MACP_ALLOW_DEV_IDENTITIES", "2"}, {"MACP_AUTH_ALLOW_HS256", "x"},
		{"MACP_AUTH_JWKS_TTL_SECS", "-1"}, {"MACP_AUTH_JWKS_TTL_SECS", "5m"}, {"MACP_AUTH_JWKS_TTL_SECS", "99999999999999999999"},
	} {
		c := Default()
		if err := c.FromEnv(env(map[string]string{kv[0]: kv[1]})); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%q: %v", kv[0], kv[1], err)
		}
	}
}

// Flags override the environment; inline secrets have no flag.
func TestAuthFlags(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("macpd", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--allow-plaintext", "--allow-dev-identities", "--auth-tokens-file", "t.json",
		"--auth-issuer", "iss", "--auth-audience", "aud", "--auth-jwks-url", "https://x/jwks", "--auth-jwks-ttl", "90s",
		"--auth-sender-claim", "azp", "--auth-allow-hs256", "--auth-hs256-secret-file", "hs", "--tls-client-ca", "ca.pem",
		"--tls-client-auth", "require"}); err != nil {
		t.Fatal(err)
	}
	want := AuthConfig{AllowPlaintext: true, AllowDevIdentities: true, TokensFile: "t.json", Issuer: "iss", Audience: "aud",
		JWKSURL: "https://x/jwks", JWKSTTL: 90 * time.Second, SenderClaim: "azp", AllowHS256: true, HS256SecretFile: "hs",
		TLSClientCAPath: "ca.pem", TLSClientAuth: "require"}
	if c.Auth != want {
		t.Fatalf("flags\n got %+v\nwant %+v", c.Auth, want)
	}
	for _, secret := range []string{"auth-tokens-json", "auth-jwks-json", "auth-hs256-secret"} {
		if fs.Lookup(secret) != nil {
			t.Errorf("flag --%s exposes a secret on the command line", secret)
		}
	}
}

// MACP_ALLOW_INSECURE keeps meaning plaintext and dev identities; the new
// switches each enable one of them.
func TestSwitches(t *testing.T) {
	for _, tc := range []struct {
		insecure, plaintext, dev bool
		wantPlain, wantDev       bool
	}{
		{false, false, false, false, false},
		{true, false, false, true, true},
		{false, true, false, true, false},
		{false, false, true, false, true},
	} {
		c := Default()
		c.AllowInsecure, c.Auth.AllowPlaintext, c.Auth.AllowDevIdentities = tc.insecure, tc.plaintext, tc.dev
		if c.PlaintextAllowed() != tc.wantPlain || c.DevIdentitiesAllowed() != tc.wantDev {
			t.Errorf("%+v: plaintext %v dev %v", tc, c.PlaintextAllowed(), c.DevIdentitiesAllowed())
		}
	}
	// Plaintext needs an explicit switch, and MACP_ALLOW_PLAINTEXT is one.
	c := Default()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MACP_ALLOW_PLAINTEXT") {
		t.Fatalf("plaintext without a switch: %v", err)
	}
	c.Auth.AllowPlaintext = true
	if err := c.Validate(); err != nil {
		t.Fatalf("MACP_ALLOW_PLAINTEXT: %v", err)
	}
}

// With no authenticator at all the runtime refuses to start, naming the
// settings that fix it.
func TestCheckAuthenticators(t *testing.T) {
	c := Default()
	c.TLSCertPath, c.TLSKeyPath = "c.pem", "k.pem"
	err := c.CheckAuthenticators()
	if err == nil {
		t.Fatal("no authenticator accepted")
	}
	for _, s := range []string{"MACP_AUTH_TOKENS_FILE", "MACP_AUTH_TOKENS_JSON", "MACP_AUTH_ISSUER", "MACP_TLS_CLIENT_CA_PATH",
		"MACP_ALLOW_DEV_IDENTITIES", "MACP_ALLOW_INSECURE"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not name %s: %v", s, err)
		}
	}
	for name, mut := range map[string]func(*Config){
		"tokens json":   func(c *Config) { c.Auth.TokensJSON = "[]" },
		"tokens file":   func(c *Config) { c.Auth.TokensFile = "t.json" },
		"jwt":           func(c *Config) { c.Auth.Issuer = "iss" },
		"mtls":          func(c *Config) { c.Auth.TLSClientCAPath = "ca.pem" },
		"dev":           func(c *Config) { c.Auth.AllowDevIdentities = true },
		"insecure":      func(c *Config) { c.AllowInsecure = true },
		"mtls, request": func(c *Config) { c.Auth.TLSClientCAPath, c.Auth.TLSClientAuth = "ca.pem", "request" },
	} {
		c := c
		mut(&c)
		if err := c.CheckAuthenticators(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Effective* resolve the zero values to the documented defaults.
func TestAuthDefaults(t *testing.T) {
	var a AuthConfig
	if a.EffectiveAudience() != "macp-runtime" || a.EffectiveJWKSTTL() != 300*time.Second || a.EffectiveSenderClaim() != "sub" ||
		a.EffectiveClientAuth() != "none" || a.MTLSConfigured() || a.TokensConfigured() || a.JWTConfigured() {
		t.Fatalf("defaults: %+v", a)
	}
	a.TLSClientCAPath = "ca.pem"
	if a.EffectiveClientAuth() != "require" || !a.MTLSConfigured() {
		t.Fatal("a client CA implies require")
	}
	a = AuthConfig{Audience: "a", JWKSTTL: time.Second, SenderClaim: "azp", TLSClientAuth: "request"}
	if a.EffectiveAudience() != "a" || a.EffectiveJWKSTTL() != time.Second || a.EffectiveSenderClaim() != "azp" || a.EffectiveClientAuth() != "request" {
		t.Fatalf("explicit: %+v", a)
	}
}

// A malformed authentication configuration is refused, each problem naming
// its setting.
func TestValidateAuth(t *testing.T) {
	base := func() Config {
		c := Default()
		c.TLSCertPath, c.TLSKeyPath = "c.pem", "k.pem"
		return c
	}
	secret := strings.Repeat("s", 32)
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want []string
	}{
		"tokens json and file": {func(c *Config) { c.Auth.TokensJSON, c.Auth.TokensFile = "[]", "t.json" },
			[]string{"MACP_AUTH_TOKENS_JSON", "MACP_AUTH_TOKENS_FILE"}},
		"jwks url without issuer":  {func(c *Config) { c.Auth.JWKSURL = "https://x/jwks" }, []string{"MACP_AUTH_JWKS_URL", "MACP_AUTH_ISSUER"}},
		"jwks json without issuer": {func(c *Config) { c.Auth.JWKSJSON = "{}" }, []string{"MACP_AUTH_JWKS_JSON", "MACP_AUTH_ISSUER"}},
		"audience without issuer":  {func(c *Config) { c.Auth.Audience = "a" }, []string{"MACP_AUTH_AUDIENCE", "MACP_AUTH_ISSUER"}},
		"hs256 without issuer":     {func(c *Config) { c.Auth.AllowHS256 = true }, []string{"MACP_AUTH_ALLOW_HS256", "MACP_AUTH_ISSUER"}},
		"issuer without keys":      {func(c *Config) { c.Auth.Issuer = "iss" }, []string{"MACP_AUTH_ISSUER", "MACP_AUTH_JWKS_URL", "MACP_AUTH_JWKS_JSON"}},
		"both jwks sources": {func(c *Config) { c.Auth.Issuer, c.Auth.JWKSJSON, c.Auth.JWKSURL = "iss", "{}", "https://x/jwks" },
			[]string{"MACP_AUTH_JWKS_JSON", "MACP_AUTH_JWKS_URL", "both"}},
		"relative jwks url": {func(c *Config) { c.Auth.Issuer, c.Auth.JWKSURL = "iss", "/jwks" }, []string{"MACP_AUTH_JWKS_URL", "absolute"}},
		"ftp jwks url":      {func(c *Config) { c.Auth.Issuer, c.Auth.JWKSURL = "iss", "ftp://x/jwks" }, []string{"MACP_AUTH_JWKS_URL"}},
		"negative ttl": {func(c *Config) { c.Auth.Issuer, c.Auth.JWKSURL, c.Auth.JWKSTTL = "iss", "https://x/j", -time.Second },
			[]string{"MACP_AUTH_JWKS_TTL_SECS"}},
		"secret without allow": {func(c *Config) { c.Auth.Issuer, c.Auth.JWKSURL, c.Auth.HS256Secret = "iss", "https://x/j", secret },
			[]string{"MACP_AUTH_ALLOW_HS256"}},
		"allow without secret": {func(c *Config) { c.Auth.Issuer, c.Auth.JWKSURL, c.Auth.AllowHS256 = "iss", "https://x/j", true },
			[]string{"MACP_AUTH_HS256_SECRET"}},
		"short secret": {func(c *Config) { c.Auth.Issuer, c.Auth.AllowHS256, c.Auth.HS256Secret = "iss", true, "short" },
			[]string{"MACP_AUTH_HS256_SECRET", "32"}},
		"secret and file": {func(c *Config) {
			c.Auth.Issuer, c.Auth.AllowHS256, c.Auth.HS256Secret, c.Auth.HS256SecretFile = "iss", true, secret, "f"
		}, []string{"MACP_AUTH_HS256_SECRET_FILE"}},
		"bad client auth":    {func(c *Config) { c.Auth.TLSClientAuth = "always" }, []string{"MACP_TLS_CLIENT_AUTH", `"always"`}},
		"require without CA": {func(c *Config) { c.Auth.TLSClientAuth = "require" }, []string{"MACP_TLS_CLIENT_CA_PATH"}},
		"CA with none":       {func(c *Config) { c.Auth.TLSClientCAPath, c.Auth.TLSClientAuth = "ca.pem", "none" }, []string{"MACP_TLS_CLIENT_AUTH"}},
		"CA without TLS": {func(c *Config) {
			c.TLSCertPath, c.TLSKeyPath, c.Auth.TLSClientCAPath, c.AllowInsecure = "", "", "ca.pem", true
		},
			[]string{"MACP_TLS_CLIENT_CA_PATH", "MACP_TLS_CERT_PATH"}},
	} {
		c := base()
		tc.mut(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: validated", name)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error does not mention %s: %v", name, s, err)
			}
		}
	}
	for name, mut := range map[string]func(*Config){
		"tokens":        func(c *Config) { c.Auth.TokensFile = "t.json" },
		"jwks url":      func(c *Config) { c.Auth.Issuer, c.Auth.JWKSURL = "iss", "https://x/jwks" },
		"jwks json":     func(c *Config) { c.Auth.Issuer, c.Auth.JWKSJSON = "iss", "{}" },
		"hs256 secret":  func(c *Config) { c.Auth.Issuer, c.Auth.AllowHS256, c.Auth.HS256Secret = "iss", true, secret },
		"hs256 file":    func(c *Config) { c.Auth.Issuer, c.Auth.AllowHS256, c.Auth.HS256SecretFile = "iss", true, "f" },
		"hs256 in jwks": func(c *Config) { c.Auth.Issuer, c.Auth.AllowHS256, c.Auth.JWKSJSON = "iss", true, "{}" },
		"mtls":          func(c *Config) { c.Auth.TLSClientCAPath = "ca.pem" },
		"mtls request":  func(c *Config) { c.Auth.TLSClientCAPath, c.Auth.TLSClientAuth = "ca.pem", "request" },
		"none":          func(c *Config) { c.Auth.TLSClientAuth = "none" },
	} {
		c := base()
		mut(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Each problem is reported separately.
	c := base()
	c.Auth.JWKSURL, c.Auth.Audience, c.Auth.TLSClientAuth = "https://x/j", "a", "bogus"
	var joined interface{ Unwrap() []error }
	if err := c.Validate(); !errors.As(err, &joined) || len(joined.Unwrap()) != 3 {
		t.Errorf("want 3 problems, got %v", err)
	}
}
