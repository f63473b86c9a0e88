package decision_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/mode/modetest"
)

const (
	invalidEnv = coord.CodeInvalidEnvelope
	forbidden  = coord.CodeForbidden
	denied     = coord.CodePolicyDenied
	badPolicy  = coord.CodeInvalidPolicyDefinition
)

// garbage is not decodable as any protobuf message (truncated varint).
var garbage = []byte{0xff, 0xff}

// badUTF8 is a ProposalPayload whose proposal_id is not valid UTF-8, which
// proto3 string fields refuse.
var badUTF8 = []byte{0x0a, 0x02, 0xc3, 0x28, 0x12, 0x01, 'x'}

// TestSuite runs the shared mode suite over the message-level scenarios.
func TestSuite(t *testing.T) {
	modetest.Run(t, decision.New(), messageScenarios(t)...)
}

func messageScenarios(t *testing.T) []modetest.Scenario {
	return []modetest.Scenario{
		{
			// RFC-MACP-0007 §2.1, §6; checklist CONF-20 (spec fixture decision_happy_path).
			Name:    "happy path",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(initiator, "p1", "deploy"), "RFC-MACP-0007 abstract / ⚠C3: unlisted initiator may propose"),
				ok(evalIn(alice, "p1", "APPROVE", 0.9), "RFC-MACP-0007 §4 Evaluation"),
				ok(objIn(bob, "p1", "low"), "RFC-MACP-0007 §4 Objection"),
				ok(voteIn(alice, "p1", "APPROVE"), "RFC-MACP-0007 §4 Vote"),
				ok(commitIn(initiator, true), "RFC-MACP-0007 §6 terminal Commitment"),
			},
			WantState: map[string]any{
				"phase":       "Committed",
				"proposals":   map[string]any{"p1": map[string]any{"proposal_id": "p1", "option": "deploy", "rationale": "because p1", "sender": initiator}},
				"votes":       map[string]any{"p1": map[string]any{alice: map[string]any{"vote": "APPROVE", "reason": "r-APPROVE"}}},
				"evaluations": []any{map[string]any{"proposal_id": "p1", "recommendation": "APPROVE", "confidence": 0.9, "reason": "eval", "sender": alice}},
				"objections":  []any{map[string]any{"proposal_id": "p1", "reason": "concern", "severity": "low", "sender": bob}},
			},
		},
		{
			// RFC-MACP-0007 §2.1: only declared participants send
			// Evaluation/Objection/Vote; authority is checked before decoding.
			Name:    "authority",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(propIn(outsider, "p1", "deploy"), forbidden, "RFC-MACP-0007 §2.1 outsider Proposal (CONF-21)"),
				rej(rawIn(decision.TypeProposal, outsider, garbage), forbidden, "authority before decoding"),
				ok(propIn(alice, "p1", "deploy"), "RFC-MACP-0007 §2.1 participant Proposal"),
				ok(propIn(initiator, "p2", "rollback"), "⚠C3 unlisted initiator Proposal"),
				rej(evalIn(outsider, "p1", "APPROVE", 0.5), forbidden, "RFC-MACP-0007 §2.1 outsider Evaluation"),
				rej(evalIn(initiator, "p1", "APPROVE", 0.5), forbidden, "RFC-MACP-0007 §2 unlisted initiator may not evaluate"),
				rej(rawIn(decision.TypeEvaluation, outsider, garbage), forbidden, "authority before decoding"),
				rej(objIn(outsider, "p1", "high"), forbidden, "RFC-MACP-0007 §2.1 outsider Objection"),
				rej(objIn(initiator, "p1", "high"), forbidden, "RFC-MACP-0007 §2 unlisted initiator may not object"),
				rej(rawIn(decision.TypeObjection, outsider, garbage), forbidden, "authority before decoding"),
				rej(voteIn(outsider, "p1", "APPROVE"), forbidden, "RFC-MACP-0007 §2.1 outsider Vote"),
				rej(voteIn(initiator, "p1", "APPROVE"), forbidden, "RFC-MACP-0007 §2 unlisted initiator may not vote"),
				rej(rawIn(decision.TypeVote, outsider, garbage), forbidden, "authority before decoding"),
				ok(evalIn(bob, "p1", "REVIEW", 0.1), "participant Evaluation"),
				ok(objIn(bob, "p2", "medium"), "participant Objection"),
				ok(voteIn(bob, "p1", "ABSTAIN"), "participant Vote"),
			},
			WantState: map[string]any{"phase": "Voting"},
		},
		{
			// RFC-MACP-0007 §2: a listed initiator acts as a participant.
			Name:    "listed initiator",
			Binding: binding(t, "", initiator, alice),
			Steps: []modetest.Step{
				ok(propIn(initiator, "p1", "deploy"), "RFC-MACP-0007 §2"),
				ok(evalIn(initiator, "p1", "BLOCK", 1), "RFC-MACP-0007 §2"),
				ok(objIn(initiator, "p1", "critical"), "RFC-MACP-0007 §2"),
				ok(voteIn(initiator, "p1", "REJECT"), "RFC-MACP-0007 §2"),
				ok(commitIn(initiator, false), "RFC-MACP-0007 §6 negative outcome"),
			},
			WantState: map[string]any{"phase": "Committed", "votes": map[string]any{"p1": map[string]any{initiator: map[string]any{"vote": "REJECT"}}}},
		},
		{
			// RFC-MACP-0007 §9: payloads are decision.proto messages.
			Name:    "undecodable payloads",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(decision.TypeProposal, alice, garbage), invalidEnv, "RFC-MACP-0007 §9 Proposal"),
				rej(rawIn(decision.TypeProposal, alice, badUTF8), invalidEnv, "proto3 string must be UTF-8"),
				ok(propIn(alice, "p1", "deploy"), ""),
				rej(rawIn(decision.TypeEvaluation, alice, garbage), invalidEnv, "RFC-MACP-0007 §9 Evaluation"),
				rej(rawIn(decision.TypeObjection, alice, garbage), invalidEnv, "RFC-MACP-0007 §9 Objection"),
				rej(rawIn(decision.TypeVote, alice, garbage), invalidEnv, "RFC-MACP-0007 §9 Vote"),
				rej(rawIn(decision.TypeVote, alice, nil), invalidEnv, "empty payload decodes to an empty proposal_id"),
			},
			WantState: map[string]any{"phase": "Evaluation", "evaluations": []any{}, "objections": []any{}, "votes": map[string]any{}},
		},
		{
			// RFC-MACP-0002 §1, checklist DEC-2: types the mode does not define.
			Name:    "undefined message types",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(coord.TypeCommitment, initiator, nil), invalidEnv, "Commitment goes through Commit, never Step"),
				rej(rawIn(coord.TypeSessionStart, initiator, nil), invalidEnv, "SessionStart is the core's"),
				rej(rawIn("Accept", alice, nil), invalidEnv, "another mode's type"),
				rej(rawIn("vote", alice, nil), invalidEnv, "type names are case-sensitive"),
			},
		},
		{
			// RFC-MACP-0007 §5.1: proposal_id unique and present.
			Name:    "proposal validation",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(propIn(alice, "", "deploy"), invalidEnv, "RFC-MACP-0007 §5.1 proposal_id required"),
				rej(propIn(alice, "  ", "deploy"), invalidEnv, "blank proposal_id"),
				rej(propIn(alice, "p1", ""), invalidEnv, "option required (reference runtime)"),
				ok(propIn(alice, "p1", "deploy"), ""),
				rej(propIn(bob, "p1", "other"), invalidEnv, "RFC-MACP-0007 §5.1 duplicate proposal_id"),
				rej(propIn(initiator, "p1", "deploy"), invalidEnv, "RFC-MACP-0007 §5.1 duplicate from the initiator"),
				ok(propIn(bob, "p2", "other"), ""),
			},
			WantState: map[string]any{"proposals": map[string]any{
				"p1": map[string]any{"sender": alice, "option": "deploy"},
				"p2": map[string]any{"sender": bob, "option": "other"},
			}},
		},
		{
			// RFC-MACP-0007 §5.2: references to an existing proposal.
			Name:    "references",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(evalIn(alice, "p1", "APPROVE", 0.5), invalidEnv, "RFC-MACP-0007 §5.2 before any proposal"),
				rej(objIn(alice, "p1", "high"), invalidEnv, "RFC-MACP-0007 §5.2 before any proposal"),
				rej(voteIn(alice, "p1", "APPROVE"), invalidEnv, "RFC-MACP-0007 §5.2 before any proposal"),
				ok(propIn(alice, "p1", "deploy"), ""),
				rej(evalIn(alice, "p9", "APPROVE", 0.5), invalidEnv, "RFC-MACP-0007 §5.2 unknown proposal"),
				rej(objIn(alice, "p9", "high"), invalidEnv, "RFC-MACP-0007 §5.2 unknown proposal"),
				rej(voteIn(alice, "p9", "APPROVE"), invalidEnv, "RFC-MACP-0007 §5.2 unknown proposal"),
				rej(voteIn(alice, "", "APPROVE"), invalidEnv, "RFC-MACP-0007 §5.2 empty reference"),
			},
			WantState: map[string]any{"phase": "Evaluation"},
		},
		{
			// RFC-MACP-0007 §4: enumerations, case-sensitive (⚠C10).
			Name:    "enumerations",
			Binding: binding(t, "", alice, bob, carol, dave),
			Steps: []modetest.Step{
				ok(propIn(alice, "p1", "deploy"), ""),
				ok(propIn(alice, "p2", "rollback"), ""),
				ok(evalIn(alice, "p1", "APPROVE", 0), "RFC-MACP-0007 §4 APPROVE, confidence 0"),
				ok(evalIn(alice, "p1", "REVIEW", 1), "RFC-MACP-0007 §4 REVIEW, confidence 1"),
				ok(evalIn(alice, "p1", "BLOCK", 0.5), "RFC-MACP-0007 §4 BLOCK"),
				ok(evalIn(alice, "p1", "REJECT", 0.5), "RFC-MACP-0007 §4 REJECT"),
				rej(evalIn(alice, "p1", "approve", 0.5), invalidEnv, "RFC-MACP-0007 §4 case-sensitive (⚠C10)"),
				rej(evalIn(alice, "p1", "Approve", 0.5), invalidEnv, "RFC-MACP-0007 §4 case-sensitive"),
				rej(evalIn(alice, "p1", "", 0.5), invalidEnv, "RFC-MACP-0007 §4 recommendation required"),
				rej(evalIn(alice, "p1", "PROCEED", 0.5), invalidEnv, "RFC-MACP-0007 §4 unknown recommendation"),
				rej(evalIn(alice, "p1", "APPROVE", -0.01), invalidEnv, "DEC-10 confidence below 0"),
				rej(evalIn(alice, "p1", "APPROVE", 1.01), invalidEnv, "DEC-10 confidence above 1"),
				rej(evalIn(alice, "p1", "APPROVE", math.NaN()), invalidEnv, "DEC-10 confidence NaN"),
				rej(evalIn(alice, "p1", "APPROVE", math.Inf(1)), invalidEnv, "DEC-10 confidence +Inf"),
				ok(objIn(alice, "p1", "low"), "RFC-MACP-0007 §4 low"),
				ok(objIn(alice, "p1", "medium"), "RFC-MACP-0007 §4 medium"),
				ok(objIn(alice, "p1", "high"), "RFC-MACP-0007 §4 high"),
				ok(objIn(alice, "p1", "critical"), "RFC-MACP-0007 §4 critical"),
				ok(objIn(bob, "p1", ""), "DEC-10 empty severity defaults to medium"),
				rej(objIn(alice, "p1", "CRITICAL"), invalidEnv, "RFC-MACP-0007 §4 severities are the lowercase values"),
				rej(objIn(alice, "p1", "severe"), invalidEnv, "RFC-MACP-0007 §4 unknown severity"),
				rej(voteIn(alice, "p1", "approve"), invalidEnv, "RFC-MACP-0007 §4 case-sensitive vote (⚠C10)"),
				rej(voteIn(alice, "p1", ""), invalidEnv, "RFC-MACP-0007 §4 vote required"),
				rej(voteIn(alice, "p1", "YES"), invalidEnv, "RFC-MACP-0007 §4 unknown vote"),
				ok(voteIn(alice, "p1", "APPROVE"), "RFC-MACP-0007 §4 APPROVE"),
				ok(voteIn(bob, "p1", "REJECT"), "RFC-MACP-0007 §4 REJECT"),
				ok(voteIn(carol, "p1", "ABSTAIN"), "RFC-MACP-0007 §4 ABSTAIN"),
			},
			WantState: map[string]any{
				"objections": []any{
					map[string]any{"severity": "low"}, map[string]any{"severity": "medium"},
					map[string]any{"severity": "high"}, map[string]any{"severity": "critical"},
					map[string]any{"severity": "medium", "sender": bob},
				},
				"votes": map[string]any{"p1": map[string]any{
					alice: map[string]any{"vote": "APPROVE"}, bob: map[string]any{"vote": "REJECT"}, carol: map[string]any{"vote": "ABSTAIN"},
				}},
			},
		},
		{
			// RFC-MACP-0007 §5.3: at most one vote per participant per proposal.
			Name:    "one vote per proposal",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(alice, "p1", "deploy"), ""),
				ok(propIn(alice, "p2", "rollback"), ""),
				ok(voteIn(alice, "p1", "APPROVE"), ""),
				rej(voteIn(alice, "p1", "REJECT"), invalidEnv, "RFC-MACP-0007 §5.3 second vote, other value"),
				rej(voteIn(alice, "p1", "APPROVE"), invalidEnv, "RFC-MACP-0007 §5.3 second vote, same value"),
				ok(voteIn(alice, "p2", "REJECT"), "RFC-MACP-0007 §5.3 votes are per proposal"),
				ok(voteIn(bob, "p1", "REJECT"), "another participant"),
			},
			WantState: map[string]any{"votes": map[string]any{
				"p1": map[string]any{alice: map[string]any{"vote": "APPROVE"}, bob: map[string]any{"vote": "REJECT"}},
				"p2": map[string]any{alice: map[string]any{"vote": "REJECT"}},
			}},
		},
		{
			// Checklist DEC-10 phases; CONF-21 (spec fixture decision_reject_paths).
			Name:    "phases",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(initiator, "p1", "deploy"), "DEC-10 Proposal -> Evaluation"),
				ok(propIn(alice, "p2", "rollback"), "DEC-10 proposals open in Evaluation"),
				ok(objIn(bob, "p2", "high"), ""),
				ok(voteIn(alice, "p1", "APPROVE"), "DEC-10 Evaluation -> Voting"),
				rej(evalIn(bob, "p1", "approve", 0.7), invalidEnv, "CONF-21 late lowercase Evaluation"),
				rej(evalIn(bob, "p1", "APPROVE", 0.7), invalidEnv, "DEC-10 no Evaluation once voting started"),
				rej(objIn(bob, "p1", "critical"), invalidEnv, "DEC-10 no Objection once voting started"),
				rej(propIn(bob, "p3", "third"), invalidEnv, "DEC-10 no Proposal once voting started"),
				ok(voteIn(bob, "p2", "REJECT"), "DEC-10 votes stay open"),
			},
			WantState: map[string]any{"phase": "Voting", "votes": map[string]any{"p1": map[string]any{alice: map[string]any{"vote": "APPROVE"}}}},
		},
		{
			// RFC-MACP-0007 §5.5: no resolution before a proposal exists.
			Name:    "commitment needs a proposal",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(commitIn(initiator, true), invalidEnv, "RFC-MACP-0007 §5.5 positive, zero proposals"),
				rej(commitIn(initiator, false), invalidEnv, "RFC-MACP-0007 §5.5 negative, zero proposals"),
				ok(propIn(alice, "p1", "deploy"), ""),
				ok(commitIn(initiator, false), "RFC-MACP-0007 §6 negative outcome (DEC-9)"),
			},
			WantState: map[string]any{"phase": "Committed"},
		},
		{
			// Checklist DEC-8: policy.default has no voting algorithm; the
			// initiator decides at face value.
			Name:    "default policy face value",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(initiator, "p1", "deploy"), ""),
				ok(objIn(alice, "p1", "critical"), "no veto without a policy"),
				ok(voteIn(alice, "p1", "REJECT"), ""),
				ok(voteIn(bob, "p1", "REJECT"), ""),
				ok(commitIn(initiator, true), "DEC-8 positive despite rejections"),
			},
		},
		{
			// RFC-MACP-0007 §2 / §3: participants required.
			Name:     "no participants",
			Binding:  binding(t, "", []string{}...),
			StartErr: invalidEnv,
		},
	}
}

