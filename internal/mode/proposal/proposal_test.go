package proposal_test

import (
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/proposal"
)

const (
	invalidEnv = coord.CodeInvalidEnvelope
	forbidden  = coord.CodeForbidden
	denied     = coord.CodePolicyDenied
	badPolicy  = coord.CodeInvalidPolicyDefinition
)

// garbage is not decodable as any protobuf message (truncated varint).
var garbage = []byte{0xff, 0xff}

// badUTF8 is a payload whose field 1 (proposal_id in every proposal
// message) is not valid UTF-8, which proto3 string fields refuse.
var badUTF8 = []byte{0x0a, 0x02, 0xc3, 0x28}

// TestSuite runs the shared mode suite over the message-level scenarios.
func TestSuite(t *testing.T) {
	modetest.Run(t, proposal.New(), append(messageScenarios(t), policyScenarios(t)...)...)
}

func messageScenarios(t *testing.T) []modetest.Scenario {
	return []modetest.Scenario{
		{
			// RFC-MACP-0008 §5.6, §6; checklist CONF-22 (spec fixture
			// proposal_happy_path): the proposer must Accept too.
			Name:    "happy path",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), "RFC-MACP-0008 §4 Proposal"),
				ok(acceptIn(buyer, "p1"), "RFC-MACP-0008 §4 Accept"),
				rej(commitIn(buyer, true), invalidEnv, "RFC-MACP-0008 §5.6 the proposer has not accepted yet"),
				ok(acceptIn(seller, "p1"), "RFC-MACP-0008 §5.6 all declared participants accept"),
				ok(commitIn(buyer, true), "RFC-MACP-0008 §6 proposal.accepted"),
			},
			WantState: map[string]any{
				"phase":   "Committed",
				"accepts": map[string]any{buyer: "p1", seller: "p1"},
				"proposals": map[string]any{"p1": map[string]any{
					"proposal_id": "p1", "proposer": seller, "disposition": "Live", "kind": "Proposal",
					"title": "offer p1", "summary": "terms of p1", "tags": []any{"t1", "t2"}, "details_bytes": 11,
					"accepted_by": []any{buyer, seller}, "meets_criterion": true, "supersedes_proposal_id": "",
				}},
				"converged": []any{"p1"}, "outcome_positive": true, "acceptance_criterion": "all_parties",
			},
		},
		{
			// RFC-MACP-0008 §2.1: only declared participants; authority is
			// checked before decoding.
			Name:    "authority",
			Binding: bindingFor(t, "", coordinator, buyer, seller),
			Steps: []modetest.Step{
				rej(propIn(outsider, "p1"), forbidden, "RFC-MACP-0008 §2.1 outsider Proposal"),
				rej(rawIn(proposal.TypeProposal, outsider, garbage), forbidden, "authority before decoding"),
				rej(propIn(coordinator, "p1"), forbidden, "RFC-MACP-0008 §2.1 unlisted initiator has no negotiation authority"),
				ok(propIn(seller, "p1"), "RFC-MACP-0008 §2.1 participant Proposal"),
				rej(counterIn(outsider, "c1", "p1"), forbidden, "RFC-MACP-0008 §2.1 outsider CounterProposal"),
				rej(counterIn(coordinator, "c1", "p1"), forbidden, "unlisted initiator CounterProposal"),
				rej(rawIn(proposal.TypeCounterProposal, outsider, garbage), forbidden, "authority before decoding"),
				rej(acceptIn(outsider, "p1"), forbidden, "RFC-MACP-0008 §2.1 outsider Accept"),
				rej(acceptIn(coordinator, "p1"), forbidden, "unlisted initiator Accept"),
				rej(rawIn(proposal.TypeAccept, outsider, garbage), forbidden, "authority before decoding"),
				rej(rejectIn(outsider, "p1", true), forbidden, "RFC-MACP-0008 §2.1 outsider Reject"),
				rej(rejectIn(coordinator, "p1", true), forbidden, "unlisted initiator Reject"),
				rej(rawIn(proposal.TypeReject, outsider, garbage), forbidden, "authority before decoding"),
				rej(withdrawIn(outsider, "p1"), forbidden, "RFC-MACP-0008 §2.1 outsider Withdraw"),
				rej(rawIn(proposal.TypeWithdraw, outsider, garbage), forbidden, "authority before decoding"),
				rej(withdrawIn(buyer, "p1"), forbidden, "RFC-MACP-0008 §2.1 Withdraw only by the author"),
				ok(counterIn(buyer, "c1", "p1"), "RFC-MACP-0008 §2.1 participant CounterProposal"),
				rej(withdrawIn(seller, "c1"), forbidden, "RFC-MACP-0008 §2.1 only the CounterProposal's sender withdraws it"),
				ok(acceptIn(buyer, "p1"), "participant Accept"),
				ok(rejectIn(seller, "c1", false), "participant Reject"),
				ok(withdrawIn(buyer, "c1"), "author withdraws its CounterProposal"),
				ok(withdrawIn(seller, "p1"), "author withdraws its Proposal"),
			},
			WantState: map[string]any{
				"phase":   "Negotiating",
				"accepts": map[string]any{},
				"proposals": map[string]any{
					"p1": map[string]any{"proposer": seller, "disposition": "Withdrawn"},
					"c1": map[string]any{"proposer": buyer, "disposition": "Withdrawn", "kind": "CounterProposal", "supersedes_proposal_id": "p1"},
				},
			},
		},
		{
			// RFC-MACP-0008 §9: payloads are proposal.proto messages.
			Name:    "undecodable payloads",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(proposal.TypeProposal, seller, garbage), invalidEnv, "RFC-MACP-0008 §9 Proposal"),
				rej(rawIn(proposal.TypeProposal, seller, badUTF8), invalidEnv, "proto3 string must be UTF-8"),
				rej(rawIn(proposal.TypeProposal, seller, nil), invalidEnv, "empty payload has no proposal_id"),
				ok(propIn(seller, "p1"), ""),
				rej(rawIn(proposal.TypeCounterProposal, buyer, garbage), invalidEnv, "RFC-MACP-0008 §9 CounterProposal"),
				rej(rawIn(proposal.TypeCounterProposal, buyer, badUTF8), invalidEnv, "UTF-8"),
				rej(rawIn(proposal.TypeAccept, buyer, garbage), invalidEnv, "RFC-MACP-0008 §9 Accept"),
				rej(rawIn(proposal.TypeAccept, buyer, nil), invalidEnv, "empty payload references no proposal"),
				rej(rawIn(proposal.TypeReject, buyer, garbage), invalidEnv, "RFC-MACP-0008 §9 Reject"),
				rej(rawIn(proposal.TypeWithdraw, seller, garbage), invalidEnv, "RFC-MACP-0008 §9 Withdraw"),
				rej(rawIn(proposal.TypeWithdraw, seller, badUTF8), invalidEnv, "UTF-8"),
			},
			WantState: map[string]any{"phase": "Negotiating", "accepts": map[string]any{}, "rejections": []any{}, "proposal_order": []any{"p1"}},
		},
		{
			// RFC-MACP-0002 §1: types the mode does not define.
			Name:    "undefined message types",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(coord.TypeCommitment, buyer, nil), invalidEnv, "Commitment goes through Commit, never Step"),
				rej(rawIn(coord.TypeSessionStart, buyer, nil), invalidEnv, "SessionStart is the core's"),
				rej(rawIn("Vote", buyer, nil), invalidEnv, "another mode's type"),
				rej(rawIn("accept", buyer, nil), invalidEnv, "type names are case-sensitive"),
				rej(rawIn("Bogus", outsider, garbage), invalidEnv, "undefined type from an outsider"),
			},
		},
		{
			// RFC-MACP-0008 §5.1: every proposal_id unique within the session,
			// across Proposals and CounterProposals.
			Name:    "unique proposal ids",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(propIn(seller, ""), invalidEnv, "RFC-MACP-0008 §5.1 proposal_id required"),
				rej(propIn(seller, " \t"), invalidEnv, "blank proposal_id"),
				ok(propIn(seller, "p1"), ""),
				rej(propIn(seller, "p1"), invalidEnv, "RFC-MACP-0008 §5.1 duplicate, same sender"),
				rej(propIn(buyer, "p1"), invalidEnv, "RFC-MACP-0008 §5.1 duplicate, other sender"),
				rej(counterIn(buyer, "p1", "p1"), invalidEnv, "RFC-MACP-0008 §5.1 a counter mints a new id"),
				rej(counterIn(buyer, "", "p1"), invalidEnv, "counter proposal_id required"),
				ok(counterIn(buyer, "c1", "p1"), ""),
				rej(propIn(seller, "c1"), invalidEnv, "RFC-MACP-0008 §5.1 duplicate of a counter id"),
				rej(counterIn(seller, "c1", "p1"), invalidEnv, "RFC-MACP-0008 §5.1 duplicate counter id"),
				ok(withdrawIn(seller, "p1"), ""),
				rej(propIn(seller, "p1"), invalidEnv, "RFC-MACP-0008 §5.1 a withdrawn id stays taken"),
			},
			WantState: map[string]any{"proposal_order": []any{"p1", "c1"}, "counter_proposals": 1},
		},
		{
			// RFC-MACP-0008 §5.2, §5.2a; CONF-23 (spec fixture
			// proposal_reject_paths).
			Name:    "counter-proposals",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(counterIn(seller, "p2", ""), invalidEnv, "CONF-23 empty supersedes_proposal_id"),
				rej(counterIn(seller, "p2", "p1"), invalidEnv, "RFC-MACP-0008 §5.2 supersedes a proposal that does not exist"),
				ok(propIn(seller, "p1"), ""),
				rej(counterIn(buyer, "p2", " "), invalidEnv, "blank supersedes_proposal_id"),
				rej(counterIn(buyer, "p2", "P1"), invalidEnv, "ids are case-sensitive"),
				ok(counterIn(buyer, "p2", "p1"), "RFC-MACP-0008 §5.2"),
				ok(counterIn(seller, "p3", "p2"), "countering a counter"),
				ok(counterIn(seller, "p4", "p1"), "RFC-MACP-0008 §5.2a the original stays live and counterable"),
				ok(acceptIn(buyer, "p1"), "RFC-MACP-0008 §5.2a the original can still be accepted"),
				ok(acceptIn(seller, "p1"), ""),
				ok(withdrawIn(buyer, "p2"), ""),
				ok(counterIn(seller, "p5", "p2"), "a withdrawn proposal still exists and may be countered"),
			},
			WantState: map[string]any{
				"phase": "Converged",
				"proposals": map[string]any{
					"p1": map[string]any{"disposition": "Live", "kind": "Proposal", "meets_criterion": true},
					"p2": map[string]any{"disposition": "Withdrawn", "kind": "CounterProposal", "supersedes_proposal_id": "p1", "proposer": buyer},
					"p3": map[string]any{"disposition": "Live", "supersedes_proposal_id": "p2", "tags": []any{}, "details_bytes": 0},
					"p5": map[string]any{"disposition": "Live", "supersedes_proposal_id": "p2"},
				},
				"converged": []any{"p1"}, "counter_proposals": 4,
			},
		},
		{
			// RFC-MACP-0008 §5.3: Accept, Reject and Withdraw reference an
			// existing proposal.
			Name:    "references",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(acceptIn(buyer, "p1"), invalidEnv, "RFC-MACP-0008 §5.3 Accept before any proposal"),
				rej(rejectIn(buyer, "p1", true), invalidEnv, "RFC-MACP-0008 §5.3 Reject before any proposal"),
				rej(withdrawIn(seller, "p1"), invalidEnv, "RFC-MACP-0008 §5.3 Withdraw before any proposal"),
				ok(propIn(seller, "p1"), ""),
				rej(acceptIn(buyer, "p9"), invalidEnv, "RFC-MACP-0008 §5.3 unknown proposal"),
				rej(acceptIn(buyer, ""), invalidEnv, "RFC-MACP-0008 §5.3 empty reference"),
				rej(rejectIn(buyer, "p9", false), invalidEnv, "RFC-MACP-0008 §5.3 unknown proposal"),
				rej(withdrawIn(seller, "p9"), invalidEnv, "RFC-MACP-0008 §5.3 unknown proposal"),
				rej(withdrawIn(buyer, "p9"), invalidEnv, "unknown proposal: INVALID_ENVELOPE before the author check"),
			},
			WantState: map[string]any{"phase": "Negotiating", "rejections": []any{}, "accepts": map[string]any{}},
		},
		{
			// RFC-MACP-0008 §5.4, §8: a withdrawn proposal is never accepted
			// or committed.
			Name:    "withdrawn proposals",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(acceptIn(buyer, "p1"), ""),
				ok(acceptIn(seller, "p1"), ""),
				ok(withdrawIn(seller, "p1"), "RFC-MACP-0008 §4 Withdraw after convergence"),
				rej(acceptIn(buyer, "p1"), invalidEnv, "RFC-MACP-0008 §5.4 accept a withdrawn proposal"),
				rej(commitIn(buyer, true), invalidEnv, "RFC-MACP-0008 §5.4 commit a withdrawn proposal"),
				rej(withdrawIn(seller, "p1"), invalidEnv, "already withdrawn"),
				ok(rejectIn(buyer, "p1", false), "RFC-MACP-0008 §5.3 a withdrawn proposal still exists for Reject"),
			},
			WantState: map[string]any{
				"phase":     "Negotiating",
				"accepts":   map[string]any{},
				"proposals": map[string]any{"p1": map[string]any{"disposition": "Withdrawn", "accepted_by": []any{}, "meets_criterion": false}},
				"converged": []any{},
			},
		},
		{
			// RFC-MACP-0008 §5.5: the latest Accept from a participant
			// supersedes its earlier accepts.
			Name:    "latest accept wins",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(counterIn(buyer, "p2", "p1"), ""),
				ok(acceptIn(buyer, "p1"), ""),
				ok(acceptIn(seller, "p2"), ""),
				rej(commitIn(buyer, true), invalidEnv, "RFC-MACP-0008 §5.6 accepts on different proposals"),
				ok(acceptIn(buyer, "p2"), "RFC-MACP-0008 §5.5 buyer moves to p2"),
				ok(acceptIn(buyer, "p2"), "re-accepting the same proposal is harmless"),
				ok(acceptIn(seller, "p1"), "RFC-MACP-0008 §5.5 seller moves to p1: no convergence"),
				rej(commitIn(buyer, true), invalidEnv, "RFC-MACP-0008 §5.6 not converged"),
				ok(acceptIn(seller, "p2"), "seller back to p2"),
			},
			WantState: map[string]any{
				"phase":   "Converged",
				"accepts": map[string]any{buyer: "p2", seller: "p2"},
				"proposals": map[string]any{
					"p1": map[string]any{"accepted_by": []any{}, "meets_criterion": false},
					"p2": map[string]any{"accepted_by": []any{buyer, seller}, "meets_criterion": true},
				},
				"converged": []any{"p2"},
			},
		},
		{
			// RFC-MACP-0008 §5.6, §6: eligibility; CONF-23 Commitment before
			// any proposal.
			Name:    "commitment eligibility",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(commitIn(buyer, true), invalidEnv, "CONF-23 positive Commitment with no proposals"),
				rej(commitIn(buyer, false), invalidEnv, "negative Commitment with no terminal Reject"),
				ok(propIn(seller, "p1"), ""),
				ok(rejectIn(buyer, "p1", false), "RFC-MACP-0008 §4 non-terminal Reject"),
				rej(commitIn(buyer, false), invalidEnv, "RFC-MACP-0008 §5.6 a non-terminal Reject makes nothing eligible"),
				ok(rejectIn(buyer, "p1", true), "RFC-MACP-0008 §5.6 terminal Reject"),
				rej(commitIn(buyer, true), invalidEnv, "a terminal Reject does not allow a positive outcome"),
				ok(commitIn(buyer, false), "RFC-MACP-0008 §6 proposal.rejected after a terminal reject"),
			},
			WantState: map[string]any{
				"phase":             "Committed",
				"terminal_rejected": true,
				"outcome_positive":  false,
				"rejections": []any{
					map[string]any{"proposal_id": "p1", "sender": buyer, "terminal": false, "reason": "no"},
					map[string]any{"proposal_id": "p1", "sender": buyer, "terminal": true},
				},
			},
		},
		{
			// RFC-MACP-0008 §5.6: "The Commitment authority MAY choose not to
			// bind a terminal rejection and MAY await further proposals".
			Name:    "negotiation continues after a terminal reject",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(rejectIn(buyer, "p1", true), ""),
				ok(counterIn(seller, "p2", "p1"), "RFC-MACP-0008 §5.6 further proposals"),
				ok(acceptIn(seller, "p2"), ""),
				ok(acceptIn(buyer, "p2"), ""),
				ok(commitIn(buyer, true), "positive outcome after a terminal reject and convergence"),
			},
			WantState: map[string]any{"phase": "Committed", "terminal_rejected": true, "outcome_positive": true, "converged": []any{"p2"}},
		},
		{
			// Withdrawal keeps an accepted terminal rejection (Decision).
			Name:    "terminal rejection survives withdrawal",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(rejectIn(buyer, "p1", true), ""),
				ok(withdrawIn(seller, "p1"), ""),
				ok(commitIn(buyer, false), "the terminal rejection is history"),
			},
			WantState: map[string]any{"phase": "Committed", "proposals": map[string]any{"p1": map[string]any{"disposition": "Withdrawn"}}},
		},
		{
			// Rejecting the proposal one accepts withdraws that acceptance
			// (Decision, RFC-MACP-0008 §5.5 latest word wins).
			Name:    "reject clears own accept",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(counterIn(buyer, "p2", "p1"), ""),
				ok(acceptIn(seller, "p1"), ""),
				ok(acceptIn(buyer, "p1"), ""),
				ok(rejectIn(buyer, "p1", false), "buyer changes its mind"),
				rej(commitIn(buyer, true), invalidEnv, "no longer converged"),
				ok(acceptIn(buyer, "p2"), ""),
				ok(rejectIn(buyer, "p1", false), "rejecting another proposal keeps the accept"),
			},
			WantState: map[string]any{"phase": "Negotiating", "accepts": map[string]any{seller: "p1", buyer: "p2"}},
		},
		{
			// RFC-MACP-0008 §5.6 "In the base case ... all declared
			// participants": three parties.
			Name:    "all declared participants",
			Binding: bindingFor(t, "", buyer, buyer, seller, broker),
			Steps: []modetest.Step{
				ok(propIn(broker, "p1"), ""),
				ok(acceptIn(buyer, "p1"), ""),
				ok(acceptIn(seller, "p1"), ""),
				rej(commitIn(buyer, true), invalidEnv, "broker, the proposer, has not accepted"),
				ok(acceptIn(broker, "p1"), ""),
				ok(commitIn(buyer, true), ""),
			},
			WantState: map[string]any{"phase": "Committed"},
		},
		{
			// Duplicated participants count once.
			Name:    "duplicate participants",
			Binding: bindingFor(t, "", buyer, buyer, seller, buyer),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(acceptIn(buyer, "p1"), ""),
				ok(acceptIn(seller, "p1"), ""),
				ok(commitIn(buyer, true), ""),
			},
		},
		{
			// RFC-MACP-0008 §3: participants are required.
			Name:     "no participants",
			Binding:  bindingFor(t, "", buyer),
			StartErr: invalidEnv,
		},
	}
}

