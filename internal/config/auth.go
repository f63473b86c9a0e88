package config

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Defaults of the authentication settings whose zero value means "the
// default" (so Config stays comparable and Default() unchanged).
const (
	// DefaultAudience is the JWT "aud" macpd expects when
	// MACP_AUTH_AUDIENCE is unset (the reference runtime's default).
	DefaultAudience = "macp-runtime"
	// DefaultJWKSTTL is how long a fetched JWKS is cached when
	// MACP_AUTH_JWKS_TTL_SECS is unset or 0.
	DefaultJWKSTTL = 300 * time.Second
	// DefaultSenderClaim is the JWT claim that names the sender.
	DefaultSenderClaim = "sub"
	// MinHS256SecretBytes is the shortest accepted HS256 secret
	// (RFC 7518 §3.2: a key of at least the hash size, 256 bits).
	MinHS256SecretBytes = 32
)

// TLS client-certificate modes (MACP_TLS_CLIENT_AUTH).
const (
	ClientAuthNone    = "none"    // no client certificate is asked for
	ClientAuthRequest = "request" // asked for; verified against the CA when sent
	ClientAuthRequire = "require" // required and verified against the CA
)

// AuthConfig holds the authentication settings and the transport-security
// switches beyond the server key pair. See docs/security.md.
type AuthConfig struct {
	// AllowPlaintext permits serving without TLS (MACP_ALLOW_PLAINTEXT,
	// --allow-plaintext). Development only.
	AllowPlaintext bool
	// AllowDevIdentities enables the dev authenticator: the bearer token or
	// x-macp-agent-id header is taken as the agent id
	// (MACP_ALLOW_DEV_IDENTITIES, --allow-dev-identities). Development only.
	AllowDevIdentities bool

	// TokensJSON is an inline static token list (MACP_AUTH_TOKENS_JSON);
	// TokensFile a file holding one, reloaded when it changes
	// (MACP_AUTH_TOKENS_FILE, --auth-tokens-file). At most one may be set.
	TokensJSON, TokensFile string

	// Issuer enables the JWT bearer authenticator and is the required "iss"
	// (MACP_AUTH_ISSUER, --auth-issuer).
	Issuer string
	// Audience is the required "aud"; "" means DefaultAudience
	// (MACP_AUTH_AUDIENCE, --auth-audience).
	Audience string
	// JWKSJSON is an inline JWKS (MACP_AUTH_JWKS_JSON); JWKSURL a JWKS
	// endpoint fetched and cached (MACP_AUTH_JWKS_URL, --auth-jwks-url).
	JWKSJSON, JWKSURL string
	// JWKSTTL is how long a fetched JWKS is cached; 0 means DefaultJWKSTTL
	// (MACP_AUTH_JWKS_TTL_SECS, --auth-jwks-ttl).
	JWKSTTL time.Duration
	// SenderClaim names the claim holding the sender; "" means
	// DefaultSenderClaim (MACP_AUTH_SENDER_CLAIM, --auth-sender-claim).
	SenderClaim string
	// AllowHS256 accepts HS256 (shared-secret) tokens
	// (MACP_AUTH_ALLOW_HS256, --auth-allow-hs256). Off by default: only
	// RS256 and ES256 are accepted.
	AllowHS256 bool
	// HS256Secret is the HS256 secret (MACP_AUTH_HS256_SECRET; no flag, so
	// it does not show in process listings); HS256SecretFile a file holding
	// it (MACP_AUTH_HS256_SECRET_FILE, --auth-hs256-secret-file).
	HS256Secret, HS256SecretFile string

	// TLSClientCAPath holds the CA certificates client certificates are
	// verified against (MACP_TLS_CLIENT_CA_PATH, --tls-client-ca).
	TLSClientCAPath string
	// TLSClientAuth is none, request or require; "" means require when
	// TLSClientCAPath is set, else none (MACP_TLS_CLIENT_AUTH,
	// --tls-client-auth).
	TLSClientAuth string
}

// PlaintextAllowed reports whether serving without TLS is permitted
// (MACP_ALLOW_PLAINTEXT, or MACP_ALLOW_INSECURE which implies it).
func (c *Config) PlaintextAllowed() bool { return c.AllowInsecure || c.Auth.AllowPlaintext }

