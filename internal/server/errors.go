package server

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcCode maps a MACP code to the gRPC status used on non-Ack surfaces:
// the gRPC column of coord's code table.
func grpcCode(c coord.Code) codes.Code { return codes.Code(c.Mapping().GRPC) }

// statusErr converts a MACP error to a gRPC status error carrying the code
// in its message and a MACPError detail.
func statusErr(e *coord.Error) error {
	st := status.New(grpcCode(e.Code), e.Error())
	if d, err := st.WithDetails(&macpv1.MACPError{Code: string(e.Code), Message: e.Message}); err == nil {
		st = d
	}
	return st.Err()
}
