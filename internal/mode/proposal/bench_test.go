package proposal_test

import (
	"fmt"
	"testing"

	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/proposal"
)

// BenchmarkStepAccept: one accepted Accept that moves a participant's
// acceptance between two proposals (the hot path of a negotiation), with 64
// declared participants.
func BenchmarkStepAccept(b *testing.B) {
	for _, rules := range []string{"", `{"acceptance":{"criterion":"counterparty"}}`} {
		name := "all_parties"
		if rules != "" {
			name = "counterparty"
		}
		b.Run(name, func(b *testing.B) {
			parties := make([]string, 64)
			for i := range parties {
				parties[i] = fmt.Sprintf("agent://party-%02d", i)
			}
			bd := bindingFor(b, rules, parties[0], parties...)
			st, err := proposal.New().Start(bd)
			if err != nil {
				b.Fatal(err)
			}
			for _, id := range []string{"p1", "p2"} {
				p := propIn(parties[1], id)
				if err := st.Step(bd, &p.Msg); err != nil {
					b.Fatal(err)
				}
			}
			accepts := [2]mode.Message{acceptIn(parties[5], "p1").Msg, acceptIn(parties[5], "p2").Msg}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := st.Step(bd, &accepts[i&1]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
