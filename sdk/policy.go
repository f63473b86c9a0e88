package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
)

// DefaultPolicy is the always-registered policy id a session binds when
// its SessionStart names none (RFC-MACP-0012 §4).
const DefaultPolicy = "policy.default"

// NewPolicy returns a PolicyDescriptor (RFC-MACP-0012 §2) for mode (a mode
// id, or "*" for every mode) whose rules are rules marshalled as JSON: a
// map, a struct with json tags, a json.RawMessage or a JSON string. Rules
// are validated by the runtime at registration (INVALID_POLICY_DEFINITION).
func NewPolicy(id, mode, description string, rules any) (*macpv1.PolicyDescriptor, error) {
	var text string
	switch r := rules.(type) {
	case nil:
		text = "{}"
	case string:
		text = r
	case []byte:
		text = string(r)
	case json.RawMessage:
		text = string(r)
	default:
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("sdk: policy %s rules: %w", id, err)
		}
		text = string(b)
	}
	return &macpv1.PolicyDescriptor{PolicyId: id, Mode: mode, Description: description, Rules: text, SchemaVersion: 1}, nil
}

// RegisterPolicy registers a governance policy (the caller needs the
// runtime's can_manage_mode_registry capability). A refusal is an [*Error]
// (INVALID_POLICY_DEFINITION, FORBIDDEN, ...). Registering the identical
// descriptor again is not an error for macpd.
func (c *Client) RegisterPolicy(ctx context.Context, d *macpv1.PolicyDescriptor) error {
	var resp *macpv1.RegisterPolicyResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.RegisterPolicy(ctx, &macpv1.RegisterPolicyRequest{PolicyDescriptor: d})
		return err
	})
	if err != nil {
		return err
	}
	return registryError(resp.GetOk(), resp.GetError())
}

// UnregisterPolicy removes a registered policy for new sessions; sessions
// already bound to it keep it.
func (c *Client) UnregisterPolicy(ctx context.Context, policyID string) error {
	var resp *macpv1.UnregisterPolicyResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.UnregisterPolicy(ctx, &macpv1.UnregisterPolicyRequest{PolicyId: policyID})
		return err
	})
	if err != nil {
		return err
	}
	return registryError(resp.GetOk(), resp.GetError())
}

// GetPolicy returns one registered policy; an unknown id is an [*Error]
// with UNKNOWN_POLICY_VERSION.
func (c *Client) GetPolicy(ctx context.Context, policyID string) (*macpv1.PolicyDescriptor, error) {
	var resp *macpv1.GetPolicyResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.GetPolicy(ctx, &macpv1.GetPolicyRequest{PolicyId: policyID})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetPolicyDescriptor(), nil
}

// ListPolicies returns the registered policies, built-ins included; a
// non-empty mode keeps that mode's policies and the mode-agnostic ones.
func (c *Client) ListPolicies(ctx context.Context, mode string) ([]*macpv1.PolicyDescriptor, error) {
	var resp *macpv1.ListPoliciesResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.ListPolicies(ctx, &macpv1.ListPoliciesRequest{Mode: mode})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetDescriptors(), nil
}

// WatchPolicies streams the full list of registered policies at once and
// again after every change (RFC-MACP-0012 §7), like
// [Client.WatchSessions].
func (c *Client) WatchPolicies(ctx context.Context) iter.Seq2[[]*macpv1.PolicyDescriptor, error] {
	return watch(ctx, func(ctx context.Context) (grpc.ServerStreamingClient[macpv1.WatchPoliciesResponse], error) {
		return c.rpc.WatchPolicies(ctx, &macpv1.WatchPoliciesRequest{})
	}, (*macpv1.WatchPoliciesResponse).GetDescriptors)
}

// registryError turns a registry response (ok, free-text error starting
// with the MACP code) into nil or an *Error.
func registryError(ok bool, msg string) error {
	if ok {
		return nil
	}
	if c, rest, found := strings.Cut(msg, ": "); found && knownCodes[Code(c)] {
		return &Error{Code: Code(c), Message: rest}
	}
	if knownCodes[Code(msg)] {
		return &Error{Code: Code(msg)}
	}
	return &Error{Code: CodeInternalError, Message: "the runtime refused without a MACP code: " + msg}
}
