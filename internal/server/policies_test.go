package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/server"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
	"google.golang.org/grpc/codes"
)

// majorityRules: a majority of cast votes must approve, and any declared
// participant may commit (the default is the initiator only).
const majorityRules = `{"voting":{"algorithm":"majority"},"commitment":{"authority":"any_participant"}}`

func decisionPolicy(id, rules string) *macpv1.PolicyDescriptor {
	return &macpv1.PolicyDescriptor{PolicyId: id, Mode: decisionMode, Description: "test policy", Rules: rules, SchemaVersion: 1}
}

func policyIDs(ds []*macpv1.PolicyDescriptor) []string {
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.PolicyId)
	}
	return ids
}

func (e *testEnv) registerPolicy(t *testing.T, d *macpv1.PolicyDescriptor) {
	t.Helper()
	r, err := e.c.RegisterPolicy(as("admin"), &macpv1.RegisterPolicyRequest{PolicyDescriptor: d})
	if err != nil || !r.Ok {
		t.Fatalf("RegisterPolicy %s: %v %v", d.GetPolicyId(), r, err)
	}
}

func (e *testEnv) unregisterPolicy(t *testing.T, id string) {
	t.Helper()
	r, err := e.c.UnregisterPolicy(as("admin"), &macpv1.UnregisterPolicyRequest{PolicyId: id})
	if err != nil || !r.Ok {
		t.Fatalf("UnregisterPolicy %s: %v %v", id, r, err)
	}
}

// wantRefused asserts an ok=false registry answer whose free-text error
// starts with the MACP code (checklist ERR-22).
func wantRefused(t *testing.T, what string, ok bool, msg, code string) {
	t.Helper()
	if ok || !strings.HasPrefix(msg, code+": ") {
		t.Errorf("%s: ok=%v error=%q, want ok=false and an error starting with %s", what, ok, msg, code)
	}
}

