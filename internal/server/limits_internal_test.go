package server

import (
	"context"
	"errors"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MACP_UNARY_TIMEOUT_MS: every unary MACP call runs under the server's
// deadline; an earlier client deadline stays; a handler that fails
// because of it answers DEADLINE_EXCEEDED.
func TestUnaryTimeout(t *testing.T) {
	s := &Service{opts: Options{Limits: Limits{UnaryTimeout: 50 * time.Millisecond}}}
	info := &grpc.UnaryServerInfo{FullMethod: macpv1.MACPRuntimeService_GetSession_FullMethodName}
	var deadline time.Time
	_, err := s.limitUnary(context.Background(), nil, info, func(ctx context.Context, _ any) (any, error) {
		deadline, _ = ctx.Deadline()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if d := time.Until(deadline); deadline.IsZero() || d > 0 || d < -time.Second {
		t.Fatalf("server deadline %v (until: %v)", deadline, d)
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("error %v, want DEADLINE_EXCEEDED", err)
	}
	// An earlier client deadline is kept.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	want, _ := ctx.Deadline()
	_, _ = s.limitUnary(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
		deadline, _ = ctx.Deadline()
		return nil, nil
	})
	if !deadline.Equal(want) {
		t.Fatalf("deadline %v, want the client's %v", deadline, want)
	}
	// A status error from the handler is kept as it is.
	_, err = s.limitUnary(context.Background(), nil, info, func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done()
		return nil, status.Error(codes.Internal, "x")
	})
	if status.Code(err) != codes.Internal {
		t.Fatalf("status error replaced: %v", err)
	}
	// No limit: the context is the caller's.
	s.opts.Limits.UnaryTimeout = 0
	_, err = s.limitUnary(context.Background(), nil, info, func(ctx context.Context, _ any) (any, error) {
		if _, ok := ctx.Deadline(); ok {
			return nil, errors.New("deadline without a limit")
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