// DevIdentitiesAllowed reports whether dev bearer identities are enabled
// (MACP_ALLOW_DEV_IDENTITIES, or MACP_ALLOW_INSECURE which implies it).
func (c *Config) DevIdentitiesAllowed() bool { return c.AllowInsecure || c.Auth.AllowDevIdentities }

// TokensConfigured reports whether static bearer tokens are configured.
func (a AuthConfig) TokensConfigured() bool { return a.TokensJSON != "" || a.TokensFile != "" }

// JWTConfigured reports whether the JWT bearer authenticator is configured.
func (a AuthConfig) JWTConfigured() bool { return a.Issuer != "" }

// EffectiveAudience is Audience or DefaultAudience.
func (a AuthConfig) EffectiveAudience() string {
	if a.Audience == "" {
		return DefaultAudience
	}
	return a.Audience
}

// EffectiveJWKSTTL is JWKSTTL or DefaultJWKSTTL.
func (a AuthConfig) EffectiveJWKSTTL() time.Duration {
	if a.JWKSTTL <= 0 {
		return DefaultJWKSTTL
	}
	return a.JWKSTTL
}

// EffectiveSenderClaim is SenderClaim or DefaultSenderClaim.
func (a AuthConfig) EffectiveSenderClaim() string {
	if a.SenderClaim == "" {
		return DefaultSenderClaim
	}
	return a.SenderClaim
}

// EffectiveClientAuth is TLSClientAuth, or its default: require when a
// client CA is configured, else none.
func (a AuthConfig) EffectiveClientAuth() string {
	switch {
	case a.TLSClientAuth != "":
		return a.TLSClientAuth
	case a.TLSClientCAPath != "":
		return ClientAuthRequire
	}
	return ClientAuthNone
}

// MTLSConfigured reports whether verified client certificates can
// authenticate callers.
func (a AuthConfig) MTLSConfigured() bool {
	m := a.EffectiveClientAuth()
	return a.TLSClientCAPath != "" && (m == ClientAuthRequest || m == ClientAuthRequire)
}

// CheckAuthenticators fails, naming the settings that fix it, when no
// authenticator would be configured: no static tokens, no JWT issuer, no
// client-certificate verification and no dev identities. Such a runtime
// would answer every authenticated call UNAUTHENTICATED. app.New calls it.
func (c *Config) CheckAuthenticators() error {
	if c.Auth.TokensConfigured() || c.Auth.JWTConfigured() || c.Auth.MTLSConfigured() || c.DevIdentitiesAllowed() {
		return nil
	}
	return errors.New("no authenticator configured: set MACP_AUTH_TOKENS_FILE (--auth-tokens-file) or MACP_AUTH_TOKENS_JSON " +
		"for static bearer tokens, MACP_AUTH_ISSUER (--auth-issuer) with MACP_AUTH_JWKS_URL or MACP_AUTH_JWKS_JSON for JWT, " +
		"or MACP_TLS_CLIENT_CA_PATH (--tls-client-ca) for client certificates; for local development only, " +
		"MACP_ALLOW_DEV_IDENTITIES=1 (--allow-dev-identities) or MACP_ALLOW_INSECURE=1 (--insecure)")
}