// startPolicySession starts a Decision session bound to policyID.
func startPolicySession(t *testing.T, policyID string, participants ...string) *macpv1.Envelope {
	sid := uuid.NewString()
	return envelope(sid, "SessionStart", "start-"+sid, mustMarshal(t, &macpv1.SessionStartPayload{Intent: "pick",
		Participants: participants, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", PolicyVersion: policyID, TtlMs: 60000}))
}

func votePayload(t *testing.T, vote string) []byte {
	return mustMarshal(t, &decisionv1.VotePayload{ProposalId: "p1", Vote: vote})
}

// waitList reads WatchPolicies lists until one has exactly the ids want
// (lists are complete, and changes that queue up while a watcher is slow
// are coalesced into one list, so intermediate lists may be skipped).
func waitList(t *testing.T, lists <-chan recvResult[*macpv1.WatchPoliciesResponse], want ...string) {
	t.Helper()
	for {
		m := next(t, lists)
		if m.ObservedAtUnixMs <= 0 {
			t.Fatalf("WatchPolicies list without observed_at: %v", m)
		}
		if slices.Equal(policyIDs(m.Descriptors), want) {
			return
		}
	}
}

// RFC-MACP-0012 §7, §9; checklist RPC-18..22, POL-40, POL-41: the policy
// registry over gRPC. policy.default is always listed; a registered
// policy is returned by GetPolicy with a runtime-set registered_at, listed
// (with the mode filter, which keeps mode-agnostic policies), sent to
// WatchPolicies as the full list on every change, and removed by
// UnregisterPolicy.
func TestPolicyLifecycle(t *testing.T) {
	e := startApp(t, testConfig())
	w, err := e.c.WatchPolicies(asT(t, "alice"), &macpv1.WatchPoliciesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	lists := recvAsync(w)
	if got := policyIDs(next(t, lists).Descriptors); !slices.Equal(got, []string{"policy.default"}) {
		t.Fatalf("initial WatchPolicies list %v", got)
	}

	def, err := e.c.GetPolicy(as("alice"), &macpv1.GetPolicyRequest{PolicyId: "policy.default"})
	if err != nil {
		t.Fatal(err)
	}
	if d := def.PolicyDescriptor; d.Mode != "*" || d.Rules != "{}" || d.SchemaVersion != 1 {
		t.Fatalf("policy.default = %v", d)
	}

	before := time.Now().UnixMilli()
	d := decisionPolicy("policy.test.majority", majorityRules)
	d.RegisteredAtUnixMs = 42 // runtime-set; ignored on register (PROTO-60)
	e.registerPolicy(t, d)
	waitList(t, lists, "policy.default", "policy.test.majority")
	g, err := e.c.GetPolicy(as("bob"), &macpv1.GetPolicyRequest{PolicyId: "policy.test.majority"})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.PolicyDescriptor; got.Mode != decisionMode || got.Rules != majorityRules || got.Description != "test policy" ||
		got.SchemaVersion != 1 || got.RegisteredAtUnixMs < before {
		t.Fatalf("GetPolicy = %v", got)
	}
	e.registerPolicy(t, &macpv1.PolicyDescriptor{PolicyId: "policy.test.any-initiator", Mode: "*", Rules: `{}`, SchemaVersion: 1})
	e.registerPolicy(t, &macpv1.PolicyDescriptor{PolicyId: "policy.test.task", Mode: "macp.mode.task.v1",
		Rules: `{"completion":{"require_output":true}}`, SchemaVersion: 1})
	waitList(t, lists, "policy.default", "policy.test.any-initiator", "policy.test.majority", "policy.test.task")

	for filter, want := range map[string][]string{
		"":                  {"policy.default", "policy.test.any-initiator", "policy.test.majority", "policy.test.task"},
		decisionMode:        {"policy.default", "policy.test.any-initiator", "policy.test.majority"},
		"macp.mode.task.v1": {"policy.default", "policy.test.any-initiator", "policy.test.task"},
		"ext.none.v1":       {"policy.default", "policy.test.any-initiator"},
	} {
		l, err := e.c.ListPolicies(as("alice"), &macpv1.ListPoliciesRequest{Mode: filter})
		if err != nil {
			t.Fatal(err)
		}
		if got := policyIDs(l.Descriptors); !slices.Equal(got, want) {
			t.Errorf("ListPolicies(%q) = %v, want %v", filter, got, want)
		}
	}

	e.unregisterPolicy(t, "policy.test.majority")
	waitList(t, lists, "policy.default", "policy.test.any-initiator", "policy.test.task")
	_, err = e.c.GetPolicy(as("alice"), &macpv1.GetPolicyRequest{PolicyId: "policy.test.majority"})
	wantStatus(t, err, codes.NotFound, "UNKNOWN_POLICY_VERSION")
	// The same id with the same rules may come back (ids are immutable,
	// not single-use).
	e.registerPolicy(t, decisionPolicy("policy.test.majority", majorityRules))
	waitList(t, lists, "policy.default", "policy.test.any-initiator", "policy.test.majority", "policy.test.task")
}

// RFC-MACP-0012 §2, §3, §7, §10; checklist POL-1..3, ERR-16, ERR-22:
// every refused registration is ok=false with an error starting with its
// MACP code, and changes nothing.
func TestPolicyRegisterRejects(t *testing.T) {
	e := startApp(t, testConfig())
	e.registerPolicy(t, decisionPolicy("policy.test.taken", majorityRules))
	e.registerPolicy(t, decisionPolicy("policy.test.retired", majorityRules))
	e.unregisterPolicy(t, "policy.test.retired")

	pd := func(mut func(d *macpv1.PolicyDescriptor)) *macpv1.PolicyDescriptor {
		d := decisionPolicy("policy.test.new", majorityRules)
		mut(d)
		return d
	}
	const bad = "INVALID_POLICY_DEFINITION"
	for _, c := range []struct {
		name string
		d    *macpv1.PolicyDescriptor
		code string
	}{
		{"no descriptor", nil, bad},
		{"empty policy_id", pd(func(d *macpv1.PolicyDescriptor) { d.PolicyId = "" }), bad},
		{"policy_id with a space", pd(func(d *macpv1.PolicyDescriptor) { d.PolicyId = "policy.my policy" }), bad},
		{"policy_id starting with a dot", pd(func(d *macpv1.PolicyDescriptor) { d.PolicyId = ".policy.x" }), bad},
		{"policy_id too long", pd(func(d *macpv1.PolicyDescriptor) { d.PolicyId = "p" + strings.Repeat("x", 256) }), bad},
		{"policy.default is reserved", pd(func(d *macpv1.PolicyDescriptor) { d.PolicyId = "policy.default"; d.Mode = "*"; d.Rules = "{}" }), "FORBIDDEN"},
		{"duplicate id", pd(func(d *macpv1.PolicyDescriptor) { d.PolicyId = "policy.test.taken" }), bad},
		{"duplicate id, identical descriptor", decisionPolicy("policy.test.taken", majorityRules), bad},
		{"retired id with other rules", pd(func(d *macpv1.PolicyDescriptor) { d.PolicyId = "policy.test.retired"; d.Rules = "{}" }), bad},
		{"no mode", pd(func(d *macpv1.PolicyDescriptor) { d.Mode = "" }), bad},
		{"unknown mode", pd(func(d *macpv1.PolicyDescriptor) { d.Mode = "ext.none.v1" }), bad},
		{"schema_version 0", pd(func(d *macpv1.PolicyDescriptor) { d.SchemaVersion = 0 }), bad},
		{"schema_version 4", pd(func(d *macpv1.PolicyDescriptor) { d.SchemaVersion = 4 }), bad},
		{"no rules", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = "" }), bad},
		{"rules not JSON", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = "{voting" }), bad},
		{"rules an array", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = "[]" }), bad},
		{"rules null", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = "null" }), bad},
		{"rules with trailing data", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = "{} {}" }), bad},
		{"rules too long", pd(func(d *macpv1.PolicyDescriptor) {
			d.Rules = `{"x":"` + strings.Repeat("a", 64<<10) + `"}`
		}), bad},
		{"unknown commitment.authority", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = `{"commitment":{"authority":"anyone"}}` }), bad},
		{"designated_role without roles", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = `{"commitment":{"authority":"designated_role"}}` }), bad},
		{"decision: unknown voting.algorithm", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = `{"voting":{"algorithm":"loudest"}}` }), bad},
		{"decision: supermajority at 0.5", pd(func(d *macpv1.PolicyDescriptor) {
			d.Rules = `{"voting":{"algorithm":"supermajority","threshold":0.5}}`
		}), bad},
		{"decision: weighted without weights", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = `{"voting":{"algorithm":"weighted"}}` }), bad},
		{"decision: voting not an object", pd(func(d *macpv1.PolicyDescriptor) { d.Rules = `{"voting":"majority"}` }), bad},
		{"proposal: unknown criterion", pd(func(d *macpv1.PolicyDescriptor) {
			d.Mode = "macp.mode.proposal.v1"
			d.Rules = `{"acceptance":{"criterion":"loudest"}}`
		}), bad},
		{"task: require_output not a boolean", pd(func(d *macpv1.PolicyDescriptor) {
			d.Mode = "macp.mode.task.v1"
			d.Rules = `{"completion":{"require_output":"yes"}}`
		}), bad},
		{"handoff: implicit accept timeout not an integer", pd(func(d *macpv1.PolicyDescriptor) {
			d.Mode = "macp.mode.handoff.v1"
			d.Rules = `{"acceptance":{"implicit_accept_timeout_ms":5000.5}}`
		}), bad},
		{"quorum: unknown threshold.type", pd(func(d *macpv1.PolicyDescriptor) {
			d.Mode = "macp.mode.quorum.v1"
			d.Rules = `{"threshold":{"type":"most","value":2}}`
		}), bad},
		{"quorum: percentage above 1", pd(func(d *macpv1.PolicyDescriptor) {
			d.Mode = "macp.mode.quorum.v1"
			d.Rules = `{"threshold":{"type":"percentage","value":60}}`
		}), bad},
		{"*: rules one mode could never use", pd(func(d *macpv1.PolicyDescriptor) {
			d.Mode = "*"
			d.Rules = `{"voting":{"algorithm":"loudest"}}`
		}), bad},
	} {
		r, err := e.c.RegisterPolicy(as("admin"), &macpv1.RegisterPolicyRequest{PolicyDescriptor: c.d})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantRefused(t, c.name, r.Ok, r.Error, c.code)
	}
	l, err := e.c.ListPolicies(as("admin"), &macpv1.ListPoliciesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := policyIDs(l.Descriptors); !slices.Equal(got, []string{"policy.default", "policy.test.taken"}) {
		t.Fatalf("refused registrations changed the registry: %v", got)
	}
	g, err := e.c.GetPolicy(as("admin"), &macpv1.GetPolicyRequest{PolicyId: "policy.test.taken"})
	if err != nil || g.PolicyDescriptor.Rules != majorityRules {
		t.Fatalf("duplicate registration replaced the policy: %v %v", g, err)
	}

	// Accepted: the same rules under a retired id; rules checked only as far
	// as no session exists (a quorum threshold above a session's
	// participants is refused at that SessionStart instead).
	e.registerPolicy(t, decisionPolicy("policy.test.retired", majorityRules))
	e.registerPolicy(t, &macpv1.PolicyDescriptor{PolicyId: "policy.test.quorum5", Mode: "macp.mode.quorum.v1",
		Rules: `{"threshold":{"type":"n_of_m","value":5}}`, SchemaVersion: 1})

	for _, c := range []struct {
		name, id, code string
	}{
		{"policy.default", "policy.default", "FORBIDDEN"},
		{"unknown", "policy.test.none", "UNKNOWN_POLICY_VERSION"},
		{"empty id", "", bad},
	} {
		r, err := e.c.UnregisterPolicy(as("admin"), &macpv1.UnregisterPolicyRequest{PolicyId: c.id})
		if err != nil {
			t.Fatalf("unregister %s: %v", c.name, err)
		}
		wantRefused(t, "unregister "+c.name, r.Ok, r.Error, c.code)
	}
	_, err = e.c.GetPolicy(as("alice"), &macpv1.GetPolicyRequest{PolicyId: "policy.test.none"})
	wantStatus(t, err, codes.NotFound, "UNKNOWN_POLICY_VERSION")
	_, err = e.c.GetPolicy(as("alice"), &macpv1.GetPolicyRequest{})
	wantStatus(t, err, codes.InvalidArgument, bad)
	if _, err := e.c.GetPolicy(as("alice"), &macpv1.GetPolicyRequest{PolicyId: "policy.default"}); err != nil {
		t.Fatalf("policy.default after the refused unregister: %v", err)
	}
}

