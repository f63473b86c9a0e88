package server

import (
	"context"
	"slices"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
)

// Extension-mode lifecycle RPCs (RFC-MACP-0006 §3.6). Failures are
// reported as ok=false with a free-text error (checklist ERR-22); the text
// starts with the MACP code.

// ListExtModes lists extension modes (not standards-track ones).
func (s *Service) ListExtModes(context.Context, *macpv1.ListExtModesRequest) (*macpv1.ListExtModesResponse, error) {
	return &macpv1.ListExtModesResponse{Modes: s.opts.Registry.Modes().Descriptors(mode.Extension)}, nil
}

// determinismClasses are RFC-MACP-0003 §5's (defined by RFC-MACP-0002).
var determinismClasses = []string{"structural-only", "semantic-deterministic", "context-frozen", "non-deterministic"}

// RegisterExtMode registers a passthrough extension mode. A
// determinism_class outside RFC-MACP-0003's classes is refused
// (INVALID_ENVELOPE); an empty one defaults to structural-only.
func (s *Service) RegisterExtMode(ctx context.Context, req *macpv1.RegisterExtModeRequest) (*macpv1.RegisterExtModeResponse, error) {
	id, _ := identityFrom(ctx)
	if c := req.GetModeDescriptor().GetDeterminismClass(); c != "" && !slices.Contains(determinismClasses, c) {
		return &macpv1.RegisterExtModeResponse{Ok: false, Error: coord.Errorf(coord.CodeInvalidEnvelope,
			"determinism_class %q is not one of RFC-MACP-0003 §5's classes: %s (empty: structural-only)", c, strings.Join(determinismClasses, ", ")).Error()}, nil
	}
	if err := s.opts.Registry.RegisterExtMode(id, req.GetModeDescriptor()); err != nil {
		return &macpv1.RegisterExtModeResponse{Ok: false, Error: err.Error()}, nil
	}
	return &macpv1.RegisterExtModeResponse{Ok: true}, nil
}

// UnregisterExtMode removes a registered extension mode.
func (s *Service) UnregisterExtMode(ctx context.Context, req *macpv1.UnregisterExtModeRequest) (*macpv1.UnregisterExtModeResponse, error) {
	id, _ := identityFrom(ctx)
	if err := s.opts.Registry.UnregisterExtMode(id, req.GetMode()); err != nil {
		return &macpv1.UnregisterExtModeResponse{Ok: false, Error: err.Error()}, nil
	}
	return &macpv1.UnregisterExtModeResponse{Ok: true}, nil
}

// PromoteMode makes an extension mode standards-track.
func (s *Service) PromoteMode(ctx context.Context, req *macpv1.PromoteModeRequest) (*macpv1.PromoteModeResponse, error) {
	id, _ := identityFrom(ctx)
	name, err := s.opts.Registry.PromoteMode(id, req.GetMode(), req.GetPromotedModeName())
	if err != nil {
		return &macpv1.PromoteModeResponse{Ok: false, Error: err.Error()}, nil
	}
	return &macpv1.PromoteModeResponse{Ok: true, Mode: name}, nil
}