// validateAuth reports problems with the authentication settings, each naming
// its environment variable and flag. Called by Config.Validate.
func (c *Config) validateAuth() []error {
	a := &c.Auth
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if a.TokensJSON != "" && a.TokensFile != "" {
		bad("MACP_AUTH_TOKENS_JSON and MACP_AUTH_TOKENS_FILE (--auth-tokens-file) are both set: use one")
	}

	jwtOnly := []struct {
		set  bool
		name string
	}{
		{a.Audience != "", "MACP_AUTH_AUDIENCE (--auth-audience)"},
		{a.JWKSJSON != "", "MACP_AUTH_JWKS_JSON"},
		{a.JWKSURL != "", "MACP_AUTH_JWKS_URL (--auth-jwks-url)"},
		{a.JWKSTTL != 0, "MACP_AUTH_JWKS_TTL_SECS (--auth-jwks-ttl)"},
		{a.SenderClaim != "", "MACP_AUTH_SENDER_CLAIM (--auth-sender-claim)"},
		{a.AllowHS256, "MACP_AUTH_ALLOW_HS256 (--auth-allow-hs256)"},
		{a.HS256Secret != "", "MACP_AUTH_HS256_SECRET"},
		{a.HS256SecretFile != "", "MACP_AUTH_HS256_SECRET_FILE (--auth-hs256-secret-file)"},
	}
	if a.Issuer == "" {
		for _, s := range jwtOnly {
			if s.set {
				bad("%s is set but MACP_AUTH_ISSUER (--auth-issuer) is not: JWT authentication needs the issuer", s.name)
			}
		}
	} else {
		hsSecret := a.HS256Secret != "" || a.HS256SecretFile != ""
		switch {
		case a.JWKSJSON != "" && a.JWKSURL != "":
			bad("MACP_AUTH_JWKS_JSON and MACP_AUTH_JWKS_URL (--auth-jwks-url) are both set: use one")
		case a.JWKSJSON == "" && a.JWKSURL == "" && !(a.AllowHS256 && hsSecret):
			bad("MACP_AUTH_ISSUER (--auth-issuer) is set but no verification keys are: set MACP_AUTH_JWKS_URL (--auth-jwks-url) " +
				"or MACP_AUTH_JWKS_JSON (or, for HS256, MACP_AUTH_ALLOW_HS256=1 with MACP_AUTH_HS256_SECRET or MACP_AUTH_HS256_SECRET_FILE)")
		}
		if a.JWKSURL != "" {
			u, err := url.Parse(a.JWKSURL)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				bad("MACP_AUTH_JWKS_URL (--auth-jwks-url) %q is not an absolute http(s) URL", a.JWKSURL)
			}
		}
		if a.JWKSTTL < 0 {
			bad("MACP_AUTH_JWKS_TTL_SECS (--auth-jwks-ttl) %v must not be negative", a.JWKSTTL)
		}
		if a.HS256Secret != "" && a.HS256SecretFile != "" {
			bad("MACP_AUTH_HS256_SECRET and MACP_AUTH_HS256_SECRET_FILE (--auth-hs256-secret-file) are both set: use one")
		}
		if hsSecret && !a.AllowHS256 {
			bad("an HS256 secret is set but HS256 is not enabled: set MACP_AUTH_ALLOW_HS256=1 (--auth-allow-hs256) or remove the secret")
		}
		if a.AllowHS256 && !hsSecret && a.JWKSJSON == "" {
			bad("MACP_AUTH_ALLOW_HS256 (--auth-allow-hs256) needs a secret: set MACP_AUTH_HS256_SECRET or MACP_AUTH_HS256_SECRET_FILE " +
				"(or an \"oct\" key in MACP_AUTH_JWKS_JSON)")
		}
		if a.HS256Secret != "" && len(a.HS256Secret) < MinHS256SecretBytes {
			bad("MACP_AUTH_HS256_SECRET is %d bytes: HS256 secrets must be at least %d bytes", len(a.HS256Secret), MinHS256SecretBytes)
		}
	}

	switch a.TLSClientAuth {
	case "", ClientAuthNone, ClientAuthRequest, ClientAuthRequire:
	default:
		bad("MACP_TLS_CLIENT_AUTH (--tls-client-auth) %q: use none, request or require", a.TLSClientAuth)
	}
	if m := a.EffectiveClientAuth(); (m == ClientAuthRequest || m == ClientAuthRequire) && a.TLSClientCAPath == "" {
		bad("MACP_TLS_CLIENT_AUTH (--tls-client-auth) %s needs MACP_TLS_CLIENT_CA_PATH (--tls-client-ca)", m)
	}
	if a.TLSClientCAPath != "" {
		if a.EffectiveClientAuth() == ClientAuthNone {
			bad("MACP_TLS_CLIENT_CA_PATH (--tls-client-ca) is set but MACP_TLS_CLIENT_AUTH (--tls-client-auth) is none: " +
				"use request or require, or remove the CA")
		}
		if c.TLSCertPath == "" {
			bad("MACP_TLS_CLIENT_CA_PATH (--tls-client-ca) needs TLS: set MACP_TLS_CERT_PATH and MACP_TLS_KEY_PATH")
		}
	}
	return errs
}

