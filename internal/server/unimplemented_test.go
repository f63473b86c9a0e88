package server_test

import (
	"context"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/codes"
)

// checklist §1 RPC-3 (StreamSession) and RPC-18..22 (policy registry);
// server/doc.go: RPCs this build does not implement answer UNIMPLEMENTED
// (and are not advertised, TestInitializeAdvertisesExactlyWhatIsImplemented).
func TestUnimplementedRPCs(t *testing.T) {
	e := startApp(t, testConfig())
	c := e.c
	calls := map[string]func(context.Context) error{
		"RegisterPolicy": func(ctx context.Context) error {
			_, err := c.RegisterPolicy(ctx, &macpv1.RegisterPolicyRequest{})
			return err
		},
		"UnregisterPolicy": func(ctx context.Context) error {
			_, err := c.UnregisterPolicy(ctx, &macpv1.UnregisterPolicyRequest{})
			return err
		},
		"GetPolicy": func(ctx context.Context) error {
			_, err := c.GetPolicy(ctx, &macpv1.GetPolicyRequest{})
			return err
		},
		"ListPolicies": func(ctx context.Context) error {
			_, err := c.ListPolicies(ctx, &macpv1.ListPoliciesRequest{})
			return err
		},
		"StreamSession": func(ctx context.Context) error {
			s, err := c.StreamSession(ctx)
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"WatchPolicies": func(ctx context.Context) error {
			s, err := c.WatchPolicies(ctx, &macpv1.WatchPoliciesRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			wantStatus(t, call(asT(t, "alice")), codes.Unimplemented, "")
		})
	}
}