// checklist SEC-10: without the can_manage_mode_registry grant, registry
// mutations are FORBIDDEN and change nothing; reads need only
// authentication.
func TestPolicyMutationsNeedGrant(t *testing.T) {
	e, _, _ := startService(t, server.Options{}) // auth.Dev{} without grants
	r, err := e.c.RegisterPolicy(as("alice"), &macpv1.RegisterPolicyRequest{PolicyDescriptor: decisionPolicy("policy.test.x", majorityRules)})
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "register", r.Ok, r.Error, "FORBIDDEN")
	u, err := e.c.UnregisterPolicy(as("alice"), &macpv1.UnregisterPolicyRequest{PolicyId: "policy.default"})
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "unregister", u.Ok, u.Error, "FORBIDDEN")
	l, err := e.c.ListPolicies(as("alice"), &macpv1.ListPoliciesRequest{})
	if err != nil || !slices.Equal(policyIDs(l.Descriptors), []string{"policy.default"}) {
		t.Fatalf("ListPolicies %v %v", l, err)
	}
}

// RFC-MACP-0012 §6.1, §6.2, §7; checklist START-9, POL-20, POL-21: a
// SessionStart naming a registered policy binds it, and its rules govern
// the Commitment; unregistering the policy refuses new sessions
// (UNKNOWN_POLICY_VERSION) but does not change the started one. A policy
// for another mode is INVALID_POLICY_DEFINITION at SessionStart, and so is
// a registered quorum threshold the session's participants cannot reach.
func TestSessionBindsRegisteredPolicy(t *testing.T) {
	e := startApp(t, testConfig())
	const pid = "policy.test.majority"
	e.registerPolicy(t, decisionPolicy(pid, majorityRules))

	start := startPolicySession(t, pid, "alice", "bob", "carol")
	sid := start.SessionId
	e.mustAccept(t, "coord", start)
	if md := e.getSession(t, "alice", sid); md.PolicyVersion != pid {
		t.Fatalf("session policy_version %q, want %q", md.PolicyVersion, pid)
	}
	e.mustAccept(t, "coord", envelope(sid, "Proposal", "p1", proposalPayload(t, "p1")))

	// Unregistering affects new sessions only.
	e.unregisterPolicy(t, pid)
	wantNack(t, e.send(t, "coord", startPolicySession(t, pid, "alice", "bob")), "UNKNOWN_POLICY_VERSION")

	// The bound rules still apply: no votes, no majority.
	commit := func(id string) *macpv1.Envelope {
		c := &macpv1.CommitmentPayload{CommitmentId: id, Action: "decision.selected", AuthorityScope: "s",
			Reason: "r", ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", PolicyVersion: pid, OutcomePositive: true}
		return envelope(sid, "Commitment", id, mustMarshal(t, c))
	}
	wantNack(t, e.send(t, "bob", commit("c1")), "POLICY_DENIED")
	e.mustAccept(t, "alice", envelope(sid, "Vote", "v1", votePayload(t, "APPROVE")))
	e.mustAccept(t, "bob", envelope(sid, "Vote", "v2", votePayload(t, "REJECT")))
	wantNack(t, e.send(t, "bob", commit("c2")), "POLICY_DENIED") // 1 of 2 is not more than half
	e.mustAccept(t, "carol", envelope(sid, "Vote", "v3", votePayload(t, "APPROVE")))
	// bob is a declared participant: any_participant lets him commit.
	if ack := e.mustAccept(t, "bob", commit("c3")); ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("commitment did not resolve: %v", ack)
	}

	// A policy for another mode.
	e.registerPolicy(t, &macpv1.PolicyDescriptor{PolicyId: "policy.test.task", Mode: "macp.mode.task.v1", Rules: `{}`, SchemaVersion: 1})
	wantNack(t, e.send(t, "coord", startPolicySession(t, "policy.test.task", "alice", "bob")), "INVALID_POLICY_DEFINITION")
	// A quorum threshold above the session's participants.
	e.registerPolicy(t, &macpv1.PolicyDescriptor{PolicyId: "policy.test.quorum5", Mode: "macp.mode.quorum.v1",
		Rules: `{"threshold":{"type":"n_of_m","value":5}}`, SchemaVersion: 1})
	q := startPolicySession(t, "policy.test.quorum5", "alice", "bob")
	q.Mode = "macp.mode.quorum.v1"
	wantNack(t, e.send(t, "coord", q), "INVALID_POLICY_DEFINITION")
}

