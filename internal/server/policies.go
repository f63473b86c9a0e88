package server

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
)

// Policy registry RPCs (RFC-MACP-0012 §7; checklist RPC-18..22, POL-40).
// Register and Unregister report failure as ok=false with a free-text
// error starting with the MACP code (checklist ERR-22); GetPolicy fails
// with a gRPC status (unknown id: NOT_FOUND, UNKNOWN_POLICY_VERSION). All
// of them need an authenticated caller; mutations also need
// can_manage_mode_registry (registry.RegisterPolicy).

// RegisterPolicy registers a governance policy.
func (s *Service) RegisterPolicy(ctx context.Context, req *macpv1.RegisterPolicyRequest) (*macpv1.RegisterPolicyResponse, error) {
	id, _ := identityFrom(ctx)
	if err := s.opts.Registry.RegisterPolicy(id, req.GetPolicyDescriptor()); err != nil {
		return &macpv1.RegisterPolicyResponse{Ok: false, Error: err.Error()}, nil
	}
	return &macpv1.RegisterPolicyResponse{Ok: true}, nil
}

// UnregisterPolicy removes a registered policy for new sessions.
func (s *Service) UnregisterPolicy(ctx context.Context, req *macpv1.UnregisterPolicyRequest) (*macpv1.UnregisterPolicyResponse, error) {
	id, _ := identityFrom(ctx)
	if err := s.opts.Registry.UnregisterPolicy(id, req.GetPolicyId()); err != nil {
		return &macpv1.UnregisterPolicyResponse{Ok: false, Error: err.Error()}, nil
	}
	return &macpv1.UnregisterPolicyResponse{Ok: true}, nil
}

// GetPolicy returns one registered policy.
func (s *Service) GetPolicy(_ context.Context, req *macpv1.GetPolicyRequest) (*macpv1.GetPolicyResponse, error) {
	d, err := s.opts.Registry.GetPolicy(req.GetPolicyId())
	if err != nil {
		return nil, statusErr(err)
	}
	return &macpv1.GetPolicyResponse{PolicyDescriptor: d}, nil
}

// ListPolicies lists registered policies, built-ins included; a mode
// filter keeps that mode's and the mode-agnostic ones.
func (s *Service) ListPolicies(_ context.Context, req *macpv1.ListPoliciesRequest) (*macpv1.ListPoliciesResponse, error) {
	return &macpv1.ListPoliciesResponse{Descriptors: s.opts.Registry.Policies(req.GetMode())}, nil
}

// WatchPolicies sends the full policy list at once, then again after each
// change (RFC-MACP-0012 §7: the full descriptor set, not a hint). Changes
// that queued up while the client was slow are coalesced into one list
// (each list is complete, so only the latest matters), and a watcher the
// hub dropped for lagging just gets a fresh list.
func (s *Service) WatchPolicies(_ *macpv1.WatchPoliciesRequest, stream grpc.ServerStreamingServer[macpv1.WatchPoliciesResponse]) error {
	return s.watchHints(stream.Context(), s.opts.Registry.PolicyChanges, func(at int64) error {
		return stream.Send(&macpv1.WatchPoliciesResponse{Descriptors: s.opts.Registry.Policies(""), ObservedAtUnixMs: at})
	})
}
