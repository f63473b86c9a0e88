package registry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
	"google.golang.org/protobuf/proto"
)

var adminID = coord.Identity{Sender: "agent://admin", Caps: coord.Capabilities{CanManageModeRegistry: true}}

// metaFailStore fails PutMeta while fail is set.
type metaFailStore struct {
	store.Store
	fail bool
}

func (s *metaFailStore) PutMeta(ctx context.Context, key string, val []byte) error {
	if s.fail {
		return errors.New("disk full")
	}
	return s.Store.PutMeta(ctx, key, val)
}

func testPolicy(id string) *macpv1.PolicyDescriptor {
	return &macpv1.PolicyDescriptor{PolicyId: id, Mode: "macp.mode.decision.v1", Rules: `{"voting":{"algorithm":"majority"}}`, SchemaVersion: 1}
}

// A registration is acknowledged only once stored: a failed store write is
// INTERNAL_ERROR and leaves the registry (and its watchers) unchanged.
func TestRegisterPolicyNotStoredNotRegistered(t *testing.T) {
	st := &metaFailStore{Store: memstore.New()}
	r := newReg(t, st)
	sub := r.PolicyChanges.Subscribe()
	defer r.PolicyChanges.Unsubscribe(sub)
	st.fail = true
	if err := r.RegisterPolicy(adminID, testPolicy("policy.t.a")); coord.CodeOf(err) != coord.CodeInternalError {
		t.Fatalf("RegisterPolicy with a failing store: %v", err)
	}
	if _, ok := r.policies.Policy("policy.t.a"); ok {
		t.Fatal("an unstored registration resolves")
	}
	if len(sub.C) != 0 {
		t.Fatal("an unstored registration was announced")
	}
	st.fail = false
	if err := r.RegisterPolicy(adminID, testPolicy("policy.t.a")); err != nil {
		t.Fatal(err)
	}
	st.fail = true
	if err := r.UnregisterPolicy(adminID, "policy.t.a"); coord.CodeOf(err) != coord.CodeInternalError {
		t.Fatalf("UnregisterPolicy with a failing store: %v", err)
	}
	if _, ok := r.policies.Policy("policy.t.a"); !ok {
		t.Fatal("an unstored unregistration took effect")
	}
}

// extraBuiltins is a built-in Lookup with one more policy than the default.
type extraBuiltins struct{}

func (extraBuiltins) Policy(id string) (policy.Descriptor, bool) {
	if id == "policy.site.strict" {
		return policy.Descriptor{ID: id, Mode: "*", Rules: `{}`, SchemaVersion: 1}, true
	}
	return policy.DefaultOnly{}.Policy(id)
}

func (extraBuiltins) Policies() []policy.Descriptor {
	d, _ := extraBuiltins{}.Policy("policy.site.strict")
	return []policy.Descriptor{d, policy.Default()}
}

// The policies given to New are built in: listed, resolvable, and neither
// registrable nor removable; a stored registration under a built-in id is
// ignored at boot.
func TestBuiltinPoliciesProtected(t *testing.T) {
	st := memstore.New()
	b, err := encodePolicy(policyActive, registeredPolicy{desc: policy.Descriptor{ID: "policy.site.strict", Mode: "*", Rules: `{"x":1}`, SchemaVersion: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutMeta(context.Background(), policyStoreKey("policy.site.strict"), b); err != nil {
		t.Fatal(err)
	}
	r := New(st, testModes(), extraBuiltins{}, Options{})
	if err := r.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.Policies(""); len(got) != 2 || got[0].PolicyId != "policy.default" || got[1].PolicyId != "policy.site.strict" || got[1].Rules != "{}" {
		t.Fatalf("Policies = %v", got)
	}
	for _, id := range []string{"policy.default", "policy.site.strict"} {
		d := testPolicy(id)
		if err := r.RegisterPolicy(adminID, d); coord.CodeOf(err) != coord.CodeForbidden {
			t.Errorf("RegisterPolicy(%s) = %v", id, err)
		}
		if err := r.UnregisterPolicy(adminID, id); coord.CodeOf(err) != coord.CodeForbidden {
			t.Errorf("UnregisterPolicy(%s) = %v", id, err)
		}
	}
}

// A stored registration that does not decode fails Load (so the start) (as a corrupt
// extension-mode registration does) rather than silently losing a policy
// that sessions may be started under.
func TestCorruptStoredPolicyFailsLoad(t *testing.T) {
	for name, val := range map[string][]byte{
		"empty":         {},
		"unknown state": append([]byte{'X'}, mustMarshal(testPolicy("policy.t.a"))...),
		"not a proto":   {policyActive, 0xff, 0xff},
		"no id":         {policyActive},
	} {
		st := memstore.New()
		if err := st.PutMeta(context.Background(), policyStoreKey("policy.t.a"), val); err != nil {
			t.Fatal(err)
		}
		r := New(st, testModes(), policy.DefaultOnly{}, Options{})
		err := r.Load(context.Background())
		if err == nil || !strings.Contains(err.Error(), "registered policies") {
			t.Errorf("%s: Load = %v", name, err)
		}
	}
	// A value stored under another id's key.
	st := memstore.New()
	b, _ := encodePolicy(policyActive, registeredPolicy{desc: policy.Descriptor{ID: "policy.t.b", Mode: "*", Rules: "{}", SchemaVersion: 1}})
	_ = st.PutMeta(context.Background(), policyStoreKey("policy.t.a"), b)
	r := New(st, testModes(), policy.DefaultOnly{}, Options{})
	if err := r.Load(context.Background()); err == nil {
		t.Fatal("Load accepted a registration filed under another id")
	}
}

// Registrations are serialized: of concurrent registrations of one id
// exactly one wins, and the lookup the core uses sees it.
func TestConcurrentPolicyRegistration(t *testing.T) {
	r := newReg(t, memstore.New())
	const n = 16
	errs := make(chan *coord.Error, n)
	for range n {
		go func() { errs <- r.RegisterPolicy(adminID, testPolicy("policy.t.race")) }()
	}
	var ok int
	for range n {
		if err := <-errs; err == nil {
			ok++
		} else if err.Code != coord.CodeInvalidPolicyDefinition {
			t.Errorf("loser: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d registrations of one id succeeded", ok)
	}
	if d, found := r.policies.Policy("policy.t.race"); !found || d.Rules != testPolicy("").Rules {
		t.Fatalf("lookup %v %v", d, found)
	}
	if ids := r.Policies("macp.mode.decision.v1"); !slices.ContainsFunc(ids, func(d *macpv1.PolicyDescriptor) bool { return d.PolicyId == "policy.t.race" }) {
		t.Fatalf("Policies %v", ids)
	}
}

// newReg is a Registry over st with the decision mode, loaded.
func newReg(t *testing.T, st MetaStore) *Registry {
	t.Helper()
	r := New(st, testModes(), policy.DefaultOnly{}, Options{})
	if err := r.Load(context.Background()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return r
}

func testModes() *mode.Registry {
	return mode.NewRegistry(mode.Entry{Mode: decision.New(), Kind: mode.Standard, BuiltIn: true})
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
