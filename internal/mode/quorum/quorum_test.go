package quorum_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/quorum"
)

// TestSuite runs the shared mode suite over the message-level scenarios.
func TestSuite(t *testing.T) {
	modetest.Run(t, quorum.New(), messageScenarios(t)...)
}

func messageScenarios(t *testing.T) []modetest.Scenario {
	return []modetest.Scenario{
		{
			// RFC-MACP-0011 §4, §5, §6; checklist CONF-28 (quorum_happy_path).
			Name:    "happy path",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 2), "RFC-MACP-0011 §4 ApprovalRequest from the unlisted coordinator"),
				ok(approveIn(alice, "r1"), "RFC-MACP-0011 §4 Approve"),
				ok(approveIn(bob, "r1"), ""),
				ok(commitIn(coordinator, true), "RFC-MACP-0011 §6 quorum.approved"),
			},
			WantState: map[string]any{
				"phase": "Committed",
				"request": map[string]any{
					"request_id": "r1", "action": "deploy", "summary": "Deploy v2", "details": "ZA==",
					"required_approvals": 2, "requested_by": coordinator,
				},
				"ballots": map[string]any{
					alice: map[string]any{"choice": "Approve", "reason": "r-Approve", "request_id": "r1"},
					bob:   map[string]any{"choice": "Approve"},
				},
				"ballot_order": []any{alice, bob},
				"approvals":    2, "rejections": 0, "abstentions": 0, "remaining": 1, "eligible_participants": 3,
				"threshold": 2, "threshold_source": "required_approvals", "abstention_interpretation": "neutral",
			},
		},
		{
			// RFC-MACP-0011 §2.1 authority matrix; authority before decoding.
			Name:    "authority",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(requestIn(alice, "r1", 1), forbidden, "§2.1 ApprovalRequest: coordinator only"),
				rej(requestIn(outsider, "r1", 1), forbidden, "§2.1 outsider"),
				rej(rawIn(quorum.TypeApprovalRequest, alice, garbage), forbidden, "authority before decoding"),
				rej(approveIn(outsider, "r1"), forbidden, "§2.1 ballots: declared participants only"),
				rej(rejectIn(outsider, "r1"), forbidden, "§8 reject ballots from ineligible participants"),
				rej(abstainIn(outsider, "r1"), forbidden, ""),
				rej(rawIn(quorum.TypeApprove, outsider, garbage), forbidden, "authority before decoding"),
				ok(requestIn(coordinator, "r1", 1), ""),
				rej(approveIn(coordinator, "r1"), forbidden, "§2.1 an unlisted coordinator is no ballot caster"),
				rej(rejectIn(coordinator, "r1"), forbidden, "§2.1"),
				rej(abstainIn(coordinator, "r1"), forbidden, "§2.1"),
				rej(rawIn(quorum.TypeAbstain, coordinator, garbage), forbidden, "authority before decoding"),
				ok(rejectIn(carol, "r1"), ""),
			},
			WantState: map[string]any{"phase": "Voting", "ballot_order": []any{carol}},
		},
		{
			// RFC-MACP-0011 §2.1: the coordinator votes when listed.
			Name:    "listed coordinator votes",
			Binding: binding(t, "", coordinator, alice),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 2), ""),
				ok(approveIn(coordinator, "r1"), "§2.1 listed in participants"),
				ok(approveIn(alice, "r1"), ""),
				ok(commitIn(coordinator, true), ""),
			},
		},
		{
			// Checklist QUO-4, CONF-29 (quorum_reject_paths): ballots before
			// the request.
			Name:    "ballots before the request",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(approveIn(alice, "r1"), invalidEnv, "CONF-29 Approve before ApprovalRequest"),
				rej(rejectIn(alice, "r1"), invalidEnv, ""),
				rej(abstainIn(alice, "r1"), invalidEnv, ""),
				rej(commitIn(coordinator, false), invalidEnv, "no request: nothing eligible"),
				ok(requestIn(coordinator, "r1", 2), ""),
				ok(approveIn(alice, "r1"), "the same ballot now counts"),
			},
			WantState: map[string]any{"approvals": 1},
		},
		{
			// RFC-MACP-0011 §5 rule 1.
			Name:    "one approval request",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 2), ""),
				rej(requestIn(coordinator, "r2", 1), invalidEnv, "§5 rule 1 second request"),
				rej(requestIn(coordinator, "r1", 2), invalidEnv, "§5 rule 1 same request again"),
				rej(requestIn(alice, "r2", 1), forbidden, "authority first"),
			},
			WantState: map[string]any{"request": map[string]any{"request_id": "r1"}},
		},
		{
			// RFC-MACP-0011 §4, §5 rule 2.
			Name:    "request validation",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(quorum.TypeApprovalRequest, coordinator, garbage), invalidEnv, "§9 quorum.proto"),
				rej(rawIn(quorum.TypeApprovalRequest, coordinator, nil), invalidEnv, "empty payload"),
				rej(requestIn(coordinator, "", 1), invalidEnv, "request_id required"),
				rej(requestIn(coordinator, " ", 1), invalidEnv, "blank request_id"),
				rej(modetest.Input{Msg: msg(quorum.TypeApprovalRequest, coordinator, marshal(&quorumv1.ApprovalRequestPayload{
					RequestId: "r1", Summary: "s", RequiredApprovals: 1}))}, invalidEnv, "action required"),
				rej(requestIn(coordinator, "r1", 0), invalidEnv, "§5 rule 2 required_approvals > 0"),
				rej(requestIn(coordinator, "r1", 4), invalidEnv, "§5 rule 2 at most the eligible participants"),
				rej(requestIn(coordinator, "r1", 1<<31), invalidEnv, "§5 rule 2 huge"),
				ok(modetest.Input{Msg: msg(quorum.TypeApprovalRequest, coordinator, marshal(&quorumv1.ApprovalRequestPayload{
					RequestId: "r1", Action: "deploy", RequiredApprovals: 3}))}, "all of them; summary and details optional"),
			},
			WantState: map[string]any{"request": map[string]any{"required_approvals": 3, "summary": "", "details": ""}, "threshold": 3},
		},
		{
			// Ballots reference the request; undecodable ballots.
			Name:    "ballot validation",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 2), ""),
				rej(approveIn(alice, "r2"), invalidEnv, "unknown request_id"),
				rej(rejectIn(alice, ""), invalidEnv, "empty request_id"),
				rej(abstainIn(alice, "R1"), invalidEnv, "ids are case-sensitive"),
				rej(rawIn(quorum.TypeApprove, alice, garbage), invalidEnv, "§9 ApprovePayload"),
				rej(rawIn(quorum.TypeReject, alice, garbage), invalidEnv, "§9 RejectPayload"),
				rej(rawIn(quorum.TypeAbstain, alice, garbage), invalidEnv, "§9 AbstainPayload"),
				rej(rawIn(quorum.TypeApprove, alice, nil), invalidEnv, "empty payload: request_id missing"),
			},
			WantState: map[string]any{"ballots": map[string]any{}, "remaining": 3},
		},
		{
			// RFC-MACP-0011 §5 rule 3, §8 "ballots cannot be counted twice".
			Name:    "one ballot per participant",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 3), ""),
				ok(approveIn(alice, "r1"), ""),
				rej(approveIn(alice, "r1"), invalidEnv, "§5 rule 3 same ballot twice"),
				rej(rejectIn(alice, "r1"), invalidEnv, "§5 rule 3 changing to Reject"),
				rej(abstainIn(alice, "r1"), invalidEnv, "§5 rule 3 changing to Abstain"),
				ok(abstainIn(bob, "r1"), ""),
				rej(approveIn(bob, "r1"), invalidEnv, "§5 rule 3 across the three kinds"),
				ok(rejectIn(carol, "r1"), ""),
				rej(rejectIn(carol, "r1"), invalidEnv, ""),
			},
			WantState: map[string]any{
				"approvals": 1, "rejections": 1, "abstentions": 1, "remaining": 0,
				"ballots": map[string]any{
					alice: map[string]any{"choice": "Approve"}, bob: map[string]any{"choice": "Abstain"}, carol: map[string]any{"choice": "Reject"},
				},
				"ballot_order": []any{alice, bob, carol},
			},
		},
		{
			// RFC-MACP-0011 §5 rule 4; checklist QUO-8, CONF-29.
			Name:    "threshold not yet reached",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 2), ""),
				ok(approveIn(alice, "r1"), ""),
				rej(commitIn(coordinator, true), invalidEnv, "CONF-29 1 of 2 approvals"),
				rej(commitIn(coordinator, false), invalidEnv, "still reachable"),
				ok(approveIn(bob, "r1"), ""),
				rej(commitIn(coordinator, false), invalidEnv, "approved: no negative outcome"),
				ok(commitIn(coordinator, true), "§5 rule 4 threshold reached"),
			},
		},
		{
			// RFC-MACP-0011 §5 rule 4: unreachable threshold.
			Name:    "threshold unreachable by rejections",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 2), ""),
				ok(rejectIn(alice, "r1"), ""),
				rej(commitIn(coordinator, false), invalidEnv, "bob and carol may still approve"),
				ok(rejectIn(bob, "r1"), ""),
				rej(commitIn(coordinator, true), invalidEnv, "0 approvals"),
				ok(commitIn(coordinator, false), "§6 quorum.rejected"),
			},
		},
		{
			// RFC-MACP-0011 §5 rule 4a: an abstainer leaves the pool of
			// potential approvers and is not a rejection.
			Name:    "abstentions remove potential approvers",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 2), ""),
				ok(approveIn(alice, "r1"), ""),
				ok(abstainIn(bob, "r1"), ""),
				rej(commitIn(coordinator, false), invalidEnv, "1 approval + carol = 2: reachable"),
				rej(commitIn(coordinator, true), invalidEnv, "an abstention is no approval"),
				ok(abstainIn(carol, "r1"), ""),
				ok(commitIn(coordinator, false), "§5 rule 4a (1 + 0) < 2"),
			},
		},
		{
			// RFC-MACP-0011 §5 rule 4b: everyone abstains.
			Name:    "all abstain",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 1), ""),
				ok(abstainIn(alice, "r1"), ""),
				ok(abstainIn(bob, "r1"), ""),
				rej(commitIn(coordinator, false), invalidEnv, "carol may still approve"),
				ok(abstainIn(carol, "r1"), ""),
				rej(commitIn(coordinator, true), invalidEnv, ""),
				ok(commitIn(coordinator, false), "§5 rule 4b"),
			},
			WantState: map[string]any{"abstentions": 3, "rejections": 0},
		},
		{
			// Ballots keep being accepted after eligibility; eligibility
			// is stable.
			Name:    "ballots after eligibility",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(coordinator, "r1", 1), ""),
				ok(approveIn(alice, "r1"), ""),
				ok(rejectIn(bob, "r1"), "late ballots still recorded (§8 exact ballot history)"),
				ok(abstainIn(carol, "r1"), ""),
				ok(commitIn(coordinator, true), ""),
			},
			WantState: map[string]any{"approvals": 1, "rejections": 1, "abstentions": 1, "remaining": 0},
		},
		{
			// RFC-MACP-0002 §1: types the mode does not define.
			Name:    "undefined message types",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(coord.TypeCommitment, coordinator, nil), invalidEnv, "Commitment goes through Commit, never Step"),
				rej(rawIn(coord.TypeSessionStart, coordinator, nil), invalidEnv, "SessionStart is the core's"),
				rej(rawIn("Vote", alice, nil), invalidEnv, "another mode's type"),
				rej(rawIn("approve", alice, nil), invalidEnv, "type names are case-sensitive"),
			},
			WantState: map[string]any{"phase": "Pending", "request": nil, "threshold": 0},
		},
		{
			// RFC-MACP-0011 §3: participants are the voter pool.
			Name:     "no participants",
			Binding:  binding(t, "", []string{}...),
			StartErr: invalidEnv,
		},
	}
}

