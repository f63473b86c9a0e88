package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/tlsconf/tlstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const e2eTokens = `{"tokens": [
	{"token": "analyst-token-0123456789", "sender": "agent://analyst", "allowed_modes": ["macp.mode.decision.v1"]},
	{"token": "auditor-token-0123456789", "sender": "agent://auditor", "can_start_sessions": false, "is_observer": true}
]}`

func start(t *testing.T, cfg config.Config) *app.App {
	t.Helper()
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	return a
}

func client(t *testing.T, addr string, creds credentials.TransportCredentials) macpv1.MACPRuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return macpv1.NewMACPRuntimeServiceClient(conn)
}

func ctxWith(t *testing.T, kv ...string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// startSession sends a Decision SessionStart claiming sender "spoofed" and
// returns the session id and the ack.
func startSession(t *testing.T, c macpv1.MACPRuntimeServiceClient, ctx context.Context) (string, *macpv1.Ack, error) {
	t.Helper()
	payload, err := proto.Marshal(&macpv1.SessionStartPayload{Intent: "pick", Participants: []string{"agent://a", "agent://b"},
		ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	sid := uuid.NewString()
	r, err := c.Send(ctx, &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1",
		MessageType: "SessionStart", MessageId: "m0", SessionId: sid, Sender: "spoofed",
		TimestampUnixMs: time.Now().UnixMilli(), Payload: payload}})
	if err != nil {
		return sid, nil, err
	}
	return sid, r.Ack, nil
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
	}
}

// initiator starts a session as ctx's caller and returns GetSession's
// initiator.
func initiator(t *testing.T, c macpv1.MACPRuntimeServiceClient, ctx context.Context) string {
	t.Helper()
	sid, ack, err := startSession(t, c, ctx)
	if err != nil || !ack.Ok {
		t.Fatalf("SessionStart: %v %v", ack, err)
	}
	r, err := c.GetSession(ctx, &macpv1.GetSessionRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	return r.Metadata.Initiator
}

// issue #6, RFC-MACP-0004 §3 (checklist SEC-1, SEC-2), end to end over gRPC
// with TLS: a static-token identity starts a session and is its initiator
// (the envelope's claimed sender is ignored); x-macp-token works too; its
// capabilities apply; an unknown token is UNAUTHENTICATED; dev identities
// are off; discovery stays public.
func TestEndToEndStaticTokensOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.BindAddr = "127.0.0.1:0"
	cfg.TLSCertPath, cfg.TLSKeyPath = ca.Server(t, "macpd").Write(t, dir, "server")
	cfg.Auth.TokensJSON = e2eTokens
	a := start(t, cfg)
	c := client(t, a.Addr(), credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}))

	if _, err := c.Initialize(ctxWith(t), &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}}); err != nil {
		t.Fatalf("Initialize without credentials: %v", err)
	}
	if got := initiator(t, c, ctxWith(t, "authorization", "Bearer analyst-token-0123456789")); got != "agent://analyst" {
		t.Fatalf("initiator %q, want agent://analyst", got)
	}
	if got := initiator(t, c, ctxWith(t, "x-macp-token", "analyst-token-0123456789")); got != "agent://analyst" {
		t.Fatalf("x-macp-token: initiator %q", got)
	}
	// The auditor may not start sessions but may observe them.
	_, ack, err := startSession(t, c, ctxWith(t, "authorization", "Bearer auditor-token-0123456789"))
	if err == nil && (ack.Ok || ack.Error.GetCode() != "FORBIDDEN") {
		t.Errorf("auditor SessionStart: %v", ack)
	} else if err != nil {
		wantCode(t, "auditor SessionStart", err, codes.PermissionDenied)
	}
	sid, ack, err := startSession(t, c, ctxWith(t, "authorization", "Bearer analyst-token-0123456789"))
	if err != nil || !ack.Ok {
		t.Fatal(ack, err)
	}
	if r, err := c.GetSession(ctxWith(t, "authorization", "Bearer auditor-token-0123456789"), &macpv1.GetSessionRequest{SessionId: sid}); err != nil ||
		r.Metadata.Initiator != "agent://analyst" {
		t.Errorf("observer GetSession: %v %v", r, err)
	}

	for name, ctx := range map[string]context.Context{
		"unknown token":        ctxWith(t, "authorization", "Bearer agent://analyst"),
		"unknown x-macp-token": ctxWith(t, "x-macp-token", "nope"),
		"dev header":           ctxWith(t, "x-macp-agent-id", "agent://analyst"),
		"no credentials":       ctxWith(t),
	} {
		_, _, err := startSession(t, c, ctx)
		wantCode(t, name, err, codes.Unauthenticated)
		_, err = c.ListSessions(ctx, &macpv1.ListSessionsRequest{})
		wantCode(t, name+" (ListSessions)", err, codes.Unauthenticated)
	}
	// Plaintext to the TLS port fails.
	_, err = client(t, a.Addr(), insecure.NewCredentials()).Initialize(ctxWith(t), &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}})
	wantCode(t, "plaintext to TLS", err, codes.Unavailable)
}

