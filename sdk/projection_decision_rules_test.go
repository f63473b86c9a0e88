package sdk_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/mode/builtin"
	decisionmode "github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/sdk"
)

// onePolicy is a policy lookup holding policy.default and one more.
type onePolicy struct{ d policy.Descriptor }

func (o onePolicy) Policy(id string) (policy.Descriptor, bool) {
	if id == o.d.ID {
		return o.d, true
	}
	return policy.DefaultOnly{}.Policy(id)
}

// randomDecisionPolicy draws a valid Decision policy of schema_version v.
func randomDecisionPolicy(g *gen, v uint32) string {
	rules := map[string]any{}
	voting := map[string]any{}
	alg := g.pick("", "none", "majority", "majority", "supermajority", "unanimous", "weighted", "weighted", "plurality", "plurality")
	if alg != "" {
		voting["algorithm"] = alg
	}
	switch {
	case alg == "supermajority" && g.chance(50):
		voting["threshold"] = []float64{0.6, 0.75, 1}[g.r.IntN(3)]
	case alg != "supermajority" && g.chance(40):
		voting["threshold"] = []float64{0, 0.5, 0.6, 1}[g.r.IntN(4)]
	}
	if alg == "weighted" || g.chance(10) {
		w := map[string]any{}
		for _, id := range []string{"coord", "a", "b", "c"} {
			if g.chance(70) {
				w[id] = []float64{0, 0.5, 1, 2}[g.r.IntN(4)]
			}
		}
		voting["weights"] = w
	}
	if g.chance(40) {
		if g.chance(50) {
			voting["quorum"] = map[string]any{"type": "count", "value": float64(g.r.IntN(4))}
		} else {
			voting["quorum"] = map[string]any{"type": "percentage", "value": []float64{0, 0.5, 0.75, 1}[g.r.IntN(4)]}
		}
	}
	if len(voting) > 0 {
		rules["voting"] = voting
	}
	obj := map[string]any{}
	if g.chance(50) {
		obj["critical_severity_vetoes"] = g.chance(70)
	}
	if g.chance(30) {
		obj["veto_threshold"] = float64(1 + g.r.IntN(2))
	}
	if v >= 2 && g.chance(60) {
		obj["critical_objection_action"] = g.pick("deny", "finalize_decline", "hold")
	}
	if len(obj) > 0 {
		rules["objection_handling"] = obj
	}
	if g.chance(15) {
		rules["evaluation"] = map[string]any{"required_before_voting": true, "minimum_confidence": []float64{0, 0.5}[g.r.IntN(2)]}
	}
	com := map[string]any{}
	if g.chance(40) {
		com["require_vote_quorum"] = g.chance(60)
	}
	if v >= 2 && g.chance(50) {
		com["allow_decline_over_approval"] = g.chance(60)
	}
	if len(com) > 0 {
		rules["commitment"] = com
	}
	b, _ := json.Marshal(rules)
	return string(b)
}

// The newest Decision rules: on random policies (schema_version 1-3, every
// algorithm, quorums, weights, vetoes and their actions, the decline
// knobs) and random histories, DecisionProjection.EligibleUnder predicts
// every well-formed Commitment's verdict exactly as the runtime's mode
// decides it, under profile 2026-09 and, for schema_version 2 and 3
// policies, under 2026-04; a 2026-04 session with a version 1 policy is
// refused with ErrAprilDecisionRules.
func TestDecisionRulesAgreeWithRuntime(t *testing.T) {
	n := *propHistories
	if n <= 0 {
		n = 10000
		switch {
		case testing.Short():
			n = 500
		case raceEnabled:
			n = 1000
		}
	}
	mc := modeCases()[0]
	r := rand.New(rand.NewPCG(31, 7))
	var predictions, acceptedPos, acceptedNeg, refused, april int
	for h := 0; h < n; {
		g := &gen{r: r, mode: mc.mode}
		v := uint32(1 + r.IntN(3))
		profile := sdk.ProfileLatest
		if g.chance(30) {
			profile = sdk.ProfileApril
		}
		d := policy.Descriptor{ID: "policy.rand." + strconv.Itoa(h), Mode: sdk.DecisionMode, Rules: randomDecisionPolicy(g, v), SchemaVersion: v}
		if pol, err := policy.Parse(d); err != nil {
			t.Fatalf("generated an invalid policy %s: %v", d.Rules, err)
		} else if err := decisionmode.ValidateRules(pol); err != nil {
			t.Fatalf("generated invalid decision rules %s: %v", d.Rules, err)
		}
		lim := session.DefaultLimits()
		lim.Profile = profile
		deps := session.Deps{Modes: builtin.Modes(), Policies: onePolicy{d}, Limits: lim}
		parts := []string{}
		for _, p := range []string{"coord", "a", "b", "c"} {
			if g.chance(75) {
				parts = append(parts, p)
			}
		}
		g.start = &macpv1.SessionStartPayload{Intent: "i", Participants: parts, ModeVersion: mc.version, ConfigurationVersion: "v1", TtlMs: 60_000, PolicyVersion: d.ID}
		s, rec, err := session.Start(g.env("coord", sdk.TypeSessionStart, mustMarshal(g.start)), propT0, deps)
		if err != nil {
			continue
		}
		h++
		rules, err := sdk.ParseDecisionRules(d.Rules, d.SchemaVersion)
		if err != nil {
			t.Fatal(err)
		}
		p := sdk.NewDecisionProjection()
		p.Profile = profile
		if err := p.Apply(rec.Envelope); err != nil {
			t.Fatal(err)
		}
		var trace []traceStep
		for i := range 1 + r.IntN(30) {
			var env *macpv1.Envelope
			predict, positive := false, false
			if g.chance(15) {
				var wf bool
				env, positive, wf = g.commitment()
				predict = wf && !s.Seen(env.MessageId)
			} else {
				env = mc.message(g)
			}
			var wantPos, wantNeg bool
			if predict {
				var perr error
				wantPos, wantNeg, perr = p.EligibleUnder(rules)
				if profile == sdk.ProfileApril && v == 1 {
					if !errors.Is(perr, sdk.ErrAprilDecisionRules) {
						t.Fatalf("history %d: an April session with a version 1 policy: %v", h, perr)
					}
					april++
					predict = false
				} else if perr != nil {
					t.Fatal(perr)
				}
			}
			out := s.Step(env, propT0+int64(i), session.DefaultLimits())
			trace = append(trace, traceStep{env, out.Err})
			if predict {
				predictions++
				want := wantNeg
				if positive {
					want = wantPos
				}
				if want != out.Accepted() {
					t.Fatalf("history %d (%s, schema_version %d, policy %s): EligibleUnder predicts a %v Commitment accepted=%v, runtime: %v\nparticipants %v\n%s\nrules %+v",
						h, profile, v, d.Rules, positive, want, out.Err, parts, joinLines(trace), *rules)
				}
				switch {
				case !out.Accepted():
					refused++
				case positive:
					acceptedPos++
				default:
					acceptedNeg++
				}
			}
			if out.Accepted() {
				if err := p.Apply(out.Records[0].Envelope); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Logf("%d histories: %d predictions (%d positive and %d negative accepted, %d refused), %d April sessions skipped",
		n, predictions, acceptedPos, acceptedNeg, refused, april)
	if acceptedPos < n/50 || acceptedNeg < n/100 || refused < n/10 || april == 0 {
		t.Fatal("generator coverage too low")
	}
}