// ballots is a compact script: "a+" approve, "b-" reject, "c0" abstain, by
// the first letter of a participant in pool.
func ballots(pool []string, script ...string) []modetest.Step {
	var steps []modetest.Step
	for _, s := range script {
		var sender string
		for _, p := range pool {
			if strings.HasPrefix(strings.TrimPrefix(p, "agent://"), s[:1]) {
				sender = p
			}
		}
		switch s[1] {
		case '+':
			steps = append(steps, ok(approveIn(sender, "r1"), s))
		case '-':
			steps = append(steps, ok(rejectIn(sender, "r1"), s))
		default:
			steps = append(steps, ok(abstainIn(sender, "r1"), s))
		}
	}
	return steps
}

// policyScenario: request with required approvals, the ballots, then a
// Commitment with the given outcome expects want.
func policyScenario(t *testing.T, name, rules string, pool []string, required uint32, script []string, positive bool, want coord.Code) modetest.Scenario {
	steps := []modetest.Step{ok(requestIn(coordinator, "r1", required), "")}
	steps = append(steps, ballots(pool, script...)...)
	steps = append(steps, rej(commitIn(coordinator, positive), want, name))
	return modetest.Scenario{Name: name, Binding: binding(t, rules, pool...), Steps: steps}
}

var (
	abc   = []string{alice, bob, carol}
	abcd  = []string{alice, bob, carol, dave}
	abcde = []string{alice, bob, carol, dave, erin}
)

