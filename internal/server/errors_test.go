package server

import (
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcCode covers the whole error registry (checklist §4, ERR-1..17). The
// spec defines no gRPC mapping (ERR-21); this is the documented one, which
// follows the reference runtime's and, where that says "everything else ->
// FAILED_PRECONDITION", the registry's HTTP class (404 -> NOT_FOUND,
// CANCEL-1).
func TestGRPCCodeCoversRegistry(t *testing.T) {
	table := []struct {
		c    coord.Code
		want codes.Code
	}{
		{coord.CodeUnauthenticated, codes.Unauthenticated},               // ERR-1
		{coord.CodeForbidden, codes.PermissionDenied},                    // ERR-2
		{coord.CodeSessionNotFound, codes.NotFound},                      // ERR-3
		{coord.CodeSessionNotOpen, codes.FailedPrecondition},             // ERR-4
		{coord.CodeDuplicateMessage, codes.FailedPrecondition},           // ERR-5
		{coord.CodeSessionAlreadyExists, codes.AlreadyExists},            // ERR-6
		{coord.CodeInvalidEnvelope, codes.InvalidArgument},               // ERR-7
		{coord.CodeUnsupportedProtocolVersion, codes.FailedPrecondition}, // ERR-8 (INIT-2 [RT])
		{coord.CodeModeNotSupported, codes.FailedPrecondition},           // ERR-9
		{coord.CodePayloadTooLarge, codes.ResourceExhausted},             // ERR-10
		{coord.CodeRateLimited, codes.ResourceExhausted},                 // ERR-11
		{coord.CodeInvalidSessionID, codes.InvalidArgument},              // ERR-12
		{coord.CodeInternalError, codes.Internal},                        // ERR-13
		{coord.CodeUnknownPolicyVersion, codes.NotFound},                 // ERR-14
		{coord.CodePolicyDenied, codes.FailedPrecondition},               // ERR-15 ([RT])
		{coord.CodeInvalidPolicyDefinition, codes.InvalidArgument},       // ERR-16
		{coord.CodeUnauthorized, codes.PermissionDenied},                 // ERR-17 (alias of FORBIDDEN)
	}
	if len(table) != 17 {
		t.Fatalf("table has %d codes, the registry 17", len(table))
	}
	seen := map[coord.Code]bool{}
	for _, tc := range table {
		if seen[tc.c] {
			t.Fatalf("%s listed twice", tc.c)
		}
		seen[tc.c] = true
		if got := grpcCode(tc.c); got != tc.want {
			t.Errorf("grpcCode(%s) = %v, want %v", tc.c, got, tc.want)
		}
		// Never OK or Unknown: a failure must stay a failure a client can
		// classify.
		if got := grpcCode(tc.c); got == codes.OK || got == codes.Unknown {
			t.Errorf("grpcCode(%s) = %v", tc.c, got)
		}
	}
}

// statusErr carries the MACP code in the message prefix and as a MACPError
// detail (server/doc.go; checklist ERR-20).
func TestStatusErrCarriesCode(t *testing.T) {
	err := statusErr(coord.Errorf(coord.CodeSessionNotFound, "session %s not found", "s1"))
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.NotFound {
		t.Fatalf("status %v", err)
	}
	if !strings.HasPrefix(st.Message(), "SESSION_NOT_FOUND: ") {
		t.Fatalf("message %q", st.Message())
	}
	if len(st.Details()) != 1 {
		t.Fatalf("details %v", st.Details())
	}
	me, ok := st.Details()[0].(*macpv1.MACPError)
	if !ok || me.Code != "SESSION_NOT_FOUND" || me.Message != "session s1 not found" {
		t.Fatalf("detail %v", st.Details()[0])
	}
}