// pv is one vote: sender, proposal, value.
type pv struct{ sender, pid, vote string }

// policyScenario: the initiator proposes pids in order, the votes are cast,
// then a Commitment with the given outcome expects want.
func policyScenario(t *testing.T, name, rules string, participants []string, pids []string, votes []pv, positive bool, want coord.Code) modetest.Scenario {
	b := binding(t, rules, participants...)
	var steps []modetest.Step
	for _, id := range pids {
		steps = append(steps, ok(propIn(initiator, id, "option-"+id), ""))
	}
	for _, v := range votes {
		steps = append(steps, ok(voteIn(v.sender, v.pid, v.vote), ""))
	}
	steps = append(steps, rej(commitIn(initiator, positive), want, name))
	return modetest.Scenario{Name: name, Binding: b, Steps: steps}
}

func votesOn(pid string, spec ...string) []pv {
	out := make([]pv, 0, len(spec)/2)
	for i := 0; i+1 < len(spec); i += 2 {
		out = append(out, pv{spec[i], pid, spec[i+1]})
	}
	return out
}

var (
	abc  = []string{alice, bob, carol}
	abcd = []string{alice, bob, carol, dave}
	p1   = []string{"p1"}
	p12  = []string{"p1", "p2"}
)

// TestPolicyVoting covers RFC-MACP-0012 §4.1 voting rules at their
// boundaries (⚠C8 decisions in rules.go).
func TestPolicyVoting(t *testing.T) {
	const (
		majority = `{"voting":{"algorithm":"majority"}}`
		super67  = `{"voting":{"algorithm":"supermajority","threshold":0.67}}`
		superTwo = `{"voting":{"algorithm":"supermajority","threshold":0.6666666666666666}}`
		superDef = `{"voting":{"algorithm":"supermajority"}}`
		super75  = `{"voting":{"algorithm":"supermajority","threshold":0.75}}`
		unanim   = `{"voting":{"algorithm":"unanimous"}}`
		plural   = `{"voting":{"algorithm":"plurality"}}`
		none     = `{"voting":{"algorithm":"none"}}`
	)
	A, R, X := "APPROVE", "REJECT", "ABSTAIN"
	weighted := func(weights string, thr float64) string {
		return fmt.Sprintf(`{"voting":{"algorithm":"weighted","threshold":%v,"weights":%s}}`, thr, weights)
	}
	many := make([]string, 10)
	for i := range many {
		many[i] = fmt.Sprintf("agent://p%d", i)
	}
	manyVotes := func(n int) []pv {
		var v []pv
		for i := 0; i < n; i++ {
			v = append(v, pv{many[i], "p1", A})
		}
		return v
	}
	quorum := func(typ string, val float64) string {
		return fmt.Sprintf(`{"voting":{"algorithm":"majority","quorum":{"type":%q,"value":%v}}}`, typ, val)
	}
	scs := []modetest.Scenario{
		// RFC-MACP-0012 §4.1 majority: "more than 50% of cast votes".
		policyScenario(t, "majority 2 of 3 passes", majority, abc, p1, votesOn("p1", alice, A, bob, A, carol, R), true, ""),
		policyScenario(t, "majority exactly 50% fails", majority, abcd, p1, votesOn("p1", alice, A, bob, R), true, denied),
		policyScenario(t, "majority abstention not cast", majority, abc, p1, votesOn("p1", alice, A, bob, R, carol, X), true, denied),
		policyScenario(t, "majority 1 of 1 cast with abstentions passes", majority, abc, p1, votesOn("p1", alice, A, bob, X, carol, X), true, ""),
		policyScenario(t, "majority no votes fails", majority, abc, p1, nil, true, denied),
		policyScenario(t, "majority only abstentions fails", majority, abc, p1, votesOn("p1", alice, X), true, denied),
		policyScenario(t, "majority failing, negative outcome at face value", majority, abc, p1, votesOn("p1", alice, R), false, ""),
		// RFC-MACP-0012 §4.1 supermajority: "at least threshold fraction".
		policyScenario(t, "supermajority 2/3 below 0.67", super67, abc, p1, votesOn("p1", alice, A, bob, A, carol, R), true, denied),
		policyScenario(t, "supermajority 2/3 at float 2/3", superTwo, abc, p1, votesOn("p1", alice, A, bob, A, carol, R), true, ""),
		policyScenario(t, "supermajority default two thirds met", superDef, abc, p1, votesOn("p1", alice, A, bob, A, carol, R), true, ""),
		policyScenario(t, "supermajority default two thirds missed", superDef, abcd, p1, votesOn("p1", alice, A, bob, A, carol, R, dave, R), true, denied),
		policyScenario(t, "supermajority exactly at 0.75", super75, abcd, p1, votesOn("p1", alice, A, bob, A, carol, A, dave, R), true, ""),
		policyScenario(t, "supermajority abstention not cast", super75, abcd, p1, votesOn("p1", alice, A, bob, A, carol, A, dave, X), true, ""),
		// RFC-MACP-0012 §4.1 unanimous: "all cast votes must approve".
		policyScenario(t, "unanimous all approve", unanim, abc, p1, votesOn("p1", alice, A, bob, A, carol, A), true, ""),
		policyScenario(t, "unanimous with abstention", unanim, abc, p1, votesOn("p1", alice, A, bob, X), true, ""),
		policyScenario(t, "unanimous one reject", unanim, abc, p1, votesOn("p1", alice, A, bob, A, carol, R), true, denied),
		policyScenario(t, "unanimous only abstentions", unanim, abc, p1, votesOn("p1", alice, X), true, denied),
		// RFC-MACP-0012 §4.1 weighted: threshold on the weighted sum.
		policyScenario(t, "weighted exactly at threshold", weighted(`{"agent://a":3,"agent://b":1,"agent://c":1}`, 0.6), abc, p1,
			votesOn("p1", alice, A, bob, R, carol, R), true, ""),
		policyScenario(t, "weighted below threshold", weighted(`{"agent://a":2,"agent://b":1,"agent://c":1}`, 0.6), abc, p1,
			votesOn("p1", alice, A, bob, R, carol, R), true, denied),
		policyScenario(t, "weighted unlisted participant weighs 1", weighted(`{"agent://a":1}`, 0.5), abc, p1,
			votesOn("p1", alice, A, bob, R), true, ""),
		policyScenario(t, "weighted zero weights count nothing", weighted(`{"agent://a":0,"agent://b":0,"agent://c":5}`, 0.5), abc, p1,
			votesOn("p1", alice, A, bob, A), true, denied),
		policyScenario(t, "weighted minority by count, majority by weight", weighted(`{"agent://a":5}`, 0.5), abc, p1,
			votesOn("p1", alice, A, bob, R, carol, R), true, ""),
		// RFC-MACP-0012 §4.1 plurality: most approve votes wins, no threshold.
		policyScenario(t, "plurality clear winner", plural, abc, p12,
			append(votesOn("p1", alice, A, bob, A), votesOn("p2", carol, A)...), true, ""),
		policyScenario(t, "plurality tie", plural, abc, p12,
			append(votesOn("p1", alice, A), votesOn("p2", bob, A)...), true, denied),
		policyScenario(t, "plurality no approvals", plural, abc, p12, votesOn("p1", alice, R), true, denied),
		policyScenario(t, "plurality ignores rejections", plural, abc, p1, votesOn("p1", alice, A, bob, R, carol, R), true, ""),
		// Subject proposal: most approvals, ties to the earliest.
		policyScenario(t, "subject is the most approved proposal", majority, abcd, p12,
			append(votesOn("p1", alice, A, bob, R), votesOn("p2", carol, A, dave, A)...), true, ""),
		policyScenario(t, "subject tie goes to the earliest", majority, abcd, p12,
			append(votesOn("p1", alice, A, bob, R), votesOn("p2", carol, A)...), true, denied),
		policyScenario(t, "algorithm none adds nothing", none, abc, p1, votesOn("p1", alice, R), true, ""),
		// RFC-MACP-0012 §4.1 quorum: count = votes cast, ABSTAIN included.
		policyScenario(t, "quorum count just below", quorum("count", 3), abc, p1, votesOn("p1", alice, A, bob, A), true, denied),
		policyScenario(t, "quorum count at", quorum("count", 3), abc, p1, votesOn("p1", alice, A, bob, A, carol, R), true, ""),
		policyScenario(t, "quorum count abstention participates", quorum("count", 3), abc, p1, votesOn("p1", alice, A, bob, A, carol, X), true, ""),
		// percentage = share (0..1) of declared participants.
		policyScenario(t, "quorum percentage just below", quorum("percentage", 0.7), many, p1, manyVotes(6), true, denied),
		policyScenario(t, "quorum percentage at 7/10", quorum("percentage", 0.7), many, p1, manyVotes(7), true, ""),
		policyScenario(t, "quorum percentage 1 needs everyone", quorum("percentage", 1), abc, p1, votesOn("p1", alice, A, bob, A), true, denied),
		policyScenario(t, "quorum missed, negative at face value", quorum("count", 3), abc, p1, nil, false, ""),
	}
	modetest.Run(t, decision.New(), scs...)
}