// TestPolicyThreshold covers RFC-MACP-0011 §5 rule 6 and RFC-MACP-0012 §4.2
// threshold overrides (Decisions in rules.go and state.tally).
func TestPolicyThreshold(t *testing.T) {
	nOfM := func(v float64) string { return fmt.Sprintf(`{"threshold":{"type":"n_of_m","value":%v}}`, v) }
	pct := func(v float64) string { return fmt.Sprintf(`{"threshold":{"type":"percentage","value":%v}}`, v) }
	const w = `{"threshold":{"type":"weighted","value":2,"weights":{"agent://alice":2,"agent://bob":1,"agent://carol":1,"agent://zed":9}}}`
	const w3 = `{"threshold":{"type":"weighted","value":3,"weights":{"agent://alice":2,"agent://bob":1,"agent://carol":0.5}}}`
	const wUnlisted = `{"threshold":{"type":"weighted","value":2.5,"weights":{"agent://alice":1.5}}}`
	many := make([]string, 10)
	var manyScript []string
	for i := range many {
		many[i] = fmt.Sprintf("agent://%c", 'k'+i)
	}
	for i := 0; i < 7; i++ {
		manyScript = append(manyScript, fmt.Sprintf("%c+", 'k'+i))
	}
	scs := []modetest.Scenario{
		// n_of_m replaces (not supplements) required_approvals.
		policyScenario(t, "n_of_m lowers the request's threshold", nOfM(1), abc, 3, []string{"a+"}, true, ""),
		policyScenario(t, "n_of_m raises the request's threshold", nOfM(3), abc, 1, []string{"a+", "b+"}, true, invalidEnv),
		policyScenario(t, "n_of_m reached", nOfM(3), abc, 1, []string{"a+", "b+", "c+"}, true, ""),
		policyScenario(t, "n_of_m unreachable, participation short", nOfM(3), abc, 1, []string{"a+", "b-"}, false, denied),
		policyScenario(t, "n_of_m unreachable, everyone voted", nOfM(3), abc, 1, []string{"a+", "b-", "c0"}, false, ""),
		policyScenario(t, "n_of_m value 0 keeps required_approvals", nOfM(0), abc, 2, []string{"a+"}, true, invalidEnv),
		// percentage: share of eligible participants, exact ratio (⚠C13).
		policyScenario(t, "percentage 0.5 of 4 needs 2", pct(0.5), abcd, 4, []string{"a+", "b+"}, true, ""),
		policyScenario(t, "percentage 0.5 of 4, 1 approval", pct(0.5), abcd, 1, []string{"a+"}, true, invalidEnv),
		policyScenario(t, "percentage 0.34 of 3 needs 2", pct(0.34), abc, 1, []string{"a+"}, true, invalidEnv),
		policyScenario(t, "percentage 0.7 of 10 needs exactly 7", pct(0.7), many, 1, manyScript, true, ""),
		policyScenario(t, "percentage 0.7 of 10, 6 approvals", pct(0.7), many, 1, manyScript[:6], true, invalidEnv),
		policyScenario(t, "percentage 1 needs everyone", pct(1), abc, 1, []string{"a+", "b+"}, true, invalidEnv),
		policyScenario(t, "percentage 1 rejected by one, participation short", pct(1), abc, 1, []string{"a+", "b-"}, false, denied),
		policyScenario(t, "percentage 1 rejected by one, everyone voted", pct(1), abc, 1, []string{"a+", "b-", "c+"}, false, ""),
		policyScenario(t, "percentage tiny still needs one", pct(0.01), abc, 3, []string{"a0", "b0", "c0"}, false, ""),
		// weighted: weights from threshold.weights, participant order sums.
		policyScenario(t, "weighted heavy approver", w, abc, 3, []string{"a+"}, true, ""),
		policyScenario(t, "weighted two light approvers", w, abc, 3, []string{"b+", "c+"}, true, ""),
		policyScenario(t, "weighted one light approver", w, abc, 3, []string{"b+", "a-"}, true, invalidEnv),
		policyScenario(t, "weighted unreachable, participation weight short", w3, abc, 1, []string{"a-"}, false, denied),
		policyScenario(t, "weighted unreachable", w3, abc, 1, []string{"a-", "b-"}, false, ""),
		policyScenario(t, "weighted reachable", w3, abc, 1, []string{"c-"}, false, invalidEnv),
		policyScenario(t, "weighted fractional", w3, abc, 1, []string{"a+", "b+"}, true, ""),
		policyScenario(t, "weighted unlisted participant weighs 1", wUnlisted, abc, 1, []string{"a+", "b+"}, true, ""),
		policyScenario(t, "weighted unlisted below", wUnlisted, abc, 1, []string{"b+", "c+"}, true, invalidEnv),
	}
	modetest.Run(t, quorum.New(), scs...)
}

