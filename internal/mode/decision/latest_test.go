package decision_test

import (
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/mode/modetest"
)

const (
	april  = coord.ProfileApril
	latest = coord.ProfileLatest
)

// bindAt is a decision binding under profile with rules at schema
// version v; the initiator is a declared participant unless participants
// are given.
func bindAt(t testing.TB, profile string, v uint32, rules string, participants ...string) *mode.Binding {
	if participants == nil {
		participants = []string{initiator, alice, bob}
	}
	return modetest.BindingAt(t, decision.ModeID, decision.ModeVersion, "policy.test.rules", rules, v, profile, initiator, participants)
}

// verdict runs steps then one Commitment and returns its code. Every
// step before it must be accepted.
func verdict(t *testing.T, b *mode.Binding, positive bool, steps ...modetest.Input) coord.Code {
	t.Helper()
	st, err := decision.New().Start(b)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	for i, in := range steps {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatalf("step %d (%s): %v", i, in, err)
		}
	}
	c := commitIn(initiator, positive)
	before := st.Project()
	err = st.Commit(b, &c.Msg, c.Commitment)
	if err != nil {
		if err := modetest.MatchSubset(st.Project(), before); err != nil {
			t.Errorf("a refused Commitment changed the state: %v", err)
		}
	}
	return coord.CodeOf(err)
}

func codeName(c coord.Code) string {
	if c == "" {
		return "accepted"
	}
	return string(c)
}

type verdictCase struct {
	name     string
	rules    string
	v        uint32
	steps    []modetest.Input
	positive bool
	// want per profile
	aprilWant, latestWant coord.Code
}

func runVerdicts(t *testing.T, cases []verdictCase) {
	t.Helper()
	for _, c := range cases {
		for _, p := range []struct {
			profile string
			want    coord.Code
		}{{april, c.aprilWant}, {latest, c.latestWant}} {
			v := c.v
			if v == 0 {
				v = 1
			}
			got := verdict(t, bindAt(t, p.profile, v, c.rules), c.positive, c.steps...)
			if got != p.want {
				t.Errorf("%s under %s (schema_version %d): %s, want %s", c.name, p.profile, v, codeName(got), codeName(p.want))
			}
		}
	}
}

// Where the April and the newest verdicts differ on a schema_version 1
// policy, each profile keeps its own (RFC-MACP-0012 §4.1, RFC-MACP-0007
// §6.2; April rules unchanged).
func TestVerdictsByProfile(t *testing.T) {
	p1 := propIn(initiator, "p1", "deploy")
	majority := `{"voting":{"algorithm":"majority"}}`
	runVerdicts(t, []verdictCase{
		{name: "decline with no REJECT vote (decline guard)", rules: majority,
			steps: []modetest.Input{p1, voteIn(alice, "p1", "APPROVE")}, positive: false,
			aprilWant: "", latestWant: denied},
		{name: "decline backed by a REJECT after a failed vote", rules: majority,
			steps: []modetest.Input{p1, voteIn(alice, "p1", "REJECT")}, positive: false,
			aprilWant: "", latestWant: ""},
		{name: "decline over a passing vote", rules: majority,
			steps: []modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "APPROVE")}, positive: false,
			aprilWant: "", latestWant: denied},
		{name: "majority at an even split (inclusive threshold)", rules: majority,
			steps: []modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "REJECT")}, positive: true,
			aprilWant: denied, latestWant: ""},
		{name: "unanimous: one of three declared participants approves", rules: `{"voting":{"algorithm":"unanimous"}}`,
			steps: []modetest.Input{p1, voteIn(alice, "p1", "APPROVE")}, positive: true,
			aprilWant: "", latestWant: denied},
		{name: "unanimous: all three approve", rules: `{"voting":{"algorithm":"unanimous"}}`,
			steps: []modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "APPROVE"), voteIn(initiator, "p1", "APPROVE")}, positive: true,
			aprilWant: "", latestWant: ""},
		{name: "plurality: one APPROVE against one REJECT", rules: `{"voting":{"algorithm":"plurality"}}`,
			steps: []modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "REJECT")}, positive: true,
			aprilWant: "", latestWant: denied},
		{name: "weighted: the only voter is unlisted (weight 1 April, 0 latest; v1 legacy fail-open)",
			rules: `{"voting":{"algorithm":"weighted","threshold":0.5,"weights":{"agent://a":1}}}`,
			steps: []modetest.Input{p1, voteIn(bob, "p1", "REJECT")}, positive: true,
			aprilWant: denied, latestWant: ""},
		{name: "weighted: a weight-0 REJECT does not back a decline",
			rules: `{"voting":{"algorithm":"weighted","threshold":0.5,"weights":{"agent://a":1}}}`,
			steps: []modetest.Input{p1, voteIn(bob, "p1", "REJECT")}, positive: false,
			aprilWant: "", latestWant: denied},
		{name: "critical veto blocks a decline under the default action",
			rules: `{"voting":{"algorithm":"none"},"objection_handling":{"critical_severity_vetoes":true}}`,
			steps: []modetest.Input{p1, objIn(bob, "p1", "critical")}, positive: false,
			aprilWant: "", latestWant: denied},
		{name: "critical veto blocks a positive commitment",
			rules: `{"objection_handling":{"critical_severity_vetoes":true}}`,
			steps: []modetest.Input{p1, objIn(bob, "p1", "critical")}, positive: true,
			aprilWant: denied, latestWant: denied},
		{name: "require_vote_quorum also gates a face-value decline",
			rules: `{"voting":{"algorithm":"none","quorum":{"type":"count","value":2}},"commitment":{"require_vote_quorum":true}}`,
			steps: []modetest.Input{p1, voteIn(alice, "p1", "REJECT")}, positive: false,
			aprilWant: "", latestWant: denied},
		{name: "empty tally, schema_version 1: legacy fail-open", rules: majority,
			steps: []modetest.Input{p1}, positive: true,
			aprilWant: denied, latestWant: ""},
		{name: "policy.default: face value either way", rules: "",
			steps: []modetest.Input{p1}, positive: false,
			aprilWant: "", latestWant: ""},
	})
}

