package registry

import (
	"context"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/store/memstore"
)

// Reload (another node changed the registries, internal/cluster) adds the
// registrations stored since, drops the ones no longer active, keeps the
// built-ins, and notifies both watches; ReplayModes still finds a mode
// unregistered elsewhere, for its stored sessions.
func TestReloadFollowsTheStore(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	a, b := newReg(t, st), newReg(t, st)
	modesSub, polSub := b.ModeChanges.Subscribe(), b.PolicyChanges.Subscribe()
	defer b.ModeChanges.Unsubscribe(modesSub)
	defer b.PolicyChanges.Unsubscribe(polSub)

	desc := &macpv1.ModeDescriptor{Mode: "ext.vote.v1", ModeVersion: "1.0.0", MessageTypes: []string{"Ballot"}}
	if err := a.RegisterExtMode(adminID, desc); err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterPolicy(adminID, testPolicy("policy.t.shared")); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Lookup("ext.vote.v1"); ok {
		t.Fatal("b sees a's mode before reloading")
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Lookup("ext.vote.v1"); !ok {
		t.Fatal("reload did not add the mode")
	}
	if _, ok := b.Policy("policy.t.shared"); !ok {
		t.Fatal("reload did not add the policy")
	}
	if len(modesSub.C) != 1 || len(polSub.C) != 1 {
		t.Fatalf("hints: %d mode, %d policy", len(modesSub.C), len(polSub.C))
	}

	if err := a.UnregisterExtMode(adminID, "ext.vote.v1"); err != nil {
		t.Fatal(err)
	}
	if err := a.UnregisterPolicy(adminID, "policy.t.shared"); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Lookup("ext.vote.v1"); ok {
		t.Fatal("reload kept an unregistered mode for new sessions")
	}
	if _, ok := b.ReplayModes().Lookup("ext.vote.v1"); !ok {
		t.Fatal("a retired mode no longer replays")
	}
	if _, ok := b.Policy("policy.t.shared"); ok {
		t.Fatal("reload kept an unregistered policy")
	}
	if _, ok := b.Lookup("macp.mode.decision.v1"); !ok {
		t.Fatal("reload dropped a built-in mode")
	}
	if _, ok := b.Policy("policy.default"); !ok {
		t.Fatal("reload dropped the default policy")
	}
}
