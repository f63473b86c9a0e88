package quorum_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/quorum"
)

const (
	coordinator = "agent://coordinator"
	outsider    = "agent://outsider"
	alice       = "agent://alice"
	bob         = "agent://bob"
	carol       = "agent://carol"
	dave        = "agent://dave"
	erin        = "agent://erin"
)

const (
	invalidEnv = coord.CodeInvalidEnvelope
	forbidden  = coord.CodeForbidden
	denied     = coord.CodePolicyDenied
	badPolicy  = coord.CodeInvalidPolicyDefinition
)

var garbage = modetest.Garbage

var msg = modetest.Messages()

var marshal = modetest.Marshal

// binding returns a quorum binding with the given policy rules JSON ("" =
// policy.default) and participants (default alice, bob, carol); the
// coordinator initiates and is not listed.
func binding(t testing.TB, rules string, participants ...string) *mode.Binding {
	if participants == nil {
		participants = []string{alice, bob, carol}
	}
	return modetest.Binding(t, quorum.ModeID, quorum.ModeVersion, "policy.test.quorum", rules, coordinator, participants)
}

func requestIn(sender, id string, required uint32) modetest.Input {
	return modetest.Input{Msg: msg(quorum.TypeApprovalRequest, sender, marshal(&quorumv1.ApprovalRequestPayload{
		RequestId: id, Action: "deploy", Summary: "Deploy v2", Details: []byte("d"), RequiredApprovals: required,
	}))}
}

func ballotIn(typ, sender, id string) modetest.Input {
	var p proto.Message
	switch typ {
	case quorum.TypeApprove:
		p = &quorumv1.ApprovePayload{RequestId: id, Reason: "r-" + typ}
	case quorum.TypeReject:
		p = &quorumv1.RejectPayload{RequestId: id, Reason: "r-" + typ}
	default:
		p = &quorumv1.AbstainPayload{RequestId: id, Reason: "r-" + typ}
	}
	return modetest.Input{Msg: msg(typ, sender, marshal(p))}
}

func approveIn(sender, id string) modetest.Input { return ballotIn(quorum.TypeApprove, sender, id) }
func rejectIn(sender, id string) modetest.Input  { return ballotIn(quorum.TypeReject, sender, id) }
func abstainIn(sender, id string) modetest.Input { return ballotIn(quorum.TypeAbstain, sender, id) }

func rawIn(typ, sender string, payload []byte) modetest.Input {
	return modetest.Input{Msg: msg(typ, sender, payload)}
}

func commitIn(sender string, positive bool) modetest.Input {
	return modetest.Commitment(msg(coord.TypeCommitment, sender, nil), quorum.ModeVersion, "quorum.approved", "quorum.rejected", positive)
}

var ok, rej = modetest.Ok, modetest.Rej

// gen is the Quorum Mode generator for randomized runs and fuzzing: mostly
// well-formed ballots from the declared participants on the one request id,
// so thresholds, unreachability, policy overrides and both Commitment
// outcomes are reached, plus duplicates, outsiders and undecodable payloads.
type gen struct{}

var genPolicies = []string{
	"",
	`{"threshold":{"type":"n_of_m","value":2}}`,
	`{"threshold":{"type":"n_of_m","value":1},"abstention":{"counts_toward_quorum":true}}`,
	`{"threshold":{"type":"percentage","value":0.5},"abstention":{"interpretation":"ignored"}}`,
	`{"threshold":{"type":"percentage","value":1},"abstention":{"interpretation":"implicit_reject"}}`,
	`{"threshold":{"type":"weighted","value":1.5,"weights":{"agent://alice":1,"agent://bob":0.5,"agent://carol":0}}}`,
	`{"threshold":{"type":"n_of_m","value":0},"abstention":{"counts_toward_quorum":false,"interpretation":"neutral"}}`,
}

var genVoters = []string{alice, bob, carol, dave}

func (gen) Binding(r *modetest.Rand) *mode.Binding {
	n := 3 + r.Intn(2)
	participants := append([]string(nil), genVoters[:n]...)
	b := binding(nil, genPolicies[r.Intn(len(genPolicies))], participants...)
	if r.Chance(1, 4) {
		b.Initiator = alice
	}
	return b
}

func (gen) Next(r *modetest.Rand, b *mode.Binding, seq int) modetest.Input {
	sender := b.Participants[r.Intn(len(b.Participants))]
	switch k := r.Intn(16); {
	case k < 1:
		sender = outsider
	case k < 2:
		sender = b.Initiator
	}
	id := "r1"
	if r.Chance(1, 10) {
		id = r.Pick("r2", "")
	}
	var in modetest.Input
	switch k := r.Intn(24); {
	case k < 3:
		in = requestIn(b.Initiator, id, uint32(r.Intn(len(b.Participants)+2)))
		if r.Chance(1, 6) {
			in.Msg.Sender = sender
		}
	case k < 9:
		in = approveIn(sender, id)
	case k < 13:
		in = rejectIn(sender, id)
	case k < 17:
		in = abstainIn(sender, id)
	case k < 21:
		in = commitIn(b.Initiator, r.Chance(1, 2))
	default:
		in = rawIn(r.Pick(quorum.TypeApprovalRequest, quorum.TypeApprove, quorum.TypeReject, quorum.TypeAbstain), sender, r.Bytes(10))
	}
	in.Msg.ID = fmt.Sprintf("m%d", seq)
	return in
}
