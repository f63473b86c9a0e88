// Package inproc runs the conformance fixtures against a runtime in the
// same process (package conformance reaches a remote one over gRPC): it
// also inspects the live session's mode state and checks replay
// equivalence (RFC-MACP-0003 §4, checklist DET-7), which only an
// in-process target can. Kept apart from package conformance so that the
// remote runner (macpctl conformance) does not link the runtime.
package inproc

import (
	"context"
	"fmt"
	"reflect"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/conformance"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// Target is an in-process conformance.Target and conformance.Inspector
// over a Runtime. Every sender
// acts as a dev identity of that name.
type Target struct {
	RT *runtime.Runtime
	// Reg is the registry RT resolves policies through (runtime.New):
	// RegisterPolicy and GetPolicy use it.
	Reg *registry.Registry
}

func (l Target) id(sender string) coord.Identity { return coord.Identity{Sender: sender} }

// Send implements Target.
func (l Target) Send(ctx context.Context, sender string, env *macpv1.Envelope) (*macpv1.Ack, error) {
	return l.RT.Send(ctx, l.id(sender), env), nil
}

// Cancel implements Target.
func (l Target) Cancel(ctx context.Context, sender, sessionID, reason string) (string, error) {
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
func (l Target) GetSession(ctx context.Context, sender, sessionID string) (*macpv1.SessionMetadata, error) {
	md, err := l.RT.GetSession(ctx, l.id(sender), sessionID)
	if err != nil {
		return nil, err
	}
	return md, nil
}

// RegisterPolicy implements conformance.PolicyRegistrar as sender with the
// policy-registry grant (dev identities have it, internal/auth DevCaps).
func (l Target) RegisterPolicy(_ context.Context, sender string, pd *macpv1.PolicyDescriptor) error {
	id := l.id(sender)
	id.Caps.CanManageModeRegistry = true
	if err := l.Reg.RegisterPolicy(id, pd); err != nil {
		return err
	}
	return nil
}

// GetPolicy implements conformance.PolicyRegistrar.
func (l Target) GetPolicy(_ context.Context, _, policyID string) (*macpv1.PolicyDescriptor, error) {
	pd, err := l.Reg.GetPolicy(policyID)
	if err != nil {
		if err.Code == coord.CodeUnknownPolicyVersion {
			return nil, nil
		}
		return nil, err
	}
	return pd, nil
}

// Wait implements Target with a real sleep, so TTL timers fire as they
// would in production.
func (Target) Wait(ctx context.Context, d time.Duration) error { return conformance.Sleep(ctx, d) }

// Now implements Target.
func (Target) Now() int64 { return time.Now().UnixMilli() }

// ModeState implements Inspector.
func (l Target) ModeState(ctx context.Context, sessionID string) (map[string]any, error) {
	var st map[string]any
	if err := l.RT.Inspect(ctx, sessionID, func(s *session.Session) { st = s.ModeProjection() }); err != nil {
		return nil, err
	}
	return st, nil
}

// Resolution implements Inspector.
func (l Target) Resolution(ctx context.Context, sessionID string) (*macpv1.CommitmentPayload, error) {
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
func (l Target) CheckReplay(ctx context.Context, sessionID string) error {
	replayed, err := replay.Stored(ctx, l.RT.Store(), sessionID, replay.Options{Modes: l.RT.ReplayModes(), Limits: l.RT.Limits()})
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
		case !reflect.DeepEqual(conformance.JSONNormal(live.ModeProjection()), conformance.JSONNormal(replayed.ModeProjection())):
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
