package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// server/doc.go: Initialize advertises exactly what this build implements
// (TestInitializeAdvertisesExactlyWhatIsImplemented), and this build
// implements every RPC of the service, the policy registry (checklist
// RPC-18..22) included: none answers UNIMPLEMENTED to an authenticated
// caller. Streams that wait for input or events end by the short deadline.
func TestNoRPCUnimplemented(t *testing.T) {
	e := startApp(t, testConfig())
	for name, call := range rpcCalls(e.c) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(as("alice"), 300*time.Millisecond)
			defer cancel()
			if err := call(ctx); status.Code(err) == codes.Unimplemented {
				t.Fatalf("%s: %v", name, err)
			}
		})
	}
}