// TestPolicyAbstention covers RFC-MACP-0012 §4.2 abstention rules (the
// Decisions on state.tally).
func TestPolicyAbstention(t *testing.T) {
	abst := func(threshold string, counts bool, interp string) string {
		return fmt.Sprintf(`{%s"abstention":{"counts_toward_quorum":%v,"interpretation":%q}}`, threshold, counts, interp)
	}
	const n2 = `"threshold":{"type":"n_of_m","value":2},`
	const p50 = `"threshold":{"type":"percentage","value":0.5},`
	const w2 = `"threshold":{"type":"weighted","value":2,"weights":{"agent://alice":1,"agent://bob":1,"agent://carol":1}},`
	scs := []modetest.Scenario{
		// Participation quorum under a threshold override: a negative
		// outcome needs threshold participating ballots.
		policyScenario(t, "override, neutral abstention does not participate", abst(n2, false, "neutral"), abc, 1,
			[]string{"a-", "b0"}, false, denied),
		policyScenario(t, "override, counts_toward_quorum", abst(n2, true, "neutral"), abc, 1,
			[]string{"a-", "b0"}, false, ""),
		policyScenario(t, "override, implicit_reject participates", abst(n2, false, "implicit_reject"), abc, 1,
			[]string{"a-", "b0"}, false, ""),
		policyScenario(t, "override, ignored never participates", abst(n2, true, "ignored"), abc, 1,
			[]string{"a-", "b0"}, false, denied),
		policyScenario(t, "override, two rejections participate", abst(n2, false, "neutral"), abc, 1,
			[]string{"a-", "b-"}, false, ""),
		policyScenario(t, "override, late approval completes participation", abst(n2, false, "neutral"), abc, 1,
			[]string{"a-", "b0", "c+"}, false, ""),
		policyScenario(t, "override, all abstain: everyone voted releases participation", abst(n2, false, "neutral"), abc, 1,
			[]string{"a0", "b0", "c0"}, false, ""),
		policyScenario(t, "override, positive outcome always participates", abst(n2, false, "neutral"), abc, 1,
			[]string{"a+", "b+"}, true, ""),
		policyScenario(t, "weighted participation", abst(w2, false, "neutral"), abc, 1,
			[]string{"a-", "b0"}, false, denied),
		policyScenario(t, "weighted participation with abstentions counted", abst(w2, true, "neutral"), abc, 1,
			[]string{"a-", "b0"}, false, ""),
		// Without an override the base rules (RFC-MACP-0011 §5 rule 4a/4b)
		// apply whatever the abstention section says.
		policyScenario(t, "no override, all abstain (rule 4b)", abst("", false, "neutral"), abc, 1,
			[]string{"a0", "b0", "c0"}, false, ""),
		policyScenario(t, "no override, ignored", abst("", false, "ignored"), abc, 2,
			[]string{"a0", "b0"}, false, ""),
		policyScenario(t, "no override, implicit_reject", abst("", false, "implicit_reject"), abc, 1,
			[]string{"a0"}, true, invalidEnv),
		// ignored drops abstainers from a percentage base.
		policyScenario(t, "percentage, neutral keeps abstainers in the base", abst(p50, true, "neutral"), abcd, 1,
			[]string{"a+", "b0", "c0"}, true, invalidEnv),
		policyScenario(t, "percentage, ignored drops abstainers from the base", abst(p50, true, "ignored"), abcd, 1,
			[]string{"a+", "b0", "c0"}, true, ""),
		policyScenario(t, "percentage, ignored, all abstain", abst(p50, true, "ignored"), abcd, 1,
			[]string{"a0", "b0", "c0", "d0"}, false, ""),
		policyScenario(t, "percentage, ignored, 5 voters, erin may still approve", abst(p50, false, "ignored"), abcde, 1,
			[]string{"a+", "b0", "c-", "d-"}, false, invalidEnv),
		policyScenario(t, "percentage, ignored, 5 voters", abst(p50, false, "ignored"), abcde, 1,
			[]string{"a+", "b0", "c-", "d-", "e-"}, false, ""),
		policyScenario(t, "percentage, implicit_reject", abst(p50, false, "implicit_reject"), abcd, 1,
			[]string{"a0", "b0", "c0"}, false, ""),
	}
	modetest.Run(t, quorum.New(), scs...)

	// Projection of the policy view.
	b := binding(t, abst(p50, true, "ignored"), abcd...)
	res, err := modetest.Check(quorum.New(), b, []modetest.Input{requestIn(coordinator, "r1", 1), approveIn(alice, "r1"), abstainIn(bob, "r1"), abstainIn(carol, "r1")})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"threshold": 1, "threshold_source": "percentage", "abstention_interpretation": "ignored",
		"counted_approvals": 1, "possible_approvals": 2, "participation": 1,
		"eligible": map[string]any{"positive": true, "negative": false},
	}
	if err := modetest.MatchSubset(res.Final, want); err != nil {
		t.Error(err)
	}
}

