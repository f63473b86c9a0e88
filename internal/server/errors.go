package server

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcCode maps a MACP code to the gRPC status used on non-Ack surfaces.
func grpcCode(c coord.Code) codes.Code {
	switch c {
	case coord.CodeUnauthenticated:
		return codes.Unauthenticated
	case coord.CodeForbidden, coord.CodeUnauthorized:
		return codes.PermissionDenied
	case coord.CodeSessionNotFound, coord.CodeUnknownPolicyVersion:
		return codes.NotFound
	case coord.CodeSessionAlreadyExists:
		return codes.AlreadyExists
	case coord.CodePayloadTooLarge, coord.CodeRateLimited:
		return codes.ResourceExhausted
	case coord.CodeInvalidEnvelope, coord.CodeInvalidSessionID, coord.CodeInvalidPolicyDefinition:
		return codes.InvalidArgument
	case coord.CodeInternalError:
		return codes.Internal
	default: // SESSION_NOT_OPEN, DUPLICATE_MESSAGE, UNSUPPORTED_PROTOCOL_VERSION, MODE_NOT_SUPPORTED, POLICY_DENIED
		return codes.FailedPrecondition
	}
}

// statusErr converts a MACP error to a gRPC status error carrying the code
// in its message and a MACPError detail.
func statusErr(e *coord.Error) error {
	st := status.New(grpcCode(e.Code), e.Error())
	if d, err := st.WithDetails(&macpv1.MACPError{Code: string(e.Code), Message: e.Message}); err == nil {
		st = d
	}
	return st.Err()
}
