// Package apptest starts an in-process macpd for the tests of other
// packages and dials it: one way to do it, so a change to how an App is
// configured for tests is made once. It imports testing and internal/app:
// tests and test-support packages only.
package apptest

import (
	"context"
	"testing"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// Start starts macpd on 127.0.0.1:0, plaintext with dev identities (a
// bearer value is the sender), history in memory, after applying mutate
// to the configuration; it shuts down when the test ends.
func Start(t testing.TB, mutate ...func(*config.Config)) *app.App {
	t.Helper()
	cfg := config.Default()
	cfg.MemoryOnly = true // tests keep history in memory; the durable default has its own tests
	cfg.BindAddr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	for _, m := range mutate {
		m(&cfg)
	}
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

// Dial opens a plaintext gRPC connection to addr, closed when the test
// ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// As is a context whose calls authenticate as agent (a dev identity).
func As(agent string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+agent)
}