// schema_version 2 and 3 policies get the newest rules under both
// profiles (no April session could bind one), evaluated under their own
// version (RFC-MACP-0012 §8).
func TestVerdictsBySchemaVersion(t *testing.T) {
	p1 := propIn(initiator, "p1", "deploy")
	for _, c := range []struct {
		name     string
		v        uint32
		rules    string
		steps    []modetest.Input
		positive bool
		want     coord.Code
	}{
		{"v2 empty tally: legacy fail-open", 2, `{"voting":{"algorithm":"unanimous"}}`, []modetest.Input{p1}, true, ""},
		{"v2 empty tally with require_vote_quorum", 2, `{"voting":{"algorithm":"unanimous"},"commitment":{"require_vote_quorum":true}}`, []modetest.Input{p1}, true, denied},
		{"v3 empty tally: fail-closed", 3, `{"voting":{"algorithm":"unanimous"}}`, []modetest.Input{p1}, true, denied},
		{"v3 empty tally: decline denied (NoVotes)", 3, `{"voting":{"algorithm":"majority"}}`, []modetest.Input{p1}, false, denied},
		{"v3 only abstentions: NoVotes", 3, `{"voting":{"algorithm":"majority"}}`, []modetest.Input{p1, voteIn(alice, "p1", "ABSTAIN")}, true, denied},
		{"v3 none: face value on an empty tally", 3, `{"voting":{"algorithm":"none"}}`, []modetest.Input{p1}, false, ""},
		{"v3 supermajority failed, REJECT backs the decline", 3, `{"voting":{"algorithm":"supermajority","threshold":0.67}}`,
			[]modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "REJECT")}, false, ""},
		{"v3 supermajority default 2/3 passes at 2 of 3", 3, `{"voting":{"algorithm":"supermajority"}}`,
			[]modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "APPROVE"), voteIn(initiator, "p1", "REJECT")}, true, ""},
		{"v2 decline over approval refused by default", 2, `{"voting":{"algorithm":"majority"}}`,
			[]modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "APPROVE")}, false, denied},
		{"v2 allow_decline_over_approval still needs a decisive REJECT", 2, `{"voting":{"algorithm":"majority"},"commitment":{"allow_decline_over_approval":true}}`,
			[]modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "APPROVE")}, false, denied},
		{"v2 allow_decline_over_approval with a REJECT", 2, `{"voting":{"algorithm":"majority"},"commitment":{"allow_decline_over_approval":true}}`,
			[]modetest.Input{p1, voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "APPROVE"), voteIn(initiator, "p1", "REJECT")}, false, ""},
		{"v2 finalize_decline: objection-authorized decline, quorum waived", 2,
			`{"voting":{"algorithm":"majority","quorum":{"type":"count","value":3}},"objection_handling":{"critical_severity_vetoes":true,"critical_objection_action":"finalize_decline"},"commitment":{"require_vote_quorum":true}}`,
			[]modetest.Input{p1, objIn(bob, "p1", "critical")}, false, ""},
		{"v2 finalize_decline: positive still vetoed", 2,
			`{"voting":{"algorithm":"majority"},"objection_handling":{"critical_severity_vetoes":true,"critical_objection_action":"finalize_decline"}}`,
			[]modetest.Input{p1, objIn(bob, "p1", "critical"), voteIn(alice, "p1", "APPROVE")}, true, denied},
		{"v2 hold: decline refused", 2,
			`{"voting":{"algorithm":"none"},"objection_handling":{"critical_severity_vetoes":true,"critical_objection_action":"hold"}}`,
			[]modetest.Input{p1, objIn(bob, "p1", "critical")}, false, denied},
		{"v2 veto_threshold 2 not reached", 2,
			`{"voting":{"algorithm":"none"},"objection_handling":{"critical_severity_vetoes":true,"veto_threshold":2}}`,
			[]modetest.Input{p1, objIn(bob, "p1", "critical")}, false, ""},
		{"v3 plurality: more approvals than another proposal needed", 3, `{"voting":{"algorithm":"plurality"}}`,
			[]modetest.Input{p1, propIn(alice, "p2", "rollback"), voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p2", "APPROVE")}, true, denied},
	} {
		for _, profile := range []string{april, latest} {
			if got := verdict(t, bindAt(t, profile, c.v, c.rules), c.positive, c.steps...); got != c.want {
				t.Errorf("%s under %s: %s, want %s", c.name, profile, codeName(got), codeName(c.want))
			}
		}
	}
}

