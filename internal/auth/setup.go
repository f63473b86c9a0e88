package auth

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"

	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
)

// DevCaps are the capabilities of dev identities: the defaults plus mode
// registry management (issue #3: "dev mode: allowed").
var DevCaps = coord.Capabilities{CanManageModeRegistry: true}

// FromConfig builds the authenticator chain cfg asks for, in this order
// (docs/security.md):
//
//  1. JWT bearer (MACP_AUTH_ISSUER): JWT-shaped bearer tokens only;
//  2. static tokens (MACP_AUTH_TOKENS_JSON / _FILE): other bearer tokens
//     and x-macp-token;
//  3. client certificate (MACP_TLS_CLIENT_CA_PATH): callers that sent no
//     bearer token but a verified certificate;
//  4. dev identities (MACP_ALLOW_DEV_IDENTITIES or MACP_ALLOW_INSECURE):
//     last, so configured tokens resolve to their senders first; with dev
//     identities on, an unknown static token falls through to them.
//
// A token an authenticator recognizes but refuses (an expired JWT, an
// unknown static token without dev identities) ends the chain with
// UNAUTHENTICATED. Any malformed setting, and a configuration with no
// authenticator at all, is an error: startup stops.
func FromConfig(cfg config.Config, log *slog.Logger) (Chain, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.CheckAuthenticators(); err != nil {
		return nil, err
	}
	a := cfg.Auth
	dev := cfg.DevIdentitiesAllowed()
	var chain Chain
	if a.JWTConfigured() {
		var secret []byte
		switch {
		case a.HS256Secret != "":
			secret = []byte(a.HS256Secret)
		case a.HS256SecretFile != "":
			b, err := os.ReadFile(a.HS256SecretFile)
			if err != nil {
				return nil, fmt.Errorf("MACP_AUTH_HS256_SECRET_FILE: %w", err)
			}
			// A trailing newline is an editor's, not the secret's.
			secret = bytes.TrimRight(b, "\r\n")
		}
		j, err := NewJWT(JWTOptions{
			Issuer:      a.Issuer,
			Audience:    a.EffectiveAudience(),
			JWKSJSON:    a.JWKSJSON,
			JWKSURL:     a.JWKSURL,
			JWKSTTL:     a.EffectiveJWKSTTL(),
			SenderClaim: a.EffectiveSenderClaim(),
			AllowHS256:  a.AllowHS256,
			HS256Secret: secret,
			Logger:      log,
		})
		if err != nil {
			return nil, err
		}
		chain = append(chain, j)
	}
	if a.TokensConfigured() {
		t, err := NewTokens(TokensOptions{JSON: a.TokensJSON, File: a.TokensFile, DeferUnknown: dev, Logger: log})
		if err != nil {
			return nil, err
		}
		chain = append(chain, t)
	}
	if a.MTLSConfigured() {
		chain = append(chain, MTLS{})
	}
	if dev {
		chain = append(chain, Dev{Caps: DevCaps})
		if !cfg.AllowInsecure { // app.Start warns about MACP_ALLOW_INSECURE itself
			log.Warn("dev identities are enabled (MACP_ALLOW_DEV_IDENTITIES): any caller can claim any agent id; do not use in production")
		}
	}
	return chain, nil
}