// TestDenyReasons: POLICY_DENIED carries the reason (RFC-MACP-0012 §6.2).
func TestDenyReasons(t *testing.T) {
	b := binding(t, `{"threshold":{"type":"n_of_m","value":2}}`)
	st, err := quorum.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []modetest.Input{requestIn(coordinator, "r1", 1), rejectIn(alice, "r1"), abstainIn(bob, "r1")} {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	c := commitIn(coordinator, false)
	ce := coord.AsError(st.Commit(b, &c.Msg, c.Commitment))
	if ce == nil || ce.Code != denied || len(ce.Reasons) != 1 ||
		!strings.Contains(ce.Reasons[0], "1 participating ballot(s) and 1 participant(s) yet to vote") || !strings.Contains(ce.Message, "policy.test.quorum") {
		t.Errorf("got %#v", ce)
	}
}

// TestPolicyDefinitions: the quorum sections are validated against
// quorum-rules.schema.json at Start (RFC-MACP-0012 §4.2).
func TestPolicyDefinitions(t *testing.T) {
	var scs []modetest.Scenario
	for _, r := range []string{
		`{"threshold":5}`,
		`{"threshold":[]}`,
		`{"threshold":{"type":"majority","value":1}}`,
		`{"threshold":{"type":"N_OF_M","value":1}}`,
		`{"threshold":{"type":3}}`,
		`{"threshold":{"value":-1}}`,
		`{"threshold":{"value":"2"}}`,
		`{"threshold":{"type":"n_of_m","value":1.5}}`,
		`{"threshold":{"type":"n_of_m","value":4}}`,
		`{"threshold":{"type":"percentage","value":1.5}}`,
		`{"threshold":{"type":"percentage","value":60}}`,
		`{"threshold":{"type":"weighted","value":1}}`,
		`{"threshold":{"type":"weighted","value":4,"weights":{"agent://alice":1}}}`,
		`{"threshold":{"type":"weighted","value":1,"weights":{"agent://alice":-1}}}`,
		`{"threshold":{"weights":{"agent://alice":"heavy"}}}`,
		`{"abstention":{"interpretation":"reject"}}`,
		`{"abstention":{"interpretation":"Neutral"}}`,
		`{"abstention":{"counts_toward_quorum":"yes"}}`,
		`{"abstention":true}`,
	} {
		scs = append(scs, modetest.Scenario{Name: "invalid " + r, Binding: binding(t, r), StartErr: badPolicy})
	}
	for _, r := range []string{
		`{}`,
		`{"threshold":null,"abstention":null}`,
		`{"threshold":{"type":"n_of_m"},"x-vendor":1}`,
		`{"threshold":{"type":"n_of_m","value":3.0}}`,
		`{"threshold":{"type":"percentage","value":1}}`,
		`{"threshold":{"type":"weighted","value":0}}`,
		`{"threshold":{"type":"weighted","value":3,"weights":{"agent://alice":1,"agent://nobody":7}}}`,
		`{"threshold":{"type":"n_of_m","value":2,"extra":[1]}}`,
		// The SDK's build_quorum_policy default shape.
		`{"threshold":{"type":"n_of_m","value":0},"abstention":{"counts_toward_quorum":false,"interpretation":"neutral"},` +
			`"commitment":{"authority":"initiator_only","designated_roles":[],"require_vote_quorum":false}}`,
	} {
		scs = append(scs, modetest.Scenario{Name: "valid " + r, Binding: binding(t, r),
			Steps: []modetest.Step{ok(requestIn(coordinator, "r1", 1), "")}})
	}
	nilPolicy := binding(t, "")
	nilPolicy.Policy = nil
	scs = append(scs, modetest.Scenario{Name: "nil policy is policy.default", Binding: nilPolicy,
		Steps: []modetest.Step{ok(requestIn(coordinator, "r1", 1), ""), ok(approveIn(alice, "r1"), ""), ok(commitIn(coordinator, true), "")}})
	modetest.Run(t, quorum.New(), scs...)
}

// TestOrderIndependence: RFC-MACP-0011 §7 — the same participants,
// threshold and set of accepted ballots give the same quorum state and
// eligibility, whatever the ballots' order.
func TestOrderIndependence(t *testing.T) {
	rules := []string{
		"",
		`{"threshold":{"type":"weighted","value":0.3,"weights":{"agent://alice":0.1,"agent://bob":0.2,"agent://carol":0.3,"agent://dave":0.7}}}`,
		`{"threshold":{"type":"percentage","value":0.75},"abstention":{"interpretation":"ignored"}}`,
	}
	votes := []modetest.Input{approveIn(alice, "r1"), approveIn(bob, "r1"), rejectIn(carol, "r1"), abstainIn(dave, "r1")}
	perms := [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}}
	for _, r := range rules {
		var first map[string]any
		for _, p := range perms {
			inputs := []modetest.Input{requestIn(coordinator, "r1", 2)}
			for _, i := range p {
				inputs = append(inputs, votes[i])
			}
			res, err := modetest.Check(quorum.New(), binding(t, r, abcd...), inputs)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Final
			delete(got, "ballot_order")
			if first == nil {
				first = got
			} else if !reflect.DeepEqual(first, got) {
				t.Errorf("rules %s, order %v:\n got %v\nwant %v", r, p, got, first)
			}
		}
	}
}

