package decision_test

import (
	"fmt"
	"math"
	"testing"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/mode/modetest"
)

const (
	initiator = "agent://orchestrator"
	outsider  = "agent://outsider"
	alice     = "agent://a"
	bob       = "agent://b"
	carol     = "agent://c"
	dave      = "agent://d"
)

var msg = modetest.Messages()

var marshal = modetest.Marshal

// binding returns a decision binding with the given policy rules JSON ("" =
// policy.default) and participants (default a, b).
func binding(t testing.TB, rules string, participants ...string) *mode.Binding {
	if participants == nil {
		participants = []string{alice, bob}
	}
	return modetest.Binding(t, decision.ModeID, decision.ModeVersion, "policy.test.rules", rules, initiator, participants)
}

func propIn(sender, id, option string) modetest.Input {
	return modetest.Input{Msg: msg(decision.TypeProposal, sender,
		marshal(&decisionv1.ProposalPayload{ProposalId: id, Option: option, Rationale: "because " + id}))}
}

func evalIn(sender, pid, rec string, conf float64) modetest.Input {
	return modetest.Input{Msg: msg(decision.TypeEvaluation, sender,
		marshal(&decisionv1.EvaluationPayload{ProposalId: pid, Recommendation: rec, Confidence: conf, Reason: "eval"}))}
}

func objIn(sender, pid, severity string) modetest.Input {
	return modetest.Input{Msg: msg(decision.TypeObjection, sender,
		marshal(&decisionv1.ObjectionPayload{ProposalId: pid, Reason: "concern", Severity: severity}))}
}

func voteIn(sender, pid, v string) modetest.Input {
	return modetest.Input{Msg: msg(decision.TypeVote, sender,
		marshal(&decisionv1.VotePayload{ProposalId: pid, Vote: v, Reason: "r-" + v}))}
}

func rawIn(typ, sender string, payload []byte) modetest.Input {
	return modetest.Input{Msg: msg(typ, sender, payload)}
}

func commitIn(sender string, positive bool) modetest.Input {
	return modetest.Commitment(msg(coord.TypeCommitment, sender, nil), decision.ModeVersion, "decision.selected", "decision.rejected", positive)
}

// Step constructors: ok expects acceptance, rej a code.
var ok, rej = modetest.Ok, modetest.Rej

// gen is the Decision Mode generator for randomized runs and fuzzing: mostly
// well-formed messages over small id pools, so references, duplicates,
// phases, policies and positive Commitments are all reached.
type gen struct{}

var genPolicies = []string{
	"",
	`{"voting":{"algorithm":"majority"}}`,
	`{"voting":{"algorithm":"supermajority","threshold":0.6,"quorum":{"type":"count","value":2}},"commitment":{"require_vote_quorum":true}}`,
	`{"voting":{"algorithm":"unanimous"}}`,
	`{"voting":{"algorithm":"weighted","threshold":0.5,"weights":{"agent://a":2,"agent://b":0.5,"agent://c":0}}}`,
	`{"voting":{"algorithm":"plurality","quorum":{"type":"percentage","value":0.5}}}`,
	`{"objection_handling":{"critical_severity_vetoes":true,"veto_threshold":1}}`,
	`{"evaluation":{"minimum_confidence":0.6,"required_before_voting":true}}`,
	`{"voting":{"algorithm":"none","quorum":{"type":"count","value":1}},"commitment":{"require_vote_quorum":true}}`,
}

// genPoliciesV2 use the schema_version 2 knobs.
var genPoliciesV2 = []string{
	`{"voting":{"algorithm":"majority"},"objection_handling":{"critical_severity_vetoes":true,"critical_objection_action":"finalize_decline"},"commitment":{"require_vote_quorum":true}}`,
	`{"voting":{"algorithm":"weighted","weights":{"agent://a":1}},"objection_handling":{"critical_severity_vetoes":true,"critical_objection_action":"hold"}}`,
	`{"voting":{"algorithm":"plurality"},"commitment":{"allow_decline_over_approval":true}}`,
}

var genSenders = []string{alice, bob, carol, dave}

func (gen) Binding(r *modetest.Rand) *mode.Binding {
	n := 1 + r.Intn(len(genSenders))
	if n == 1 && r.Bool() {
		n = len(genSenders)
	}
	participants := append([]string(nil), genSenders[:n]...)
	// Either profile and every schema_version, so randomized runs also
	// cover the newest rules' determinism and replay equivalence.
	profile := r.Pick(coord.ProfileApril, coord.ProfileLatest)
	version := uint32(1 + r.Intn(3))
	rules := genPolicies[r.Intn(len(genPolicies))]
	if version >= 2 && r.Chance(1, 3) {
		rules = r.Pick(genPoliciesV2...)
	}
	b := modetest.BindingAt(nil, decision.ModeID, decision.ModeVersion, "policy.test.rules", rules, version, profile, initiator, participants)
	if r.Chance(1, 4) {
		b.Initiator = participants[0]
	}
	return b
}

func (gen) Next(r *modetest.Rand, b *mode.Binding, seq int) modetest.Input {
	var sender string
	switch k := r.Intn(10); {
	case k == 0:
		sender = outsider
	case k == 1:
		sender = b.Initiator
	default:
		sender = b.Participants[r.Intn(len(b.Participants))]
	}
	pid := r.Pick("p1", "p2", "p3", "p1", "")
	var in modetest.Input
	k := r.Intn(20)
	if seq < 2 {
		k %= 4 // open with proposals, so later messages have something to reference
	}
	switch {
	case k < 4:
		in = propIn(sender, pid, r.Pick("deploy", "rollback", "deploy", "", " "))
	case k < 7:
		in = evalIn(sender, pid, r.Pick("APPROVE", "REVIEW", "BLOCK", "REJECT", "APPROVE", "approve", ""),
			[]float64{0, 0.5, 0.7, 1, 1.5, -0.1, math.NaN(), 0.9}[r.Intn(8)])
	case k < 9:
		in = objIn(sender, pid, r.Pick("", "low", "medium", "high", "critical", "critical", "CRITICAL"))
	case k < 17:
		in = voteIn(sender, pid, r.Pick("APPROVE", "REJECT", "ABSTAIN", "APPROVE", "APPROVE", "approve"))
	case k < 18:
		// The core passes on only Commitments from a sender with
		// commitment authority.
		in = commitIn(b.Initiator, r.Chance(3, 4))
	default:
		in = rawIn(r.Pick(decision.TypeProposal, decision.TypeEvaluation, decision.TypeObjection, decision.TypeVote),
			sender, r.Bytes(12))
	}
	in.Msg.ID = fmt.Sprintf("m%d", seq)
	return in
}