// RFC-MACP-0012 §2.3, §6.1, §8; checklist POL-21, POL-22: registrations
// are durable. After a restart on the same data directory the active
// policies are back with their registration time, an unregistered one is
// still unregistered and its id still immutable, and a session started
// under a policy that was unregistered before the restart replays bound to
// the stored descriptor and is still governed by it. Every stored history
// verifies (hash chain and replay) offline.
func TestPoliciesSurviveRestart(t *testing.T) {
	cfg := testConfig()
	cfg.MemoryOnly = false
	cfg.DataDir = t.TempDir()
	boot := func() (*testEnv, func()) {
		e := startApp(t, cfg)
		return e, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := e.app.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	e, stop := boot()
	e.registerPolicy(t, decisionPolicy("policy.test.kept", `{"voting":{"algorithm":"unanimous"}}`))
	e.registerPolicy(t, decisionPolicy("policy.test.dropped", majorityRules))
	kept, err := e.c.GetPolicy(as("alice"), &macpv1.GetPolicyRequest{PolicyId: "policy.test.kept"})
	if err != nil {
		t.Fatal(err)
	}
	start := startPolicySession(t, "policy.test.dropped", "alice", "bob")
	sid := start.SessionId
	e.mustAccept(t, "coord", start)
	e.mustAccept(t, "coord", envelope(sid, "Proposal", "p1", proposalPayload(t, "p1")))
	e.unregisterPolicy(t, "policy.test.dropped")
	stop()

	e, stop = boot()
	g, err := e.c.GetPolicy(as("alice"), &macpv1.GetPolicyRequest{PolicyId: "policy.test.kept"})
	if err != nil || g.PolicyDescriptor.String() != kept.PolicyDescriptor.String() {
		t.Fatalf("after restart GetPolicy = %v %v, want %v", g, err, kept)
	}
	_, err = e.c.GetPolicy(as("alice"), &macpv1.GetPolicyRequest{PolicyId: "policy.test.dropped"})
	wantStatus(t, err, codes.NotFound, "UNKNOWN_POLICY_VERSION")
	r, err := e.c.RegisterPolicy(as("admin"), &macpv1.RegisterPolicyRequest{PolicyDescriptor: decisionPolicy("policy.test.dropped", "{}")})
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "re-register a retired id with other rules after restart", r.Ok, r.Error, "INVALID_POLICY_DEFINITION")
	r, err = e.c.RegisterPolicy(as("admin"), &macpv1.RegisterPolicyRequest{PolicyDescriptor: decisionPolicy("policy.test.kept", "{}")})
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "re-register an active id after restart", r.Ok, r.Error, "INVALID_POLICY_DEFINITION")

	// The replayed session is still bound to the dropped policy.
	if md := e.getSession(t, "alice", sid); md.PolicyVersion != "policy.test.dropped" || md.State != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("after restart: %v", md)
	}
	commit := func(id string) *macpv1.Envelope {
		c := &macpv1.CommitmentPayload{CommitmentId: id, Action: "decision.selected", AuthorityScope: "s",
			Reason: "r", ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", OutcomePositive: true}
		return envelope(sid, "Commitment", id, mustMarshal(t, c))
	}
	wantNack(t, e.send(t, "bob", commit("c1")), "POLICY_DENIED")
	e.mustAccept(t, "alice", envelope(sid, "Vote", "v1", votePayload(t, "APPROVE")))
	e.mustAccept(t, "bob", commit("c2"))
	// A new session under the kept policy.
	e.mustAccept(t, "coord", startPolicySession(t, "policy.test.kept", "alice"))
	stop()

	st, err := pebblestore.Open(cfg.DataDir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ok, failed, err := verify.Verify(context.Background(), st, builtin.Modes(), session.DefaultLimits(), func(r verify.SessionResult) {
		if !r.OK() {
			t.Errorf("verify %s: %v", r.SessionID, r.Err)
		}
	})
	if err != nil || ok != 2 || failed != 0 {
		t.Fatalf("verify: %d ok, %d failed, %v", ok, failed, err)
	}
}

// RFC-MACP-0012 §4, §7 (checklist POL-3, POL-50..55): each of the five
// standard modes checks its rule schema at RegisterPolicy
// (mode.RulesValidator), so a policy a session of the mode could never use
// is refused when registered, not at every SessionStart.
func TestStandardModesValidateRules(t *testing.T) {
	reg := builtin.Modes()
	n := 0
	for _, id := range reg.IDs() {
		if !strings.HasPrefix(id, "macp.mode.") {
			continue
		}
		n++
		e, _ := reg.Lookup(id)
		if _, ok := e.Mode.(mode.RulesValidator); !ok {
			t.Errorf("%s does not implement mode.RulesValidator", id)
		}
	}
	if n != 5 {
		t.Errorf("%d standard modes, want 5", n)
	}
}
