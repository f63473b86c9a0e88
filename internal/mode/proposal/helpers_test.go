package proposal_test

import (
	"fmt"
	"testing"

	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/proposal"
)

const (
	buyer    = "agent://buyer"
	seller   = "agent://seller"
	broker   = "agent://broker"
	carol    = "agent://carol"
	outsider = "agent://outsider"
	// coordinator is an initiator who is not a declared participant.
	coordinator = "agent://coordinator"
)

var msg = modetest.Messages()

var marshal = modetest.Marshal

// bindingFor returns a proposal binding with the given policy rules JSON
// ("" = policy.default), initiator and participants.
func bindingFor(t testing.TB, rules, initiator string, participants ...string) *mode.Binding {
	return modetest.Binding(t, proposal.ModeID, proposal.ModeVersion, "policy.test.rules", rules, initiator, participants)
}

// binding is the spec fixtures' shape: buyer initiates, buyer and seller
// negotiate.
func binding(t testing.TB, rules string) *mode.Binding {
	t.Helper()
	return bindingFor(t, rules, buyer, buyer, seller)
}

func propIn(sender, id string) modetest.Input {
	return modetest.Input{Msg: msg(proposal.TypeProposal, sender, marshal(&proposalv1.ProposalPayload{
		ProposalId: id, Title: "offer " + id, Summary: "terms of " + id, Details: []byte(`{"price":1}`), Tags: []string{"t1", "t2"},
	}))}
}

func counterIn(sender, id, supersedes string) modetest.Input {
	return modetest.Input{Msg: msg(proposal.TypeCounterProposal, sender, marshal(&proposalv1.CounterProposalPayload{
		ProposalId: id, SupersedesProposalId: supersedes, Title: "counter " + id, Summary: "instead of " + supersedes,
	}))}
}

func acceptIn(sender, id string) modetest.Input {
	return modetest.Input{Msg: msg(proposal.TypeAccept, sender, marshal(&proposalv1.AcceptPayload{ProposalId: id, Reason: "ok"}))}
}

func rejectIn(sender, id string, terminal bool) modetest.Input {
	return modetest.Input{Msg: msg(proposal.TypeReject, sender, marshal(&proposalv1.RejectPayload{ProposalId: id, Terminal: terminal, Reason: "no"}))}
}

func withdrawIn(sender, id string) modetest.Input {
	return modetest.Input{Msg: msg(proposal.TypeWithdraw, sender, marshal(&proposalv1.WithdrawPayload{ProposalId: id, Reason: "changed mind"}))}
}

func rawIn(typ, sender string, payload []byte) modetest.Input {
	return modetest.Input{Msg: msg(typ, sender, payload)}
}

func commitIn(sender string, positive bool) modetest.Input {
	return modetest.Commitment(msg(coord.TypeCommitment, sender, nil), proposal.ModeVersion, "proposal.accepted", "proposal.rejected", positive)
}

// Step constructors: ok expects acceptance, rej a code.
var ok, rej = modetest.Ok, modetest.Rej

// gen is the Proposal Mode generator for randomized runs and fuzzing: mostly
// well-formed messages over small id pools, biased so that convergence,
// terminal rejections, withdrawals and both kinds of Commitment are reached.
type gen struct{}

var genPolicies = []string{
	"",
	`{"acceptance":{"criterion":"all_parties"}}`,
	`{"acceptance":{"criterion":"counterparty"}}`,
	`{"acceptance":{"criterion":"initiator"}}`,
	`{"counter_proposal":{"max_rounds":1}}`,
	`{"counter_proposal":{"max_rounds":3},"rejection":{"terminal_on_any_reject":true}}`,
	`{"rejection":{"terminal_on_any_reject":true},"acceptance":{"criterion":"counterparty"}}`,
	`{"commitment":{"authority":"any_participant"},"counter_proposal":{"max_rounds":0}}`,
}

var genSenders = []string{buyer, seller, broker, carol}

func (gen) Binding(r *modetest.Rand) *mode.Binding {
	n := 1 + r.Intn(len(genSenders))
	participants := append([]string(nil), genSenders[:n]...)
	rules := genPolicies[r.Intn(len(genPolicies))]
	initiator := participants[0]
	// criterion initiator needs a declared initiator (Start refuses it).
	if r.Chance(1, 4) && rules != genPolicies[3] {
		initiator = coordinator
	}
	return bindingFor(nil, rules, initiator, participants...)
}

func (gen) Next(r *modetest.Rand, b *mode.Binding, seq int) modetest.Input {
	sender := outsider
	if !r.Chance(1, 12) {
		senders := append([]string{b.Initiator}, b.Participants...)
		sender = senders[r.Intn(len(senders))]
	}
	pid := r.Pick("p1", "p2", "p3", "p1", "p1", "")
	var in modetest.Input
	switch k := r.Intn(24); {
	case k < 3:
		in = propIn(sender, pid)
	case k < 6:
		in = counterIn(sender, r.Pick("c1", "c2", "p2", "p3", ""), r.Pick("p1", "p2", "c1", "", "zz"))
	case k < 14:
		in = acceptIn(sender, pid)
	case k < 17:
		in = rejectIn(sender, pid, r.Chance(1, 3))
	case k < 19:
		in = withdrawIn(sender, pid)
	case k < 21:
		// The core passes on only Commitments from a sender with
		// commitment authority.
		in = commitIn(b.Initiator, r.Chance(2, 3))
	default:
		in = rawIn(r.Pick(proposal.TypeProposal, proposal.TypeCounterProposal, proposal.TypeAccept, proposal.TypeReject, proposal.TypeWithdraw),
			sender, r.Bytes(12))
	}
	in.Msg.ID = fmt.Sprintf("m%d", seq)
	return in
}