// TestPolicyCommitmentAndObjections covers RFC-MACP-0012 §4.1
// commitment.require_vote_quorum and objection_handling.
func TestPolicyCommitmentAndObjections(t *testing.T) {
	A := "APPROVE"
	const (
		reqQuorum  = `{"voting":{"quorum":{"type":"count","value":2}},"commitment":{"require_vote_quorum":true}}`
		quorumOnly = `{"voting":{"quorum":{"type":"count","value":2}}}`
		veto1      = `{"objection_handling":{"critical_severity_vetoes":true}}`
		veto2      = `{"objection_handling":{"critical_severity_vetoes":true,"veto_threshold":2}}`
		vetoOff    = `{"objection_handling":{"critical_severity_vetoes":false,"veto_threshold":1}}`
	)
	withObjections := func(name, rules string, objs [][3]string, positive bool, want coord.Code) modetest.Scenario {
		b := binding(t, rules, abc...)
		steps := []modetest.Step{ok(propIn(initiator, "p1", "deploy"), ""), ok(propIn(initiator, "p2", "other"), "")}
		for _, o := range objs {
			steps = append(steps, ok(objIn(o[0], o[1], o[2]), ""))
		}
		steps = append(steps, ok(evalIn(alice, "p1", "BLOCK", 1), "BLOCK is advisory, never a veto"))
		steps = append(steps, ok(voteIn(alice, "p1", A), ""))
		steps = append(steps, rej(commitIn(initiator, positive), want, name))
		return modetest.Scenario{Name: name, Binding: b, Steps: steps}
	}
	scs := []modetest.Scenario{
		policyScenario(t, "require_vote_quorum just below", reqQuorum, abc, p1, votesOn("p1", alice, A), true, denied),
		policyScenario(t, "require_vote_quorum at", reqQuorum, abc, p1, votesOn("p1", alice, A, bob, "REJECT"), true, ""),
		policyScenario(t, "require_vote_quorum negative at face value", reqQuorum, abc, p1, nil, false, ""),
		policyScenario(t, "quorum without algorithm or requirement is inert", quorumOnly, abc, p1, nil, true, ""),
		// RFC-MACP-0007 §4: only critical Objections trigger veto logic.
		withObjections("veto at threshold 1", veto1, [][3]string{{bob, "p1", "critical"}}, true, denied),
		withObjections("veto: high is not critical", veto1, [][3]string{{bob, "p1", "high"}, {carol, "p1", ""}}, true, ""),
		withObjections("veto below threshold 2", veto2, [][3]string{{bob, "p1", "critical"}}, true, ""),
		withObjections("veto counts distinct objectors", veto2, [][3]string{{bob, "p1", "critical"}, {bob, "p1", "critical"}}, true, ""),
		withObjections("veto at threshold 2", veto2, [][3]string{{bob, "p1", "critical"}, {carol, "p1", "critical"}}, true, denied),
		withObjections("veto disabled", vetoOff, [][3]string{{bob, "p1", "critical"}}, true, ""),
		withObjections("veto on another proposal", veto1, [][3]string{{bob, "p2", "critical"}}, true, ""),
		withObjections("veto, negative at face value", veto1, [][3]string{{bob, "p1", "critical"}}, false, ""),
	}
	modetest.Run(t, decision.New(), scs...)
}

