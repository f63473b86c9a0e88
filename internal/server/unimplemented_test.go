package server_test

import (
	"testing"

	"google.golang.org/grpc/codes"
)

// checklist §1 RPC-18..22 (policy registry);
// server/doc.go: RPCs this build does not implement answer UNIMPLEMENTED
// (and are not advertised, TestInitializeAdvertisesExactlyWhatIsImplemented).
func TestUnimplementedRPCs(t *testing.T) {
	e := startApp(t, testConfig())
	all := rpcCalls(e.c)
	for _, name := range []string{"RegisterPolicy", "UnregisterPolicy", "GetPolicy", "ListPolicies", "WatchPolicies"} {
		call := all[name]
		t.Run(name, func(t *testing.T) {
			wantStatus(t, call(asT(t, "alice")), codes.Unimplemented, "")
		})
	}
}