// A stored schema_version 1 policy carrying a version-2 key (accepted by
// April runtimes) is evaluated under version 1: the key has no effect.
func TestV1IgnoresV2Keys(t *testing.T) {
	rules := `{"voting":{"algorithm":"none"},"objection_handling":{"critical_severity_vetoes":true,"critical_objection_action":"finalize_decline"}}`
	got := verdict(t, bindAt(t, latest, 1, rules), false, propIn(initiator, "p1", "deploy"), objIn(bob, "p1", "critical"))
	if got != denied {
		t.Errorf("v1 decline over a veto: %s, want POLICY_DENIED (finalize_decline is a version 2 knob)", codeName(got))
	}
	if got := verdict(t, bindAt(t, latest, 2, rules), false, propIn(initiator, "p1", "deploy"), objIn(bob, "p1", "critical")); got != "" {
		t.Errorf("v2 decline over a veto with finalize_decline: %s, want accepted", codeName(got))
	}
	bad := `{"objection_handling":{"critical_objection_action":"escalate"}}`
	if _, err := decision.New().Start(bindAt(t, latest, 2, bad)); coord.CodeOf(err) != badPolicy {
		t.Errorf("unknown critical_objection_action: %v, want INVALID_POLICY_DEFINITION", err)
	}
}

// Participants: ProfileLatest starts a session with no declared
// participant, in which nobody (the initiator included) may propose;
// only declared participants propose. The April rules are unchanged.
func TestParticipantsByProfile(t *testing.T) {
	empty := func(profile string) *mode.Binding {
		b := bindAt(t, profile, 1, "")
		b.Participants = []string{}
		return b
	}
	if _, err := decision.New().Start(empty(april)); coord.CodeOf(err) != invalidEnv {
		t.Errorf("April zero participants: %v, want INVALID_ENVELOPE", err)
	}
	b := empty(latest)
	st, err := decision.New().Start(b)
	if err != nil {
		t.Fatalf("latest zero participants: %v", err)
	}
	in := propIn(initiator, "p1", "deploy")
	if err := st.Step(b, &in.Msg); coord.CodeOf(err) != forbidden {
		t.Errorf("latest, initiator proposes with no participants: %v, want FORBIDDEN", err)
	}
	for _, c := range []struct {
		profile string
		want    coord.Code
	}{{april, ""}, {latest, forbidden}} {
		b := bindAt(t, c.profile, 1, "", alice, bob) // initiator not declared
		st, _ := decision.New().Start(b)
		if err := st.Step(b, &in.Msg); coord.CodeOf(err) != c.want {
			t.Errorf("%s: unlisted initiator proposes: %v, want %s", c.profile, err, codeName(c.want))
		}
	}
}