// TestPolicyEvaluation covers RFC-MACP-0012 §4.1 evaluation rules, which act
// on Votes (checklist POL-31).
func TestPolicyEvaluation(t *testing.T) {
	const (
		req   = `{"evaluation":{"required_before_voting":true}}`
		req06 = `{"evaluation":{"minimum_confidence":0.6,"required_before_voting":true}}`
		min06 = `{"evaluation":{"minimum_confidence":0.6}}`
	)
	scs := []modetest.Scenario{
		{
			Name: "required_before_voting", Binding: binding(t, req, abc...),
			Steps: []modetest.Step{
				ok(propIn(initiator, "p1", "deploy"), ""),
				ok(propIn(initiator, "p2", "other"), ""),
				rej(voteIn(alice, "p1", "APPROVE"), denied, "RFC-MACP-0012 §4.1 no evaluation yet"),
				ok(evalIn(bob, "p1", "REVIEW", 1), ""),
				rej(voteIn(alice, "p1", "APPROVE"), denied, "RFC-MACP-0007 §4 REVIEW is informational only"),
				ok(evalIn(bob, "p2", "APPROVE", 1), ""),
				rej(voteIn(alice, "p1", "APPROVE"), denied, "an evaluation of another proposal does not count"),
				ok(evalIn(bob, "p1", "REJECT", 0), "any non-REVIEW evaluation qualifies at minimum_confidence 0"),
				ok(voteIn(alice, "p1", "APPROVE"), ""),
				ok(voteIn(alice, "p2", "APPROVE"), ""),
				ok(commitIn(initiator, true), ""),
			},
		},
		{
			Name: "minimum_confidence with required_before_voting", Binding: binding(t, req06, abc...),
			Steps: []modetest.Step{
				ok(propIn(initiator, "p1", "deploy"), ""),
				ok(evalIn(bob, "p1", "APPROVE", 0.59), "low-confidence evaluations stay on record"),
				rej(voteIn(alice, "p1", "APPROVE"), denied, "RFC-MACP-0012 §4.1 below minimum_confidence"),
				ok(evalIn(carol, "p1", "BLOCK", 0.6), ""),
				ok(voteIn(alice, "p1", "APPROVE"), "RFC-MACP-0012 §4.1 exactly minimum_confidence"),
			},
			WantState: map[string]any{"evaluations": []any{map[string]any{"confidence": 0.59}, map[string]any{"confidence": 0.6}}},
		},
		{
			Name: "minimum_confidence alone", Binding: binding(t, min06, abc...),
			Steps: []modetest.Step{
				ok(propIn(initiator, "p1", "deploy"), ""),
				ok(evalIn(bob, "p1", "APPROVE", 0.1), ""),
				ok(voteIn(alice, "p1", "APPROVE"), "no effect without required_before_voting"),
				ok(commitIn(initiator, true), ""),
			},
		},
	}
	modetest.Run(t, decision.New(), scs...)
}

