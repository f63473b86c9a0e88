package server

import (
	"context"
	"testing"

	"github.com/macpd/macpd/internal/auth"
	"google.golang.org/grpc/metadata"
)

// authenticateIncoming reads the credentials without building a map or a
// Credentials per call: what is left is the copy of the bearer value
// grpc's metadata lookup makes.
func TestAuthenticateIncomingAllocs(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{
		"authorization": {"Bearer alice"}, "user-agent": {"grpc-go"}, "x-other": {"v"},
	})
	var a auth.Authenticator = auth.Dev{}
	if id, err := authenticateIncoming(ctx, a); err != nil || id.Sender != "alice" {
		t.Fatalf("authenticateIncoming = %+v, %v", id, err)
	}
	n := testing.AllocsPerRun(200, func() { _, _ = authenticateIncoming(ctx, a) })
	t.Logf("allocs per call: %v", n)
	if n > 1 {
		t.Fatalf("%v allocations per call, want at most 1", n)
	}
}
