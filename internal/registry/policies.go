package registry

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
)

// The policy registry (RFC-MACP-0012 §7). It is the policy.Lookup the core
// resolves SessionStart policy_version against: built-in policies (those
// of the Lookup given to New; policy.default always) first, then dynamic
// registrations. A session keeps the descriptor it resolved (recorded in
// its SessionStart record, session.StartInfo), so registry changes never
// affect started sessions or replay (§6.1, §8).
//
// Registrations are stored durably in the store's meta space before they
// are acknowledged (like extension modes) and restored by Load.
// Unregistered policies stay stored as retired: an id is immutable (§2.3),
// so it can be registered again only with the same mode, schema_version
// and rules.

// policyRegistry resolves policy ids. Reads are lock-free (an immutable
// map swapped atomically); changes are serialized by Registry.polMu.
type policyRegistry struct {
	builtin  policy.Lookup
	builtins []policy.Descriptor // listed built-ins, sorted by id
	active   atomic.Pointer[map[string]registeredPolicy]
}

func newPolicyRegistry(builtin policy.Lookup) *policyRegistry {
	if builtin == nil {
		builtin = policy.DefaultOnly{}
	}
	p := &policyRegistry{builtin: builtin}
	if l, ok := builtin.(policy.Lister); ok {
		p.builtins = l.Policies()
	}
	if !slices.ContainsFunc(p.builtins, func(d policy.Descriptor) bool { return d.ID == coord.DefaultPolicyID }) {
		p.builtins = append(p.builtins, policy.Default())
	}
	slices.SortFunc(p.builtins, func(a, b policy.Descriptor) int { return cmp.Compare(a.ID, b.ID) })
	empty := map[string]registeredPolicy{}
	p.active.Store(&empty)
	return p
}

// Policy implements policy.Lookup.
func (p *policyRegistry) Policy(id string) (policy.Descriptor, bool) {
	if d, ok := p.builtinPolicy(id); ok {
		return d, true
	}
	e, ok := (*p.active.Load())[id]
	return e.desc, ok
}

func (p *policyRegistry) builtinPolicy(id string) (policy.Descriptor, bool) {
	if id == coord.DefaultPolicyID {
		if d, ok := p.builtin.Policy(id); ok {
			return d, true
		}
		return policy.Default(), true
	}
	return p.builtin.Policy(id)
}

// with returns the active set with e added (or, when add is false, id
// removed); the caller stores it.
func (p *policyRegistry) with(id string, e registeredPolicy, add bool) *map[string]registeredPolicy {
	n := maps.Clone(*p.active.Load())
	if add {
		n[id] = e
	} else {
		delete(n, id)
	}
	return &n
}

// Policies lists the registered policies (built-ins included), sorted by
// id. A non-empty modeFilter keeps the policies for that mode and the
// mode-agnostic ("*") ones (checklist POL-40: the spec is silent; the
// reference runtime includes them, and such a policy binds to sessions of
// every mode).
func (r *Registry) Policies(modeFilter string) []*macpv1.PolicyDescriptor {
	var out []*macpv1.PolicyDescriptor
	keep := func(m string) bool { return modeFilter == "" || m == modeFilter || m == "*" }
	for _, d := range r.policies.builtins {
		if keep(d.Mode) {
			out = append(out, registeredPolicy{desc: d}.proto())
		}
	}
	active := *r.policies.active.Load()
	for _, id := range slices.Sorted(maps.Keys(active)) {
		if e := active[id]; keep(e.desc.Mode) {
			out = append(out, e.proto())
		}
	}
	slices.SortFunc(out, func(a, b *macpv1.PolicyDescriptor) int { return cmp.Compare(a.PolicyId, b.PolicyId) })
	return out
}

// GetPolicy returns one registered policy; an unknown id is
// UNKNOWN_POLICY_VERSION (NOT_FOUND on the wire, checklist POL-40).
func (r *Registry) GetPolicy(id string) (*macpv1.PolicyDescriptor, *coord.Error) {
	if id == "" {
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "policy_id is required")
	}
	if d, ok := r.policies.builtinPolicy(id); ok {
		return registeredPolicy{desc: d}.proto(), nil
	}
	if e, ok := (*r.policies.active.Load())[id]; ok {
		return e.proto(), nil
	}
	return nil, coord.Errorf(coord.CodeUnknownPolicyVersion, "policy %q is not registered", id)
}

// mayManagePolicies: policy registry mutations need the mode-registry
// grant (the spec names no policy capability; checklist EXT-5, SEC-10).
func mayManagePolicies(id coord.Identity) *coord.Error {
	if !id.Caps.CanManageModeRegistry {
		return coord.Errorf(coord.CodeForbidden, "%s may not manage the policy registry (needs can_manage_mode_registry)", id.Sender)
	}
	return nil
}