// authFromEnv applies the MACP_* authentication variables.
func (c *Config) authFromEnv(lookup Env) []error {
	a := &c.Auth
	var errs []error
	str := func(name string, dst *string) {
		if v, ok := lookup(name); ok && v != "" {
			*dst = v
		}
	}
	boolean := func(name string, dst *bool) {
		if v, ok := lookup(name); ok && v != "" {
			b, err := parseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", name, err))
				return
			}
			*dst = b
		}
	}
	seconds := func(name string, dst *time.Duration) {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			const maxSecs = int64(1<<63-1) / int64(time.Second)
			if err != nil || n < 0 || n > maxSecs {
				errs = append(errs, fmt.Errorf("%s: %q is not a non-negative integer number of seconds", name, v))
				return
			}
			*dst = time.Duration(n) * time.Second
		}
	}
	boolean("MACP_ALLOW_PLAINTEXT", &a.AllowPlaintext)
	boolean("MACP_ALLOW_DEV_IDENTITIES", &a.AllowDevIdentities)
	str("MACP_AUTH_TOKENS_JSON", &a.TokensJSON)
	str("MACP_AUTH_TOKENS_FILE", &a.TokensFile)
	str("MACP_AUTH_ISSUER", &a.Issuer)
	str("MACP_AUTH_AUDIENCE", &a.Audience)
	str("MACP_AUTH_JWKS_JSON", &a.JWKSJSON)
	str("MACP_AUTH_JWKS_URL", &a.JWKSURL)
	seconds("MACP_AUTH_JWKS_TTL_SECS", &a.JWKSTTL)
	str("MACP_AUTH_SENDER_CLAIM", &a.SenderClaim)
	boolean("MACP_AUTH_ALLOW_HS256", &a.AllowHS256)
	str("MACP_AUTH_HS256_SECRET", &a.HS256Secret)
	str("MACP_AUTH_HS256_SECRET_FILE", &a.HS256SecretFile)
	str("MACP_TLS_CLIENT_CA_PATH", &a.TLSClientCAPath)
	str("MACP_TLS_CLIENT_AUTH", &a.TLSClientAuth)
	return errs
}

// registerAuthFlags binds the authentication flags. Inline secrets
// (MACP_AUTH_TOKENS_JSON, MACP_AUTH_JWKS_JSON, MACP_AUTH_HS256_SECRET) have
// no flag: command lines are visible to other local users.
func (c *Config) registerAuthFlags(fs *flag.FlagSet) {
	a := &c.Auth
	fs.BoolVar(&a.AllowPlaintext, "allow-plaintext", a.AllowPlaintext, "serve without TLS; development only (MACP_ALLOW_PLAINTEXT)")
	fs.BoolVar(&a.AllowDevIdentities, "allow-dev-identities", a.AllowDevIdentities,
		"accept the bearer token or x-macp-agent-id as the agent id; development only (MACP_ALLOW_DEV_IDENTITIES)")
	fs.StringVar(&a.TokensFile, "auth-tokens-file", a.TokensFile, "static bearer token file, reloaded on change (MACP_AUTH_TOKENS_FILE)")
	fs.StringVar(&a.Issuer, "auth-issuer", a.Issuer, "JWT issuer; enables JWT bearer authentication (MACP_AUTH_ISSUER)")
	fs.StringVar(&a.Audience, "auth-audience", a.Audience, "JWT audience, default "+DefaultAudience+" (MACP_AUTH_AUDIENCE)")
	fs.StringVar(&a.JWKSURL, "auth-jwks-url", a.JWKSURL, "JWKS endpoint for JWT verification keys (MACP_AUTH_JWKS_URL)")
	fs.DurationVar(&a.JWKSTTL, "auth-jwks-ttl", a.JWKSTTL, "JWKS cache lifetime, 0 = 5m (MACP_AUTH_JWKS_TTL_SECS, in seconds)")
	fs.StringVar(&a.SenderClaim, "auth-sender-claim", a.SenderClaim, "JWT claim naming the sender, default sub (MACP_AUTH_SENDER_CLAIM)")
	fs.BoolVar(&a.AllowHS256, "auth-allow-hs256", a.AllowHS256, "accept HS256 JWTs signed with a shared secret (MACP_AUTH_ALLOW_HS256)")
	fs.StringVar(&a.HS256SecretFile, "auth-hs256-secret-file", a.HS256SecretFile, "file holding the HS256 secret (MACP_AUTH_HS256_SECRET_FILE)")
	fs.StringVar(&a.TLSClientCAPath, "tls-client-ca", a.TLSClientCAPath, "CA certificates for verifying client certificates (MACP_TLS_CLIENT_CA_PATH)")
	fs.StringVar(&a.TLSClientAuth, "tls-client-auth", a.TLSClientAuth,
		"client certificates: none, request or require; default require with --tls-client-ca (MACP_TLS_CLIENT_AUTH)")
}