// policyScenarios cover RFC-MACP-0012 §4.3 (checklist POL-53).
func policyScenarios(t *testing.T) []modetest.Scenario {
	three := []string{buyer, seller, broker}
	return []modetest.Scenario{
		{
			Name:    "criterion all_parties explicit",
			Binding: bindingFor(t, `{"acceptance":{"criterion":"all_parties"}}`, buyer, three...),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(acceptIn(buyer, "p1"), ""),
				ok(acceptIn(broker, "p1"), ""),
				rej(commitIn(buyer, true), invalidEnv, "all_parties includes the proposer"),
				ok(acceptIn(seller, "p1"), ""),
			},
			WantState: map[string]any{"phase": "Converged", "acceptance_criterion": "all_parties"},
		},
		{
			// counterparty: every declared participant except the proposer.
			Name:    "criterion counterparty",
			Binding: bindingFor(t, `{"acceptance":{"criterion":"counterparty"}}`, buyer, three...),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(acceptIn(buyer, "p1"), ""),
				ok(acceptIn(seller, "p1"), "the proposer's accept does not count"),
				rej(commitIn(buyer, true), invalidEnv, "broker has not accepted"),
				ok(counterIn(broker, "p2", "p1"), ""),
				ok(acceptIn(buyer, "p2"), ""),
				ok(acceptIn(seller, "p2"), "seller moves to p2: p2 has both counterparties"),
				ok(commitIn(buyer, true), "p2 meets counterparty without broker's own accept"),
			},
			WantState: map[string]any{
				"phase":                "Committed",
				"converged":            []any{"p2"},
				"acceptance_criterion": "counterparty",
				"accepts":              map[string]any{buyer: "p2", seller: "p2"},
			},
		},
		{
			// counterparty with two simultaneously converged proposals.
			Name:    "criterion counterparty crossed accepts",
			Binding: bindingFor(t, `{"acceptance":{"criterion":"counterparty"}}`, buyer, buyer, seller),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(propIn(buyer, "p2"), ""),
				ok(acceptIn(buyer, "p1"), ""),
				ok(acceptIn(seller, "p2"), ""),
				ok(withdrawIn(seller, "p1"), "p2 still converged"),
			},
			WantState: map[string]any{"phase": "Converged", "converged": []any{"p2"}},
		},
		{
			// counterparty when the proposer is the only participant: its
			// own Accept is required (at least one Accept, Decision).
			Name:    "criterion counterparty single party",
			Binding: bindingFor(t, `{"acceptance":{"criterion":"counterparty"}}`, buyer, buyer),
			Steps: []modetest.Step{
				ok(propIn(buyer, "p1"), ""),
				rej(commitIn(buyer, true), invalidEnv, "no Accept at all"),
				ok(acceptIn(buyer, "p1"), ""),
				ok(commitIn(buyer, true), ""),
			},
		},
		{
			Name:    "criterion initiator",
			Binding: bindingFor(t, `{"acceptance":{"criterion":"initiator"}}`, buyer, three...),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(acceptIn(seller, "p1"), ""),
				ok(acceptIn(broker, "p1"), ""),
				rej(commitIn(buyer, true), invalidEnv, "the initiator has not accepted"),
				ok(acceptIn(buyer, "p1"), ""),
				ok(counterIn(broker, "p2", "p1"), ""),
				ok(acceptIn(broker, "p2"), "others' accepts are irrelevant"),
				ok(commitIn(buyer, true), "the initiator's accept suffices"),
			},
			WantState: map[string]any{"phase": "Committed", "converged": []any{"p1"}, "acceptance_criterion": "initiator"},
		},
		{
			Name:     "criterion initiator with an undeclared initiator",
			Binding:  bindingFor(t, `{"acceptance":{"criterion":"initiator"}}`, coordinator, three...),
			StartErr: badPolicy,
		},
		{
			// counter_proposal.max_rounds: CounterProposals beyond the limit
			// are POLICY_DENIED when they arrive (Decision).
			Name:    "max_rounds",
			Binding: bindingFor(t, `{"counter_proposal":{"max_rounds":2}}`, buyer, buyer, seller),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(counterIn(buyer, "c1", "p1"), "round 1"),
				ok(counterIn(seller, "c2", "c1"), "round 2"),
				rej(counterIn(buyer, "c3", "c2"), denied, "POL-53 round 3 exceeds max_rounds 2"),
				rej(rawIn(proposal.TypeCounterProposal, buyer, garbage), invalidEnv, "decoding before policy"),
				rej(counterIn(buyer, "c1", "c2"), invalidEnv, "a duplicate id is INVALID_ENVELOPE before policy"),
				ok(propIn(buyer, "p2"), "plain Proposals are not rounds"),
				ok(acceptIn(buyer, "c2"), ""),
				ok(acceptIn(seller, "c2"), ""),
				ok(commitIn(buyer, true), "the limit never blocks the Commitment"),
			},
			WantState: map[string]any{"phase": "Committed", "counter_proposals": 2},
		},
		{
			Name:    "max_rounds zero is unlimited",
			Binding: bindingFor(t, `{"counter_proposal":{"max_rounds":0}}`, buyer, buyer, seller),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(counterIn(buyer, "c1", "p1"), ""),
				ok(counterIn(seller, "c2", "c1"), ""),
				ok(counterIn(buyer, "c3", "c2"), ""),
				ok(counterIn(seller, "c4", "c3"), ""),
			},
			WantState: map[string]any{"counter_proposals": 4},
		},
		{
			// rejection.terminal_on_any_reject: every Reject is terminal.
			Name:    "terminal_on_any_reject",
			Binding: bindingFor(t, `{"rejection":{"terminal_on_any_reject":true}}`, buyer, buyer, seller),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				rej(commitIn(buyer, false), invalidEnv, ""),
				ok(rejectIn(buyer, "p1", false), "POL-53 a plain Reject is terminal"),
				ok(commitIn(buyer, false), "proposal.rejected"),
			},
			WantState: map[string]any{
				"phase":      "Committed",
				"rejections": []any{map[string]any{"proposal_id": "p1", "terminal": true}},
			},
		},
		{
			Name:    "terminal_on_any_reject false",
			Binding: bindingFor(t, `{"rejection":{"terminal_on_any_reject":false}}`, buyer, buyer, seller),
			Steps: []modetest.Step{
				ok(propIn(seller, "p1"), ""),
				ok(rejectIn(buyer, "p1", false), ""),
				rej(commitIn(buyer, false), invalidEnv, "a plain Reject stays non-terminal"),
			},
			WantState: map[string]any{"phase": "Negotiating", "terminal_rejected": false},
		},
		{
			// The commitment section is the core's; the mode accepts it.
			Name:    "commitment section",
			Binding: bindingFor(t, `{"commitment":{"authority":"any_participant"}}`, buyer, buyer, seller),
			Steps:   []modetest.Step{ok(propIn(seller, "p1"), "")},
		},
	}
}

