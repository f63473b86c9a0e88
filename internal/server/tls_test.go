package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "macpd-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// RFC-MACP-0004 §2, checklist SEC-1: with MACP_TLS_CERT_PATH/KEY_PATH the
// runtime serves TLS (1.2 or higher) only; without the insecure switch dev
// bearer identities are not accepted (anyone could claim any identity).
func TestTLS(t *testing.T) {
	certPath, keyPath, pool := selfSigned(t, t.TempDir())
	cfg := testConfig()
	cfg.AllowInsecure = false
	cfg.Auth.TokensJSON = "[]" // an authenticator that knows no token
	cfg.TLSCertPath, cfg.TLSKeyPath = certPath, keyPath
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })

	dial := func(creds credentials.TransportCredentials) macpv1.MACPRuntimeServiceClient {
		conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return macpv1.NewMACPRuntimeServiceClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	initReq := &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}}

	c := dial(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	if _, err := c.Initialize(ctx, initReq); err != nil {
		t.Fatalf("Initialize over TLS: %v", err)
	}
	_, err = c.ListSessions(metadataBearer(ctx, "alice"), &macpv1.ListSessionsRequest{})
	wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")

	// Plaintext and TLS < 1.2 are refused.
	_, err = dial(insecure.NewCredentials()).Initialize(ctx, initReq)
	wantStatus(t, err, codes.Unavailable, "")
	_, err = dial(credentials.NewTLS(&tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11})).Initialize(ctx, initReq)
	wantStatus(t, err, codes.Unavailable, "")
	// An untrusted certificate is refused by a validating client.
	_, err = dial(credentials.NewTLS(&tls.Config{})).Initialize(ctx, initReq)
	wantStatus(t, err, codes.Unavailable, "")
}

// A TLS configuration whose files cannot be loaded fails at startup with
// an error naming the problem, not at the first connection.
func TestTLSBadFiles(t *testing.T) {
	cfg := testConfig()
	cfg.AllowInsecure = false
	cfg.Auth.TokensJSON = "[]" // so the TLS files are what fails
	cfg.TLSCertPath, cfg.TLSKeyPath = filepath.Join(t.TempDir(), "missing.pem"), filepath.Join(t.TempDir(), "missing.key")
	if _, err := app.New(cfg, nil); err == nil {
		t.Fatal("app.New accepted missing TLS files")
	}
}
