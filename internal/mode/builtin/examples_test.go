package builtin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/testutil"
)

// TestExamplePolicies: every examples/policies/*.json is a policy
// descriptor RegisterPolicy accepts (policy.CheckRegistration, then the
// target mode's rules), so the README's what-if replay can use it.
func TestExamplePolicies(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testutil.RepoRoot(t), "examples", "policies", "*.json"))
	if len(files) == 0 {
		t.Fatal("no examples/policies/*.json")
	}
	reg := builtin.Modes()
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p modetest.SpecFixturePolicy
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		d, err := p.Descriptor()
		if err != nil {
			t.Fatal(err)
		}
		pol, err := policy.CheckRegistration(d)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		e, ok := reg.Lookup(d.Mode)
		if !ok {
			t.Fatalf("%s: mode %q", filepath.Base(f), d.Mode)
		}
		if v, ok := e.Mode.(mode.RulesValidator); ok {
			if err := v.ValidateRules(pol); err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
		}
	}
}

// TestStricterDecisionExample: the example policy is stricter than
// policy.default. Under policy.default a single approving Vote right after
// the Proposal lets the initiator commit; under the example a Vote needs a
// counting Evaluation first, one voter is below the quorum of two, and two
// approvals of three decisive votes miss the 0.67 threshold (both
// profiles: a schema_version 3 policy gets the newest rules).
func TestStricterDecisionExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "examples", "policies", "stricter-decision.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p modetest.SpecFixturePolicy
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	d, _ := p.Descriptor()
	e, _ := builtin.Modes().Lookup(d.Mode)
	const init, a, b, c = "agent://init", "agent://a", "agent://b", "agent://c"
	const dec = "macp.modes.decision.v1."
	const commit = `{"commitment_id":"c","action":"decision.selected","authority_scope":"t","reason":"r","mode_version":"1.0.0","configuration_version":"cfg-1","outcome_positive":true}`
	type step struct{ sender, typ, ptype, payload, code string }
	fixture := func(final string, steps ...step) *modetest.SpecFixture {
		fx := &modetest.SpecFixture{Mode: d.Mode, Initiator: init, Participants: []string{init, a, b, c},
			ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", ExpectedFinalState: final}
		for _, s := range steps {
			m := modetest.SpecFixtureMessage{Sender: s.sender, MessageType: s.typ, PayloadType: s.ptype, Payload: json.RawMessage(s.payload), Expect: "accept"}
			if s.code != "" {
				m.Expect, m.ExpectedErrorCode = "reject", s.code
			}
			fx.Messages = append(fx.Messages, m)
		}
		return fx
	}
	propose := step{init, "Proposal", dec + "ProposalPayload", `{"proposal_id":"p1","option":"deploy"}`, ""}
	vote := func(who, v, code string) step {
		return step{who, "Vote", dec + "VotePayload", `{"proposal_id":"p1","vote":"` + v + `"}`, code}
	}
	commitStep := func(code string) step { return step{init, "Commitment", "macp.v1.CommitmentPayload", commit, code} }

	lenient := fixture("Resolved", propose, vote(a, "APPROVE", ""), commitStep(""))
	if res := modetest.RunSpecFixture(e.Mode, lenient, coord.ProfileLatest); len(res.Failures) != 0 {
		t.Fatalf("policy.default: %v", res.Failures)
	}
	strict := fixture("Open",
		propose,
		vote(a, "APPROVE", "POLICY_DENIED"), // evaluation.required_before_voting
		step{a, "Evaluation", dec + "EvaluationPayload", `{"proposal_id":"p1","recommendation":"APPROVE","confidence":0.9}`, ""},
		vote(a, "APPROVE", ""),
		commitStep("POLICY_DENIED"), // require_vote_quorum: 1 of 2 voters
		vote(b, "APPROVE", ""),
		vote(c, "REJECT", ""),
		commitStep("POLICY_DENIED"), // supermajority: 2/3 < 0.67
	)
	strict.Policy, strict.PolicyVersion = &p, d.ID
	for _, profile := range []string{coord.ProfileApril, coord.ProfileLatest} {
		if res := modetest.RunSpecFixture(e.Mode, strict, profile); len(res.Failures) != 0 {
			t.Errorf("%s under the stricter policy: %v", profile, res.Failures)
		}
	}
}