// TestRejectedLeavesProjectUnchanged: "On error nothing changed" (mode.State
// contract), checked with reflect.DeepEqual on every reject path.
func TestRejectedLeavesProjectUnchanged(t *testing.T) {
	b := binding(t, `{"threshold":{"type":"n_of_m","value":2}}`)
	st, err := quorum.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	check := func(ins ...modetest.Input) {
		t.Helper()
		modetest.RejectUnchanged(t, st, b, ins...)
	}
	apply := func(ins ...modetest.Input) {
		t.Helper()
		modetest.Apply(t, st, b, ins...)
	}
	check(approveIn(alice, "r1"), requestIn(alice, "r1", 1), requestIn(coordinator, "r1", 0), commitIn(coordinator, true))
	apply(requestIn(coordinator, "r1", 1))
	check(requestIn(coordinator, "r2", 1), approveIn(outsider, "r1"), approveIn(alice, "r2"), rawIn(quorum.TypeReject, alice, garbage),
		commitIn(coordinator, true), commitIn(coordinator, false), rawIn("Bogus", alice, nil))
	apply(rejectIn(alice, "r1"), abstainIn(bob, "r1"))
	check(approveIn(alice, "r1"), abstainIn(bob, "r1"), commitIn(coordinator, true), commitIn(coordinator, false)) // POLICY_DENIED last
}

