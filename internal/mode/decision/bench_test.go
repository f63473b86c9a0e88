package decision_test

import (
	"fmt"
	"testing"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
)

const benchVoters = 64

func benchSetup(b *testing.B, rules string, proposals int) (*mode.Binding, mode.State, []string) {
	b.Helper()
	voters := make([]string, benchVoters)
	for i := range voters {
		voters[i] = fmt.Sprintf("agent://voter-%02d", i)
	}
	bd := binding(b, rules, voters...)
	st, err := decision.New().Start(bd)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, proposals)
	for j := range ids {
		ids[j] = fmt.Sprintf("proposal-%d", j)
		in := propIn(initiator, ids[j], "option")
		if err := st.Step(bd, &in.Msg); err != nil {
			b.Fatal(err)
		}
	}
	return bd, st, ids
}

// BenchmarkStepVote: one accepted Vote (the hot path of a decision session).
func BenchmarkStepVote(b *testing.B) {
	for _, rules := range []string{"", `{"voting":{"algorithm":"weighted","weights":{"agent://voter-01":2}}}`} {
		name := "default"
		if rules != "" {
			name = "weighted"
		}
		b.Run(name, func(b *testing.B) {
			bd, st, ids := benchSetup(b, rules, b.N/benchVoters+1)
			msgs := make([]mode.Message, b.N)
			payloads := make([][]byte, len(ids))
			for j, id := range ids {
				payloads[j] = marshal(&decisionv1.VotePayload{ProposalId: id, Vote: "APPROVE", Reason: "looks good to me"})
			}
			for i := range msgs {
				msgs[i] = mode.Message{Type: decision.TypeVote, ID: "m", Sender: bd.Participants[i%benchVoters], Payload: payloads[i/benchVoters]}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range msgs {
				if err := st.Step(bd, &msgs[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStepProposal: one accepted Proposal.
func BenchmarkStepProposal(b *testing.B) {
	bd, st, _ := benchSetup(b, "", 0)
	msgs := make([]mode.Message, b.N)
	for i := range msgs {
		in := propIn(bd.Participants[i%benchVoters], fmt.Sprintf("p-%d", i), "deploy the thing")
		msgs[i] = in.Msg
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range msgs {
		if err := st.Step(bd, &msgs[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStepEvaluation: one accepted Evaluation.
func BenchmarkStepEvaluation(b *testing.B) {
	bd, st, _ := benchSetup(b, "", 1)
	in := evalIn(bd.Participants[3], "proposal-0", "APPROVE", 0.8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := st.Step(bd, &in.Msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStepForbidden: the cheapest rejection (authority before decoding).
func BenchmarkStepForbidden(b *testing.B) {
	bd, st, _ := benchSetup(b, "", 1)
	in := voteIn(outsider, "proposal-0", "APPROVE")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := st.Step(bd, &in.Msg); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkCommitPolicy: evaluating a supermajority+quorum+veto policy over
// 8 proposals with 64 votes each (a denied positive Commitment leaves the
// state unchanged, so it can repeat).
func BenchmarkCommitPolicy(b *testing.B) {
	rules := `{"voting":{"algorithm":"supermajority","threshold":0.9,"quorum":{"type":"percentage","value":0.5}},` +
		`"objection_handling":{"critical_severity_vetoes":true},"commitment":{"require_vote_quorum":true}}`
	bd, st, ids := benchSetup(b, rules, 8)
	for j, id := range ids {
		for i, v := range bd.Participants {
			val := "APPROVE"
			if (i+j)%3 == 0 {
				val = "REJECT"
			}
			in := voteIn(v, id, val)
			if err := st.Step(bd, &in.Msg); err != nil {
				b.Fatal(err)
			}
		}
	}
	c := commitIn(initiator, true)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := st.Commit(bd, &c.Msg, c.Commitment); err == nil {
			b.Fatal("accepted")
		}
	}
}
