package loadgen

import (
	"encoding/json"
	"fmt"
	"strings"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
)

// Mode identifiers the load generator knows a message pattern for.
const (
	ModeDecision   = "macp.mode.decision.v1"
	ModeProposal   = "macp.mode.proposal.v1"
	ModeMultiRound = "ext.multi_round.v1"
)

// modeAliases maps short names to mode identifiers.
var modeAliases = map[string]string{
	"decision":    ModeDecision,
	"proposal":    ModeProposal,
	"multi_round": ModeMultiRound,
	"multiround":  ModeMultiRound,
}

// defaultModeVersions are used when the runtime is not asked (echo
// transport) or does not list the mode.
var defaultModeVersions = map[string]string{
	ModeDecision:   "1.0.0",
	ModeProposal:   "1.0.0",
	ModeMultiRound: "1.0.0",
}

// ResolveMode turns a short name ("decision") or a mode id into the mode id
// and reports whether the load generator has a message pattern for it.
func ResolveMode(name string) (string, bool) {
	if name == "" {
		return ModeDecision, true
	}
	if id, ok := modeAliases[strings.ToLower(name)]; ok {
		return id, true
	}
	_, ok := defaultModeVersions[name]
	return name, ok
}

// Modes lists the modes the load generator can drive.
func Modes() []string { return []string{ModeDecision, ModeProposal, ModeMultiRound} }

// msg is one envelope to send: its sender (the dev bearer identity), type
// and encoded payload.
type msg struct {
	sender, typ string
	payload     []byte
}

// workload is a mode's message pattern. It must stay valid for any number
// of messages and any number of concurrent senders per session, given that
// each sender stream is sent sequentially.
type workload interface {
	// participants are the declared participants for n concurrent
	// senders.
	participants(n int) []string
	// prelude is sent first, sequentially, before the concurrent senders
	// start (counted among the session's messages).
	prelude(initiator string) []msg
	// next is the k-th message (from 0) of sender stream j.
	next(initiator string, j, k int) msg
	// canCommit reports whether a final Commitment is valid after any
	// number of next messages.
	canCommit() bool
}

func newWorkload(mode string, pad int) (workload, error) {
	p := strings.Repeat("x", pad)
	switch mode {
	case ModeDecision:
		return decisionLoad{pad: p}, nil
	case ModeProposal:
		return proposalLoad{pad: p}, nil
	case ModeMultiRound:
		return multiRoundLoad{pad: p}, nil
	}
	return nil, fmt.Errorf("loadgen: no message pattern for mode %q (known: %s)", mode, strings.Join(Modes(), ", "))
}

func participant(j int) string { return fmt.Sprintf("p%d", j+1) }

func participantsN(n int) []string {
	ps := make([]string, n)
	for j := range ps {
		ps[j] = participant(j)
	}
	return ps
}

func marshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err) // only fixed, valid messages are marshalled here
	}
	return b
}

// decisionLoad: the initiator proposes "prop-0" first; then each sender
// stream j sends, as participant p<j+1>, Evaluations of prop-0, and every
// fourth message a Proposal with a fresh proposal_id from the initiator.
// No one ever votes, so the session stays in the Evaluation phase, where
// Proposals, Evaluations (any number per participant) and a Commitment are
// always valid (internal/mode/decision: Proposals close and Evaluations
// close at the first Vote; each participant votes once per proposal).
type decisionLoad struct{ pad string }

func (decisionLoad) participants(n int) []string { return participantsN(n) }

func (d decisionLoad) prelude(initiator string) []msg {
	return []msg{{initiator, "Proposal", marshal(&decisionv1.ProposalPayload{ProposalId: "prop-0", Option: "option-0", Rationale: d.pad})}}
}

func (d decisionLoad) next(initiator string, j, k int) msg {
	if k%4 == 3 {
		id := fmt.Sprintf("prop-%d-%d", j, k)
		return msg{initiator, "Proposal", marshal(&decisionv1.ProposalPayload{ProposalId: id, Option: "option " + id, Rationale: d.pad})}
	}
	return msg{participant(j), "Evaluation", marshal(&decisionv1.EvaluationPayload{
		ProposalId: "prop-0", Recommendation: "REVIEW", Confidence: 0.5, Reason: d.pad,
	})}
}

func (decisionLoad) canCommit() bool { return true }

// proposalLoad: each sender stream j sends, as participant p<j+1>,
// Proposals with fresh proposal_ids (RFC-MACP-0008: any declared
// participant may propose; ids are unique within the session). Nobody
// accepts, so no Commitment is eligible.
type proposalLoad struct{ pad string }

func (proposalLoad) participants(n int) []string { return participantsN(n) }

func (proposalLoad) prelude(string) []msg { return nil }

func (p proposalLoad) next(_ string, j, k int) msg {
	id := fmt.Sprintf("prop-%d-%d", j, k)
	return msg{participant(j), "Proposal", marshal(&proposalv1.ProposalPayload{ProposalId: id, Title: id, Summary: p.pad})}
}

func (proposalLoad) canCommit() bool { return false }

// multiRoundLoad: each sender stream j contributes a new value every
// message, as participant p<j+1>. At least two participants are declared so
// that values never all agree (a converged session refuses contributions).
type multiRoundLoad struct{ pad string }

func (multiRoundLoad) participants(n int) []string { return participantsN(max(n, 2)) }

func (multiRoundLoad) prelude(string) []msg { return nil }

func (m multiRoundLoad) next(_ string, j, k int) msg {
	b, _ := json.Marshal(map[string]string{"value": fmt.Sprintf("v-%d-%d%s", j, k, m.pad)})
	return msg{participant(j), "Contribute", b}
}

func (multiRoundLoad) canCommit() bool { return false }

// commitment is the final Commitment of a committed session.
func commitment(modeVersion, configVersion, policyVersion string) []byte {
	return marshal(&macpv1.CommitmentPayload{
		CommitmentId: "commit-1", Action: "decision.selected", AuthorityScope: "load",
		Reason: "load generator", ModeVersion: modeVersion, ConfigurationVersion: configVersion,
		PolicyVersion: policyVersion, OutcomePositive: true,
	})
}