// TestPolicyDefinitions: rules that fail proposal-rules.schema.json are
// refused at Start with INVALID_POLICY_DEFINITION (RFC-MACP-0012 §4.3, §10).
func TestPolicyDefinitions(t *testing.T) {
	for _, rules := range []string{
		`{"acceptance":{"criterion":"everyone"}}`,
		`{"acceptance":{"criterion":"ALL_PARTIES"}}`,
		`{"acceptance":{"criterion":1}}`,
		`{"acceptance":"all_parties"}`,
		`{"acceptance":[]}`,
		`{"counter_proposal":{"max_rounds":-1}}`,
		`{"counter_proposal":{"max_rounds":1.5}}`,
		`{"counter_proposal":{"max_rounds":"3"}}`,
		`{"counter_proposal":{"max_rounds":1e12}}`,
		`{"counter_proposal":5}`,
		`{"rejection":{"terminal_on_any_reject":"yes"}}`,
		`{"rejection":true}`,
	} {
		b := binding(t, rules)
		if _, err := proposal.New().Start(b); coord.CodeOf(err) != badPolicy {
			t.Errorf("%s: Start = %v, want INVALID_POLICY_DEFINITION", rules, err)
		}
	}
	for _, rules := range []string{
		`{}`,
		`{"acceptance":null,"counter_proposal":null,"rejection":null}`,
		`{"acceptance":{},"counter_proposal":{},"rejection":{}}`,
		`{"acceptance":{"criterion":"counterparty"},"counter_proposal":{"max_rounds":3},"rejection":{"terminal_on_any_reject":true}}`,
		`{"counter_proposal":{"max_rounds":2.0}}`,
		`{"voting":{"algorithm":"majority"}}`, // other modes' sections are ignored
		`{"acceptance":{"criterion":"initiator","extra":1}}`,
	} {
		if _, err := proposal.New().Start(binding(t, rules)); err != nil {
			t.Errorf("%s: Start = %v, want ok", rules, err)
		}
	}
	// A nil policy is policy.default.
	b := binding(t, "")
	b.Policy = nil
	if _, err := proposal.New().Start(b); err != nil {
		t.Errorf("nil policy: %v", err)
	}
}

