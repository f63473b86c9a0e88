package loadgen

import (
	"context"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
)

// EchoService implements only MACPRuntimeService.Send, answering every
// envelope at once with an ok Ack: no authentication, validation or
// storage. It is the transport ceiling a runtime's Send is compared with.
type EchoService struct {
	macpv1.UnimplementedMACPRuntimeServiceServer
}

// Send acknowledges env.
func (EchoService) Send(_ context.Context, req *macpv1.SendRequest) (*macpv1.SendResponse, error) {
	env := req.GetEnvelope()
	return &macpv1.SendResponse{Ack: &macpv1.Ack{
		Ok: true, MessageId: env.GetMessageId(), SessionId: env.GetSessionId(),
		AcceptedAtUnixMs: time.Now().UnixMilli(), SessionState: macpv1.SessionState_SESSION_STATE_OPEN,
	}}, nil
}

// NewEchoServer returns a gRPC server with EchoService registered.
func NewEchoServer(opts ...grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(opts...)
	macpv1.RegisterMACPRuntimeServiceServer(g, EchoService{})
	return g
}