// TestPolicyDefinitions: the bound policy's decision rules are validated
// against decision-rules.schema.json at Start (RFC-MACP-0012 §4.1, §10).
func TestPolicyDefinitions(t *testing.T) {
	bad := []string{
		`{"voting":{"algorithm":"borda"}}`,
		`{"voting":{"algorithm":"Majority"}}`,
		`{"voting":{"algorithm":3}}`,
		`{"voting":5}`,
		`{"voting":[]}`,
		`{"voting":{"threshold":1.5}}`,
		`{"voting":{"threshold":-0.1}}`,
		`{"voting":{"algorithm":"supermajority","threshold":0.5}}`,
		`{"voting":{"quorum":{"type":"share","value":1}}}`,
		`{"voting":{"quorum":{"type":"count","value":-1}}}`,
		`{"voting":{"quorum":{"type":"percentage","value":60}}}`,
		`{"voting":{"quorum":3}}`,
		`{"voting":{"algorithm":"weighted"}}`,
		`{"voting":{"algorithm":"weighted","weights":{"agent://a":-1}}}`,
		`{"voting":{"weights":{"agent://a":"heavy"}}}`,
		`{"objection_handling":{"veto_threshold":0}}`,
		`{"objection_handling":{"veto_threshold":1.5}}`,
		`{"objection_handling":{"critical_severity_vetoes":"yes"}}`,
		`{"evaluation":{"minimum_confidence":2}}`,
		`{"evaluation":{"required_before_voting":1}}`,
		`{"commitment":{"require_vote_quorum":"true"}}`,
	}
	var scs []modetest.Scenario
	for _, r := range bad {
		b := binding(t, r)
		scs = append(scs, modetest.Scenario{Name: "invalid " + r, Binding: b, StartErr: badPolicy})
		if got := coord.CodeOf(decision.ValidateRules(b.Policy)); got != badPolicy {
			t.Errorf("ValidateRules(%s) = %q", r, got)
		}
	}
	good := []string{
		`{}`,
		`{"voting":null}`,
		`{"voting":{"algorithm":"none"},"x-vendor":{"anything":true}}`,
		`{"voting":{"algorithm":"majority","threshold":0.9,"extra":1}}`,
		`{"voting":{"algorithm":"supermajority","threshold":1}}`,
		`{"voting":{"algorithm":"weighted","weights":{}}}`,
		`{"voting":{"quorum":{"type":"percentage","value":1}}}`,
		`{"objection_handling":{"veto_threshold":2.0}}`,
		`{"commitment":{"authority":"any_participant","require_vote_quorum":false}}`,
	}
	for _, r := range good {
		if err := decision.ValidateRules(binding(t, r).Policy); err != nil {
			t.Errorf("ValidateRules(%s): %v", r, err)
		}
		scs = append(scs, modetest.Scenario{Name: "valid " + r, Binding: binding(t, r),
			Steps: []modetest.Step{ok(propIn(initiator, "p1", "deploy"), "")}})
	}
	nilPolicy := binding(t, "")
	nilPolicy.Policy = nil
	scs = append(scs, modetest.Scenario{Name: "nil policy is policy.default", Binding: nilPolicy,
		Steps: []modetest.Step{ok(propIn(initiator, "p1", "deploy"), ""), ok(commitIn(initiator, true), "")}})
	modetest.Run(t, decision.New(), scs...)
}

