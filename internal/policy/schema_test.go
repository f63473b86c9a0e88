package policy

import (
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/coord"
)

func desc(mode string, version uint32, rules string) Descriptor {
	return Descriptor{ID: "policy.test.p", Mode: mode, Rules: rules, SchemaVersion: version}
}

func wantInvalid(t *testing.T, err error, contains ...string) {
	t.Helper()
	if coord.CodeOf(err) != coord.CodeInvalidPolicyDefinition {
		t.Fatalf("err = %v, want INVALID_POLICY_DEFINITION", err)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not mention %q", err, c)
		}
	}
}

// A misspelled key is refused at registration for every schema version
// (issue 28 item 1), naming the key and listing the known ones.
func TestMisspelledKeyRefusedEveryVersion(t *testing.T) {
	for v := MinSchemaVersion; v <= MaxSchemaVersion; v++ {
		_, err := CheckRegistration(desc(modeDecision, v, `{"votin":{"algorithm":"majority"}}`))
		wantInvalid(t, err, `"votin"`, "commitment, evaluation, objection_handling, voting")
		_, err = CheckRegistration(desc(modeDecision, v, `{"voting":{"algoritm":"majority"}}`))
		wantInvalid(t, err, `"voting.algoritm"`, "algorithm, quorum, threshold, weights")
		_, err = CheckRegistration(desc(modeDecision, v, `{"voting":{"quorum":{"typ":"count"}}}`))
		wantInvalid(t, err, `"voting.quorum.typ"`, "type, value")
		_, err = CheckRegistration(desc(modeQuorum, v, `{"abstention":{"interpretaton":"neutral"}}`))
		wantInvalid(t, err, `"abstention.interpretaton"`)
		_, err = CheckRegistration(desc(modeTask, v, `{"completion":{"require_output":true},"assignmnt":{}}`))
		wantInvalid(t, err, `"assignmnt"`, "assignment, commitment, completion")
		_, err = CheckRegistration(desc(modeHandoff, v, `{"acceptance":{"implicit_accept_timeout":5}}`))
		wantInvalid(t, err, `"acceptance.implicit_accept_timeout"`, "implicit_accept_timeout_ms")
		_, err = CheckRegistration(desc(modeProposal, v, `{"commitment":{"authorty":"any_participant"}}`))
		wantInvalid(t, err, `"commitment.authorty"`)
		_, err = CheckRegistration(desc("*", v, `{"votin":{}}`))
		wantInvalid(t, err, `"votin"`)
	}
}

// Parse (session binding and replay) is strict for versions 2 and 3 and
// lenient for version 1, whose stored April policies may carry any key.
func TestParseStrictnessByVersion(t *testing.T) {
	if _, err := Parse(desc(modeDecision, 1, `{"votin":{"algorithm":"majority"}}`)); err != nil {
		t.Fatalf("v1 Parse refused a stored April policy: %v", err)
	}
	for _, v := range []uint32{2, 3} {
		_, err := Parse(desc(modeDecision, v, `{"votin":{"algorithm":"majority"}}`))
		wantInvalid(t, err, `"votin"`)
	}
}

// The decline-gating knobs exist from schema_version 2 on.
func TestVersion2Keys(t *testing.T) {
	for _, rules := range []string{
		`{"commitment":{"allow_decline_over_approval":true}}`,
		`{"objection_handling":{"critical_objection_action":"finalize_decline"}}`,
	} {
		_, err := CheckRegistration(desc(modeDecision, 1, rules))
		wantInvalid(t, err, "schema_version 1")
		for _, v := range []uint32{2, 3} {
			if _, err := CheckRegistration(desc(modeDecision, v, rules)); err != nil {
				t.Errorf("v%d %s: %v", v, rules, err)
			}
		}
	}
}

// Every key of every schema is accepted, weights maps take any id, and
// extension modes' rules are not checked (RFC-MACP-0012 §4.6).
func TestKnownKeysAccepted(t *testing.T) {
	ok := []Descriptor{
		desc(modeDecision, 3, `{"voting":{"algorithm":"weighted","threshold":0.5,"quorum":{"type":"count","value":1},"weights":{"agent://a":2,"anything":0}},`+
			`"objection_handling":{"critical_severity_vetoes":true,"veto_threshold":1,"critical_objection_action":"hold"},`+
			`"evaluation":{"minimum_confidence":0.5,"required_before_voting":true},`+
			`"commitment":{"authority":"designated_role","designated_roles":["agent://a"],"require_vote_quorum":true,"allow_decline_over_approval":true}}`),
		desc(modeQuorum, 1, `{"threshold":{"type":"weighted","value":2,"weights":{"a":1}},"abstention":{"counts_toward_quorum":true,"interpretation":"neutral"}}`),
		desc(modeProposal, 1, `{"acceptance":{"criterion":"all_parties"},"counter_proposal":{"max_rounds":2},"rejection":{"terminal_on_any_reject":true}}`),
		desc(modeTask, 2, `{"assignment":{"allow_reassignment_on_reject":true},"completion":{"require_output":true}}`),
		desc(modeHandoff, 3, `{"acceptance":{"implicit_accept_timeout_ms":100}}`),
		desc("*", 1, `{"acceptance":{"criterion":"initiator","implicit_accept_timeout_ms":5},"completion":{"require_output":true}}`),
		desc("ext.custom.v1", 3, `{"anything":{"goes":1}}`),
	}
	for _, d := range ok {
		if _, err := CheckRegistration(d); err != nil {
			t.Errorf("%s v%d %s: %v", d.Mode, d.SchemaVersion, d.Rules, err)
		}
	}
}

func TestSchemaVersionRange(t *testing.T) {
	for _, v := range []uint32{0, 4, 99} {
		_, err := Parse(desc(modeDecision, v, `{}`))
		wantInvalid(t, err, "schema_version")
	}
	for v := MinSchemaVersion; v <= MaxSchemaVersion; v++ {
		p, err := Parse(desc(modeDecision, v, `{}`))
		if err != nil || p.SchemaVersion() != v {
			t.Fatalf("v%d: %v", v, err)
		}
	}
	keys, ok := RuleKeys(modeDecision, 2)
	if !ok || strings.Join(keys, ",") != "commitment,evaluation,objection_handling,voting" {
		t.Errorf("RuleKeys = %v %v", keys, ok)
	}
	if _, ok := RuleKeys("ext.x.v1", 1); ok {
		t.Error("an extension mode has no rule schema")
	}
}