// SEC-1: plaintext needs an explicit switch; MACP_ALLOW_PLAINTEXT does not
// enable dev identities. No authenticator at all refuses to start.
func TestEndToEndSwitches(t *testing.T) {
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Auth.TokensJSON = e2eTokens
	_, err := app.New(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "MACP_ALLOW_PLAINTEXT") || !strings.Contains(err.Error(), "MACP_TLS_CERT_PATH") {
		t.Fatalf("plaintext without the switch: %v", err)
	}

	cfg.Auth.AllowPlaintext = true
	a := start(t, cfg)
	c := client(t, a.Addr(), insecure.NewCredentials())
	if got := initiator(t, c, ctxWith(t, "authorization", "Bearer analyst-token-0123456789")); got != "agent://analyst" {
		t.Fatalf("initiator %q", got)
	}
	_, _, err = startSession(t, c, ctxWith(t, "authorization", "Bearer coord"))
	wantCode(t, "dev bearer with MACP_ALLOW_PLAINTEXT only", err, codes.Unauthenticated)

	// MACP_ALLOW_DEV_IDENTITIES: configured tokens first, then dev identities.
	cfg.Auth.AllowDevIdentities = true
	a = start(t, cfg)
	c = client(t, a.Addr(), insecure.NewCredentials())
	if got := initiator(t, c, ctxWith(t, "authorization", "Bearer analyst-token-0123456789")); got != "agent://analyst" {
		t.Fatalf("static token with dev identities: initiator %q", got)
	}
	if got := initiator(t, c, ctxWith(t, "authorization", "Bearer coord")); got != "coord" {
		t.Fatalf("dev identity: initiator %q", got)
	}

	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cfg = config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.BindAddr = "127.0.0.1:0"
	cfg.TLSCertPath, cfg.TLSKeyPath = ca.Server(t, "macpd").Write(t, dir, "server")
	_, err = app.New(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "no authenticator") || !strings.Contains(err.Error(), "MACP_AUTH_TOKENS_FILE") {
		t.Fatalf("no authenticator: %v", err)
	}
	cfg.Auth.TokensJSON = `[{"token": "x"}]`
	if _, err = app.New(cfg, nil); err == nil || !strings.Contains(err.Error(), "MACP_AUTH_TOKENS_JSON") {
		t.Fatalf("malformed tokens: %v", err)
	}
}

// Client certificates (MACP_TLS_CLIENT_CA_PATH, MACP_TLS_CLIENT_AUTH=
// require): the verified certificate's URI SAN is the sender; a bearer
// token, when sent, takes precedence; a client without a certificate is
// refused at the handshake.
func TestEndToEndMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "server-ca")
	clientCA := tlstest.NewCA(t, "client-ca")
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.BindAddr = "127.0.0.1:0"
	cfg.TLSCertPath, cfg.TLSKeyPath = ca.Server(t, "macpd").Write(t, dir, "server")
	cfg.Auth.TLSClientCAPath = clientCA.WriteCert(t, dir, "clients.pem")
	cfg.Auth.TokensJSON = e2eTokens
	a := start(t, cfg)
	cert := clientCA.Client(t, "planner", []string{"spiffe://example.org/agent/planner"}, []string{"planner.example"}).TLSCertificate(t)
	c := client(t, a.Addr(), credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}}))
	if got := initiator(t, c, ctxWith(t)); got != "spiffe://example.org/agent/planner" {
		t.Fatalf("certificate identity: initiator %q", got)
	}
	if got := initiator(t, c, ctxWith(t, "authorization", "Bearer analyst-token-0123456789")); got != "agent://analyst" {
		t.Fatalf("bearer over mTLS: initiator %q", got)
	}
	_, _, err := startSession(t, c, ctxWith(t, "authorization", "Bearer unknown"))
	wantCode(t, "unknown bearer over mTLS", err, codes.Unauthenticated)

	noCert := client(t, a.Addr(), credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()}))
	_, err = noCert.Initialize(ctxWith(t), &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}})
	wantCode(t, "no client certificate", err, codes.Unavailable)
}

// JWT bearer end to end: the token's sub is the initiator.
func TestEndToEndJWT(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	set, _ := json.Marshal(map[string]any{"keys": []any{map[string]any{"kty": "RSA", "kid": "k1",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.BindAddr = "127.0.0.1:0"
	cfg.TLSCertPath, cfg.TLSKeyPath = ca.Server(t, "macpd").Write(t, dir, "server")
	cfg.Auth.Issuer, cfg.Auth.JWKSJSON = "https://issuer.test", string(set)
	a := start(t, cfg)
	c := client(t, a.Addr(), credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()}))
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": "https://issuer.test", "aud": "macp-runtime",
		"sub": "agent://jwt", "exp": time.Now().Add(time.Minute).Unix()})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	if got := initiator(t, c, ctxWith(t, "authorization", "Bearer "+s)); got != "agent://jwt" {
		t.Fatalf("initiator %q", got)
	}
	expired := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": "https://issuer.test", "aud": "macp-runtime",
		"sub": "agent://jwt", "exp": time.Now().Add(-time.Hour).Unix()})
	expired.Header["kid"] = "k1"
	s, _ = expired.SignedString(key)
	_, _, err = startSession(t, c, ctxWith(t, "authorization", "Bearer "+s))
	wantCode(t, "expired JWT", err, codes.Unauthenticated)
}