// RegisterPolicy validates and durably registers a policy (RFC-MACP-0012
// §7). registered_at_unix_ms is set here; the caller's value is ignored.
func (r *Registry) RegisterPolicy(id coord.Identity, pd *macpv1.PolicyDescriptor) *coord.Error {
	if err := mayManagePolicies(id); err != nil {
		return err
	}
	if pd == nil {
		return coord.Errorf(coord.CodeInvalidPolicyDefinition, "policy_descriptor is required")
	}
	if err := r.checkDescriptorSize("policy", pd); err != nil { // limits.go
		return err
	}
	d := policy.Descriptor{ID: pd.PolicyId, Mode: pd.Mode, Description: pd.Description, Rules: pd.Rules, SchemaVersion: pd.SchemaVersion}
	if _, builtin := r.policies.builtinPolicy(d.ID); builtin {
		return coord.Errorf(coord.CodeForbidden, "policy %q is built in and reserved; it cannot be registered (RFC-MACP-0012 §2.2)", d.ID)
	}
	p, err := policy.CheckRegistration(d)
	if err != nil {
		return coord.AsError(err)
	}
	if err := r.checkPolicyModes(p); err != nil {
		return err
	}
	r.polMu.Lock()
	defer r.polMu.Unlock()
	if _, exists := (*r.policies.active.Load())[d.ID]; exists {
		return coord.Errorf(coord.CodeInvalidPolicyDefinition,
			"policy %q is already registered; policy ids are immutable, register the new rules under a new id (RFC-MACP-0012 §2.3, §7)", d.ID)
	}
	if err := r.checkPolicyRoom(pd); err != nil { // limits.go
		return err
	}
	if old, was := r.retiredPolicies[d.ID]; was && !old.sameRules(d) {
		return coord.Errorf(coord.CodeInvalidPolicyDefinition,
			"policy %q was registered before with other rules; policy ids are immutable, choose a new id (RFC-MACP-0012 §2.3)", d.ID)
	}
	e := registeredPolicy{desc: d, registeredAtMs: r.nowMs()}
	if err := r.persistPolicy(policyActive, e); err != nil {
		return err
	}
	delete(r.retiredPolicies, d.ID)
	r.policies.active.Store(r.policies.with(d.ID, e, true))
	r.PolicyChanges.Publish(r.nowMs())
	r.log.Info("policy registered", "policy_id", d.ID, "mode", d.Mode, "by", id.Sender)
	return nil
}

// checkPolicyModes validates p's rules against its target mode, which must
// be registered; a mode-agnostic ("*") policy binds to sessions of every
// mode, so its rules are validated against every registered mode that can
// check rules without a session (mode.RulesValidator). A policy no session
// could bind to is INVALID_POLICY_DEFINITION (RFC-MACP-0012 §7, §10).
func (r *Registry) checkPolicyModes(p *policy.Policy) *coord.Error {
	reg := r.modes.Load()
	target := p.Descriptor.Mode
	ids := []string{target}
	if target == "*" {
		ids = reg.IDs()
		slices.Sort(ids)
	} else if _, ok := reg.Lookup(target); !ok {
		return coord.Errorf(coord.CodeInvalidPolicyDefinition, "mode %q is not registered in this runtime (a mode id, or * for any mode)", target)
	}
	for _, m := range ids {
		e, ok := reg.Lookup(m)
		if !ok {
			continue
		}
		v, ok := e.Mode.(mode.RulesValidator)
		if !ok {
			continue
		}
		if err := v.ValidateRules(p); err != nil {
			ce := coord.AsErrorCode(err, coord.CodeInvalidPolicyDefinition)
			return coord.Errorf(coord.CodeInvalidPolicyDefinition, "rules are not valid for %s: %s", m, ce.Message)
		}
	}
	return nil
}

// UnregisterPolicy removes a registered policy for new sessions; sessions
// that already resolved it keep it (RFC-MACP-0012 §7).
func (r *Registry) UnregisterPolicy(id coord.Identity, policyID string) *coord.Error {
	if err := mayManagePolicies(id); err != nil {
		return err
	}
	if policyID == "" {
		return coord.Errorf(coord.CodeInvalidPolicyDefinition, "policy_id is required")
	}
	if _, builtin := r.policies.builtinPolicy(policyID); builtin {
		return coord.Errorf(coord.CodeForbidden, "policy %q is built in and cannot be unregistered (RFC-MACP-0012 §7)", policyID)
	}
	r.polMu.Lock()
	defer r.polMu.Unlock()
	e, ok := (*r.policies.active.Load())[policyID]
	if !ok {
		return coord.Errorf(coord.CodeUnknownPolicyVersion, "policy %q is not registered", policyID)
	}
	if err := r.persistPolicy(policyRetired, e); err != nil {
		return err
	}
	r.retiredPolicies[policyID] = e
	r.policies.active.Store(r.policies.with(policyID, registeredPolicy{}, false))
	r.PolicyChanges.Publish(r.nowMs())
	r.log.Info("policy unregistered", "policy_id", policyID, "by", id.Sender)
	return nil
}

func (r *Registry) persistPolicy(state byte, e registeredPolicy) *coord.Error {
	b, err := encodePolicy(state, e)
	if err != nil {
		return coord.Errorf(coord.CodeInternalError, "encoding policy descriptor")
	}
	if err := r.store.PutMeta(context.Background(), policyStoreKey(e.desc.ID), b); err != nil {
		r.log.Error("storing policy registration failed", "policy_id", e.desc.ID, "err", err)
		return coord.Errorf(coord.CodeInternalError, "the policy registration could not be stored")
	}
	return nil
}

// loadPolicies restores durable registrations at boot. They were validated
// when registered and are not validated again (a SessionStart still runs
// the mode's checks); a stored id that is now built in is ignored.
func (r *Registry) loadPolicies(ctx context.Context) error {
	r.polMu.Lock()
	defer r.polMu.Unlock()
	active := maps.Clone(*r.policies.active.Load())
	err := r.store.ListMeta(ctx, policyStorePrefix, func(key string, val []byte) error {
		state, e, err := decodePolicy(val)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if key != policyStoreKey(e.desc.ID) {
			return fmt.Errorf("%s: holds policy %q", key, e.desc.ID)
		}
		if _, builtin := r.policies.builtinPolicy(e.desc.ID); builtin {
			r.log.Warn("stored policy registration shadowed by a built-in policy; ignored", "policy_id", e.desc.ID)
			return nil
		}
		switch state {
		case policyActive:
			active[e.desc.ID] = e
		case policyRetired:
			r.retiredPolicies[e.desc.ID] = e
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.policies.active.Store(&active)
	return nil
}