// TestAfterCommit: a committed state refuses everything with
// SESSION_NOT_OPEN (the core normally stops first).
func TestAfterCommit(t *testing.T) {
	modetest.CheckAfterCommit(t, quorum.New(), binding(t, ""),
		[]modetest.Input{requestIn(coordinator, "r1", 1), approveIn(alice, "r1")}, commitIn(coordinator, true),
		approveIn(bob, "r1"))
}

// TestDescriptor pins the discovery descriptor (RFC-MACP-0011 §2, §4, §7;
// RFC-MACP-0002 §4; checklist MODE-6, QUO-1, QUO-2).
func TestDescriptor(t *testing.T) {
	modetest.CheckDescriptorIs(t, quorum.New, modetest.WantDescriptor{
		Mode: "macp.mode.quorum.v1", Version: "1.0.0",
		Determinism: "semantic-deterministic", ParticipantModel: "quorum",
		MessageTypes: []string{"SessionStart", "ApprovalRequest", "Approve", "Reject", "Abstain", "Commitment"},
		Standard:     true,
	})
}

// TestRandomRuns drives the generator through the suite invariants with
// fixed seeds, and checks it reaches the valid paths.
func TestRandomRuns(t *testing.T) {
	modetest.RandomRunsReach(t, quorum.New(), gen{}, 13, 600, 60, 160,
		func(n int) int { return n / 10 }, func(n int) int { return 2 * n })
}

// FuzzQuorum feeds fuzzer-chosen message sequences through the shared
// suite's invariants (no panic, rejections inert, determinism, replay).
func FuzzQuorum(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 2, 0, 0, 5, 1, 0, 0, 5, 2, 0, 0, 18, 0})
	f.Add([]byte("\x05\x00\x01\x00\x01\x00\x00\x03\x00\x05\x01\x00\x00\x0c\x02\x00\x00\x10\x13\x00"))
	f.Add([]byte("quorum fuzz seed with a longer body to produce more messages................................"))
	f.Fuzz(func(t *testing.T, data []byte) {
		modetest.FuzzSteps(t, quorum.New(), gen{}, data)
	})
}