// TestMaxRoundsReason: the POLICY_DENIED error carries its reason.
func TestMaxRoundsReason(t *testing.T) {
	b := bindingFor(t, `{"counter_proposal":{"max_rounds":1}}`, buyer, buyer, seller)
	st, err := proposal.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []modetest.Input{propIn(seller, "p1"), counterIn(buyer, "c1", "p1")} {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	in := counterIn(seller, "c2", "c1")
	ce := coord.AsError(st.Step(b, &in.Msg))
	if ce == nil || ce.Code != denied || len(ce.Reasons) != 1 || !strings.Contains(ce.Reasons[0], "max_rounds") {
		t.Errorf("got %#v", ce)
	}
}

// TestRejectedLeavesProjectUnchanged: "On error nothing changed" (mode.State
// contract), with reflect.DeepEqual on every reject path from a state that
// has content.
func TestRejectedLeavesProjectUnchanged(t *testing.T) {
	b := bindingFor(t, `{"counter_proposal":{"max_rounds":1}}`, buyer, buyer, seller, broker)
	st, err := proposal.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []modetest.Input{
		propIn(seller, "p1"), counterIn(buyer, "c1", "p1"), propIn(broker, "p2"),
		acceptIn(buyer, "p1"), acceptIn(seller, "c1"), rejectIn(broker, "p1", false), withdrawIn(broker, "p2"),
	} {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	modetest.RejectUnchanged(t, st, b,
		propIn(outsider, "p3"), propIn(seller, "p1"), propIn(seller, ""), rawIn(proposal.TypeProposal, seller, garbage),
		counterIn(outsider, "c2", "p1"), counterIn(buyer, "c2", ""), counterIn(buyer, "c2", "zz"), counterIn(buyer, "c2", "p1"),
		acceptIn(outsider, "p1"), acceptIn(buyer, "zz"), acceptIn(buyer, "p2"),
		rejectIn(outsider, "p1", true), rejectIn(buyer, "zz", true),
		withdrawIn(outsider, "p1"), withdrawIn(buyer, "p1"), withdrawIn(broker, "p2"), withdrawIn(buyer, "zz"),
		rawIn("Bogus", buyer, nil), commitIn(buyer, true), commitIn(buyer, false),
	)
}

// TestAfterCommit: a committed state refuses everything with
// SESSION_NOT_OPEN (the core normally stops first).
func TestAfterCommit(t *testing.T) {
	modetest.CheckAfterCommit(t, proposal.New(), binding(t, ""),
		[]modetest.Input{propIn(seller, "p1"), rejectIn(buyer, "p1", true)}, commitIn(buyer, false),
		acceptIn(buyer, "p1"))
}

// TestDescriptor pins the discovery descriptor (RFC-MACP-0008 §2, §4, §7;
// RFC-MACP-0002 §4, §10; checklist MODE-6, PROP-1, PROP-2).
func TestDescriptor(t *testing.T) {
	modetest.CheckDescriptorIs(t, proposal.New, modetest.WantDescriptor{
		Mode: "macp.mode.proposal.v1", Version: "1.0.0",
		Determinism: "semantic-deterministic", ParticipantModel: "peer",
		MessageTypes: []string{"SessionStart", "Proposal", "CounterProposal", "Accept", "Reject", "Withdraw", "Commitment"},
		Standard:     true,
	})
}

// TestRandomRuns drives the generator through the suite invariants with
// fixed seeds, and checks it reaches the valid paths.
func TestRandomRuns(t *testing.T) {
	modetest.RandomRunsReach(t, proposal.New(), gen{}, 11, 400, 50, 200,
		func(n int) int { return n / 20 }, func(n int) int { return n })
}

// FuzzProposal feeds fuzzer-chosen message sequences through the shared
// suite's invariants (no panic, rejections inert, determinism, replay).
func FuzzProposal(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 8, 0, 0, 8, 1, 0, 19, 0})
	f.Add([]byte("\x03\x02\x00\x01\x00\x00\x00\x00\x0c\x02\x00\x00\x00\x10\x00\x03"))
	f.Add([]byte("proposal fuzz seed with a longer body to produce more messages................"))
	f.Fuzz(func(t *testing.T, data []byte) {
		modetest.FuzzSteps(t, proposal.New(), gen{}, data)
	})
}
