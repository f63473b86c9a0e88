package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// GRPC is a Target reached over gRPC with dev bearer identities
// (authorization: Bearer <sender>), for black-box runs against any MACP
// runtime started in development mode.
type GRPC struct {
	Client macpv1.MACPRuntimeServiceClient
	// Token maps a sender to its bearer token; nil means the sender id is
	// the token (dev identities).
	Token func(sender string) string
}

func (g GRPC) ctx(ctx context.Context, sender string) context.Context {
	tok := sender
	if g.Token != nil {
		tok = g.Token(sender)
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// Send implements Target.
func (g GRPC) Send(ctx context.Context, sender string, env *macpv1.Envelope) (*macpv1.Ack, error) {
	resp, err := g.Client.Send(g.ctx(ctx, sender), &macpv1.SendRequest{Envelope: env}, grpc.WaitForReady(true))
	if err != nil {
		return nil, err
	}
	return resp.GetAck(), nil
}

// Cancel implements Target.
func (g GRPC) Cancel(ctx context.Context, sender, sessionID, reason string) (string, error) {
	resp, err := g.Client.CancelSession(g.ctx(ctx, sender), &macpv1.CancelSessionRequest{SessionId: sessionID, Reason: reason})
	if err != nil {
		if code := CodeFromStatus(err); code != "" {
			return code, nil
		}
		return "", err
	}
	if !resp.GetAck().GetOk() {
		return resp.GetAck().GetError().GetCode(), nil
	}
	return "", nil
}

// GetSession implements Target.
func (g GRPC) GetSession(ctx context.Context, sender, sessionID string) (*macpv1.SessionMetadata, error) {
	resp, err := g.Client.GetSession(g.ctx(ctx, sender), &macpv1.GetSessionRequest{SessionId: sessionID})
	if err != nil {
		return nil, err
	}
	return resp.GetMetadata(), nil
}

// RegisterPolicy implements PolicyRegistrar: a refusal (ok=false) is an
// error carrying the runtime's text, which starts with the MACP code.
func (g GRPC) RegisterPolicy(ctx context.Context, sender string, pd *macpv1.PolicyDescriptor) error {
	resp, err := g.Client.RegisterPolicy(g.ctx(ctx, sender), &macpv1.RegisterPolicyRequest{PolicyDescriptor: pd}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if !resp.GetOk() {
		return fmt.Errorf("refused: %s", resp.GetError())
	}
	return nil
}

// GetPolicy implements PolicyRegistrar: NOT_FOUND is no policy.
func (g GRPC) GetPolicy(ctx context.Context, sender, id string) (*macpv1.PolicyDescriptor, error) {
	resp, err := g.Client.GetPolicy(g.ctx(ctx, sender), &macpv1.GetPolicyRequest{PolicyId: id}, grpc.WaitForReady(true))
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return resp.GetPolicyDescriptor(), nil
}

// Wait implements Target.
func (GRPC) Wait(ctx context.Context, d time.Duration) error { return Sleep(ctx, d) }

// Now implements Target.
func (GRPC) Now() int64 { return time.Now().UnixMilli() }

// CodeFromStatus extracts a MACP code from a gRPC status error: a
// macp.v1.MACPError detail, else a "CODE: message" prefix. "" if neither.
func CodeFromStatus(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if e, ok := d.(*macpv1.MACPError); ok && e.Code != "" {
			return e.Code
		}
	}
	if i := strings.Index(st.Message(), ":"); i > 0 {
		head := st.Message()[:i]
		if strings.ToUpper(head) == head && !strings.ContainsAny(head, " \t") {
			return head
		}
	}
	return ""
}

// Sleep waits d or until ctx ends (the Wait of the real-time targets).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