// TestDenyReasons: POLICY_DENIED carries one human-readable reason per
// failed rule (RFC-MACP-0012 §6.2 "informative reason string").
func TestDenyReasons(t *testing.T) {
	b := binding(t, `{"voting":{"algorithm":"majority"},"objection_handling":{"critical_severity_vetoes":true}}`, abc...)
	st, err := decision.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []modetest.Input{propIn(initiator, "p1", "deploy"), objIn(carol, "p1", "critical"), voteIn(alice, "p1", "APPROVE"), voteIn(bob, "p1", "REJECT")} {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	c := commitIn(initiator, true)
	err = st.Commit(b, &c.Msg, c.Commitment)
	ce := coord.AsError(err)
	if ce == nil || ce.Code != denied {
		t.Fatalf("got %v, want POLICY_DENIED", err)
	}
	if len(ce.Reasons) != 2 || !strings.Contains(ce.Reasons[0], "objection_handling") || !strings.Contains(ce.Reasons[1], "majority: 1 of 2") {
		t.Errorf("reasons = %q", ce.Reasons)
	}
	if !strings.Contains(ce.Message, "policy.test.rules") {
		t.Errorf("message %q does not name the policy", ce.Message)
	}

	// The vote-time rule carries its reason too.
	b2 := binding(t, `{"evaluation":{"required_before_voting":true}}`)
	st2, _ := decision.New().Start(b2)
	p := propIn(initiator, "p1", "deploy")
	_ = st2.Step(b2, &p.Msg)
	v := voteIn(alice, "p1", "APPROVE")
	ce = coord.AsError(st2.Step(b2, &v.Msg))
	if ce == nil || ce.Code != denied || len(ce.Reasons) != 1 || !strings.Contains(ce.Reasons[0], "required_before_voting") {
		t.Errorf("vote: got %#v", ce)
	}
}

// TestRejectedLeavesProjectUnchanged: "On error nothing changed" (mode.State
// contract; RFC-MACP-0003 only accepted history shapes state), checked with
// reflect.DeepEqual on every reject path from a state that has content.
func TestRejectedLeavesProjectUnchanged(t *testing.T) {
	b := binding(t, `{"voting":{"algorithm":"majority"},"evaluation":{"required_before_voting":true}}`, abc...)
	st, err := decision.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []modetest.Input{
		propIn(initiator, "p1", "deploy"), propIn(alice, "p2", "other"),
		evalIn(bob, "p1", "APPROVE", 0.8), objIn(carol, "p1", "high"),
	} {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	rejects := []modetest.Input{
		propIn(outsider, "p3", "x"), propIn(alice, "p1", "dup"), propIn(alice, "", "x"), rawIn(decision.TypeProposal, alice, garbage),
		evalIn(outsider, "p1", "APPROVE", 1), evalIn(alice, "p9", "APPROVE", 1), evalIn(alice, "p1", "approve", 1), evalIn(alice, "p1", "APPROVE", 2),
		objIn(outsider, "p1", "low"), objIn(alice, "p9", "low"), objIn(alice, "p1", "LOW"),
		voteIn(outsider, "p1", "APPROVE"), voteIn(alice, "p9", "APPROVE"), voteIn(alice, "p1", "yes"),
		voteIn(alice, "p2", "APPROVE"),                        // POLICY_DENIED: p2 not evaluated
		rawIn("Bogus", alice, nil), commitIn(initiator, true), // POLICY_DENIED: no votes
	}
	// After one accepted vote (phase Voting), more reject paths.
	lateRejects := []modetest.Input{
		voteIn(alice, "p1", "REJECT"), evalIn(bob, "p1", "APPROVE", 1), objIn(bob, "p1", "low"), propIn(bob, "p3", "x"),
	}
	check := func(ins []modetest.Input) {
		t.Helper()
		modetest.RejectUnchanged(t, st, b, ins...)
	}
	check(rejects)
	v := voteIn(alice, "p1", "APPROVE")
	if err := st.Step(b, &v.Msg); err != nil {
		t.Fatal(err)
	}
	check(lateRejects)
}

// TestAfterCommit: a committed state refuses everything with
// SESSION_NOT_OPEN (the core normally stops first; RFC-MACP-0001 terminal
// sessions accept nothing).
func TestAfterCommit(t *testing.T) {
	modetest.CheckAfterCommit(t, decision.New(), binding(t, ""),
		[]modetest.Input{propIn(initiator, "p1", "deploy")}, commitIn(initiator, true),
		voteIn(alice, "p1", "APPROVE"))
}

// TestDescriptor pins the discovery descriptor (RFC-MACP-0007 §2, §7;
// RFC-MACP-0002 §4; checklist MODE-6, DEC-1, DEC-2).
func TestDescriptor(t *testing.T) {
	modetest.CheckDescriptorIs(t, decision.New, modetest.WantDescriptor{
		Mode: "macp.mode.decision.v1", Version: "1.0.0",
		Determinism: "semantic-deterministic", ParticipantModel: "declared",
		MessageTypes: []string{"SessionStart", "Proposal", "Evaluation", "Objection", "Vote", "Commitment"},
		Standard:     true,
	})
}

// TestRandomRuns drives the generator through the suite invariants with
// fixed seeds, and checks it reaches the valid paths.
func TestRandomRuns(t *testing.T) {
	modetest.RandomRunsReach(t, decision.New(), gen{}, 7, 400, 50, 160,
		func(n int) int { return 1 }, func(n int) int { return n })
}

// FuzzDecision feeds fuzzer-chosen message sequences through the shared
// suite's invariants (no panic, rejections inert, determinism, replay).
func FuzzDecision(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 1, 0, 0, 2, 0, 14, 0, 0, 0, 0, 16, 0})
	f.Add([]byte("\x03\x01\x00\x02\x00\x00\x00\x00\x0c\x02\x00\x00\x00\x10\x00\x03"))
	f.Add([]byte("decision fuzz seed with a longer body to produce more messages................"))
	f.Fuzz(func(t *testing.T, data []byte) {
		modetest.FuzzSteps(t, decision.New(), gen{}, data)
	})
}
