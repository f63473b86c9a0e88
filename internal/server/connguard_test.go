package server_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// docs/security.md "Limits" (MACP_FIRST_CALL_TIMEOUT_MS): a connection
// that made an authenticated call is not closed by the first-call deadline, over
// plaintext and over TLS (the guard finds the call's connection by the
// peer address gRPC took from it), while one that made none is; and the
// first call of a connection accepted while another one waits is seen too.
func TestFirstCallDeadlineSparesConnectionsThatCalled(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		name := "plaintext"
		if withTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Limits.FirstCallTimeout = 300 * time.Millisecond
			creds := insecure.NewCredentials()
			if withTLS {
				certPath, keyPath, pool := selfSigned(t, t.TempDir())
				cfg.TLSCertPath, cfg.TLSKeyPath = certPath, keyPath
				creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
			}
			a := startApp(t, cfg).app // its own client is not used here

			// An idle connection: it waits for its first call until reaped.
			idle, err := net.Dial("tcp", a.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer idle.Close()
			if !withTLS {
				if _, err := idle.Write([]byte(http2.ClientPreface)); err != nil {
					t.Fatal(err)
				}
			}

			conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := macpv1.NewMACPRuntimeServiceClient(conn)
			ctx, cancel := context.WithTimeout(as("alice"), 10*time.Second)
			defer cancel()
			call := func() {
				t.Helper()
				if _, err := c.Initialize(ctx, &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}}); err != nil {
					t.Fatalf("Initialize: %v", err)
				}
			}
			call()
			// Past the deadline several times over: the idle connection is
			// closed, the one that called is not.
			_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 4096)
			for {
				if _, err := idle.Read(buf); err != nil {
					break // closed by the server (a read timeout would fail below)
				}
			}
			time.Sleep(3 * cfg.Limits.FirstCallTimeout)
			if s := conn.GetState(); s != connectivity.Ready && s != connectivity.Idle {
				t.Fatalf("the connection that called is %v after the first-call deadline", s)
			}
			before := conn.GetState()
			call()
			_, reaped := a.Service().ConnGuardStats()
			if reaped != 1 {
				t.Fatalf("connections closed for making no call: %d, want 1 (the idle one); client state before the second call: %v", reaped, before)
			}
		})
	}
}

// docs/security.md "Limits", issue 26 item 3: a connection that made only
// unauthenticated calls gets the first-call deadline again once its last
// call ended (it does not keep MACP_MAX_CONNECTION_IDLE_MS), while one
// that authenticated keeps it.
func TestAnonymousCallsDoNotBuyTheIdleLimit(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.FirstCallTimeout = 300 * time.Millisecond
	a := startApp(t, cfg).app
	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	anon, authed := dial(), dial()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	init := func(ctx context.Context, conn *grpc.ClientConn) {
		t.Helper()
		if _, err := macpv1.NewMACPRuntimeServiceClient(conn).Initialize(ctx, &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}}); err != nil {
			t.Fatalf("Initialize: %v", err)
		}
	}
	init(ctx, anon) // no credentials: a public method
	authCtx, cancel2 := context.WithTimeout(as("alice"), 10*time.Second)
	defer cancel2()
	init(authCtx, authed)
	eventually(t, "the anonymous connection reaped", func() bool {
		_, reaped := a.Service().ConnGuardStats()
		return reaped >= 1
	})
	// Well past the deadline: the authenticated connection was not closed.
	time.Sleep(3 * cfg.Limits.FirstCallTimeout)
	if _, reaped := a.Service().ConnGuardStats(); reaped != 1 {
		t.Fatalf("connections reaped: %d, want 1 (the anonymous one)", reaped)
	}
	if s := authed.GetState(); s != connectivity.Ready && s != connectivity.Idle {
		t.Fatalf("the authenticated connection is %v", s)
	}
}
