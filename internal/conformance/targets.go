package conformance

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Local is an in-process Target and Inspector over a Runtime. Every sender
// acts as a dev identity of that name.
type Local struct {
	RT *runtime.Runtime
}

func (l Local) id(sender string) coord.Identity { return coord.Identity{Sender: sender} }

// Send implements Target.
func (l Local) Send(ctx context.Context, sender string, env *macpv1.Envelope) (*macpv1.Ack, error) {
	return l.RT.Send(ctx, l.id(sender), env), nil
}

// Cancel implements Target.
func (l Local) Cancel(ctx context.Context, sender, sessionID, reason string) (string, error) {
	ack, err := l.RT.Cancel(ctx, l.id(sender), sessionID, reason)
	if err != nil {
		return string(err.Code), nil
	}
	if !ack.Ok {
		return ack.GetError().GetCode(), nil
	}
	return "", nil
}

// GetSession implements Target.
func (l Local) GetSession(ctx context.Context, sender, sessionID string) (*macpv1.SessionMetadata, error) {
	md, err := l.RT.GetSession(ctx, l.id(sender), sessionID)
	if err != nil {
		return nil, err
	}
	return md, nil
}

// Wait implements Target with a real sleep, so TTL timers fire as they
// would in production.
func (Local) Wait(ctx context.Context, d time.Duration) error { return sleep(ctx, d) }

// Now implements Target.
func (Local) Now() int64 { return time.Now().UnixMilli() }

// ModeState implements Inspector.
func (l Local) ModeState(ctx context.Context, sessionID string) (map[string]any, error) {
	var st map[string]any
	if err := l.RT.Inspect(ctx, sessionID, func(s *session.Session) { st = s.ModeProjection() }); err != nil {
		return nil, err
	}
	return st, nil
}

// Resolution implements Inspector.
func (l Local) Resolution(ctx context.Context, sessionID string) (*macpv1.CommitmentPayload, error) {
	var r *macpv1.CommitmentPayload
	if err := l.RT.Inspect(ctx, sessionID, func(s *session.Session) { r = s.Resolution }); err != nil {
		return nil, err
	}
	return r, nil
}

// CheckReplay implements Inspector (RFC-MACP-0003 §4, checklist DET-7):
// the stored history, replayed into a fresh core, must give the same
// metadata, state, resolution, dedup set and mode state as the live
// session.
func (l Local) CheckReplay(ctx context.Context, sessionID string) error {
	var replayed *session.Session
	err := l.RT.Store().Read(ctx, sessionID, 1, func(rec session.Record) error {
		if replayed == nil {
			s, err := session.Restore(rec, l.RT.Modes())
			replayed = s
			return err
		}
		return replayed.Apply(rec, l.RT.Limits())
	})
	if err != nil {
		return err
	}
	var diff string
	ierr := l.RT.Inspect(ctx, sessionID, func(live *session.Session) {
		switch {
		case !proto.Equal(live.Metadata(), replayed.Metadata()):
			diff = fmt.Sprintf("metadata differs:\nlive     %v\nreplayed %v", live.Metadata(), replayed.Metadata())
		case live.Status != replayed.Status || live.Seq != replayed.Seq:
			diff = fmt.Sprintf("state/seq differ: live %v/%d replayed %v/%d", live.Status, live.Seq, replayed.Status, replayed.Seq)
		case !proto.Equal(live.Resolution, replayed.Resolution):
			diff = "resolution differs"
		case !reflect.DeepEqual(live.SeenIDs(), replayed.SeenIDs()):
			diff = "dedup sets differ"
		case !reflect.DeepEqual(jsonRoundTrip(live.ModeProjection()), jsonRoundTrip(replayed.ModeProjection())):
			diff = fmt.Sprintf("mode state differs:\nlive     %v\nreplayed %v", live.ModeProjection(), replayed.ModeProjection())
		}
	})
	if ierr != nil {
		return ierr
	}
	if diff != "" {
		return fmt.Errorf("%s", diff)
	}
	return nil
}

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

// Wait implements Target.
func (GRPC) Wait(ctx context.Context, d time.Duration) error { return sleep(ctx, d) }

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

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
