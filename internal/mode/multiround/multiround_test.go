package multiround_test

import (
	"fmt"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/multiround"
)

// TestSuite runs the shared mode suite over the message-level scenarios.
func TestSuite(t *testing.T) {
	modetest.Run(t, multiround.New(), messageScenarios()...)
}

func messageScenarios() []modetest.Scenario {
	var badSteps []modetest.Step
	for _, p := range badPayloads {
		badSteps = append(badSteps, rej(rawIn(multiround.TypeContribute, alice, p), invalidEnv, fmt.Sprintf("MR-3 payload %q", p)))
	}
	badSteps = append(badSteps, ok(contributeIn(alice, "a"), ""))
	return []modetest.Scenario{
		{
			// Checklist MR-3..MR-5; CONF-30 (multi_round_happy_path).
			Name:    "happy path",
			Binding: binding(),
			Steps: []modetest.Step{
				ok(contributeIn(alice, "option_a"), "MR-3 first contribution: round 1"),
				ok(contributeIn(bob, "option_b"), "round 2, values differ"),
				rej(commitIn(coordinator, true), invalidEnv, "MR-5 not converged"),
				ok(contributeIn(bob, "option_a"), "MR-3 revision: round 3, MR-4 converged"),
				ok(commitIn(coordinator, true), "MR-5 multi_round.converged"),
			},
			WantState: map[string]any{
				"phase": "Committed", "converged": true, "convergence_type": "all_equal", "converged_value": "option_a",
				"round": 3, "values": map[string]any{alice: "option_a", bob: "option_a"},
				"contributors": 2, "contributions": 3, "participants": []any{alice, bob},
			},
		},
		{
			// MR-3: declared participants only; authority before decoding.
			Name:    "authority",
			Binding: binding(),
			Steps: []modetest.Step{
				rej(contributeIn(outsider, "a"), forbidden, "MR-3 outsider"),
				rej(contributeIn(coordinator, "a"), forbidden, "MR-3 the unlisted initiator is no contributor"),
				rej(rawIn(multiround.TypeContribute, outsider, []byte("garbage")), forbidden, "authority before decoding"),
				ok(contributeIn(alice, "a"), ""),
			},
			WantState: map[string]any{"values": map[string]any{alice: "a"}, "contributors": 1, "round": 1},
		},
		{
			Name:    "listed initiator contributes",
			Binding: binding(coordinator, alice),
			Steps: []modetest.Step{
				ok(contributeIn(coordinator, "x"), ""),
				ok(contributeIn(alice, "x"), ""),
				ok(commitIn(coordinator, true), ""),
			},
		},
		{
			// MR-3 / CONF-11: the payload is UTF-8 JSON {"value": "<string>"}.
			Name:    "payload validation",
			Binding: binding(),
			Steps:   badSteps,
			WantState: map[string]any{
				"values": map[string]any{alice: "a"}, "contributions": 1,
			},
		},
		{
			// Decisions in parseContribute: extra members ignored, any
			// string (empty, escapes, non-ASCII) is a value.
			Name:    "payload forms",
			Binding: binding(alice, bob, carol),
			Steps: []modetest.Step{
				ok(rawIn(multiround.TypeContribute, alice, []byte(` { "value" : "x\u00e9" , "note": {"k":[1,2]} } `+"\n")), "whitespace, unknown members"),
				ok(rawIn(multiround.TypeContribute, bob, []byte(`{"note":1,"value":"xé"}`)), "escaped and raw UTF-8 are the same string"),
				ok(contributeIn(carol, ""), "the empty string is a value"),
			},
			WantState: map[string]any{"values": map[string]any{alice: "xé", bob: "xé", carol: ""}, "converged": false},
		},
		{
			// MR-3: latest value per participant; round counts changes only.
			Name:    "rounds",
			Binding: binding(alice, bob, carol),
			Steps: []modetest.Step{
				ok(contributeIn(alice, "a"), "round 1"),
				ok(contributeIn(alice, "a"), "same value: no new round"),
				ok(contributeIn(alice, "b"), "round 2"),
				ok(contributeIn(bob, "b"), "round 3"),
				ok(contributeIn(bob, "b"), "no new round"),
				ok(contributeIn(alice, "c"), "round 4"),
				ok(contributeIn(alice, "b"), "round 5"),
			},
			WantState: map[string]any{
				"phase": "Collecting", "round": 5, "contributions": 7, "contributors": 2, "converged": false, "converged_value": "",
				"values": map[string]any{alice: "b", bob: "b"},
			},
		},
		{
			// MR-4: every declared participant, all values equal.
			Name:    "convergence needs everyone",
			Binding: binding(alice, bob, carol),
			Steps: []modetest.Step{
				ok(contributeIn(alice, "a"), ""),
				ok(contributeIn(bob, "a"), "two of three agree"),
				rej(commitIn(coordinator, true), invalidEnv, "MR-5 carol has not contributed"),
				ok(contributeIn(carol, "b"), ""),
				rej(commitIn(coordinator, true), invalidEnv, "MR-5 values differ"),
				ok(contributeIn(alice, "b"), ""),
				rej(commitIn(coordinator, true), invalidEnv, "bob still holds a"),
				ok(contributeIn(bob, "b"), "MR-4 converged on b"),
				rej(contributeIn(alice, "b"), invalidEnv, "MR-4 no Contribute after convergence, same value"),
				rej(contributeIn(carol, "c"), invalidEnv, "MR-4 no Contribute after convergence"),
				rej(contributeIn(outsider, "c"), forbidden, "authority first"),
				rej(rawIn(multiround.TypeContribute, alice, []byte("x")), invalidEnv, ""),
			},
			WantState: map[string]any{"phase": "Converged", "converged": true, "converged_value": "b", "round": 5},
		},
		{
			// A single participant converges with its first contribution.
			Name:    "one participant",
			Binding: binding(alice),
			Steps: []modetest.Step{
				ok(contributeIn(alice, "solo"), ""),
				rej(contributeIn(alice, "other"), invalidEnv, "MR-4"),
				ok(commitIn(coordinator, true), ""),
			},
			WantState: map[string]any{"converged_value": "solo", "round": 1},
		},
		{
			// MR-5: no outcome before convergence; after it, face value.
			Name:    "negative outcome",
			Binding: binding(),
			Steps: []modetest.Step{
				rej(commitIn(coordinator, false), invalidEnv, "MR-5 before convergence, negative too"),
				ok(contributeIn(alice, "a"), ""),
				ok(contributeIn(bob, "a"), ""),
				ok(commitIn(coordinator, false), "outcome at face value once converged"),
			},
		},
		{
			// RFC-MACP-0002 §1: types the mode does not define.
			Name:    "undefined message types",
			Binding: binding(),
			Steps: []modetest.Step{
				rej(rawIn(coord.TypeCommitment, coordinator, nil), invalidEnv, "Commitment goes through Commit, never Step"),
				rej(rawIn(coord.TypeSessionStart, coordinator, nil), invalidEnv, "SessionStart is the core's"),
				rej(rawIn("contribute", alice, []byte(`{"value":"a"}`)), invalidEnv, "type names are case-sensitive"),
				rej(rawIn("Proposal", alice, nil), invalidEnv, "another mode's type"),
				rej(rawIn("Contribute ", alice, []byte(`{"value":"a"}`)), invalidEnv, ""),
			},
			WantState: map[string]any{"phase": "Collecting", "round": 0, "values": map[string]any{}},
		},
		{
			// MR-2: participants required.
			Name:     "no participants",
			Binding:  binding([]string{}...),
			StartErr: invalidEnv,
		},
	}
}

// TestRejectedLeavesProjectUnchanged: "On error nothing changed" (mode.State
// contract), checked with reflect.DeepEqual on every reject path.
func TestRejectedLeavesProjectUnchanged(t *testing.T) {
	b := binding(alice, bob)
	st, err := multiround.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	check := func(ins ...modetest.Input) {
		t.Helper()
		modetest.RejectUnchanged(t, st, b, ins...)
	}
	rejects := []modetest.Input{contributeIn(outsider, "a"), commitIn(coordinator, true), rawIn("Bogus", alice, nil)}
	for _, p := range badPayloads {
		rejects = append(rejects, rawIn(multiround.TypeContribute, alice, p))
	}
	check(rejects...)
	for _, in := range []modetest.Input{contributeIn(alice, "a"), contributeIn(bob, "b")} {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	check(rejects...)
	in := contributeIn(bob, "a")
	if err := st.Step(b, &in.Msg); err != nil {
		t.Fatal(err)
	}
	check(contributeIn(alice, "a"), contributeIn(bob, "c"), rawIn(multiround.TypeContribute, bob, nil))
}

// TestAfterCommit: a committed state refuses everything with
// SESSION_NOT_OPEN (the core normally stops first).
func TestAfterCommit(t *testing.T) {
	in := contributeIn(alice, "a")
	modetest.CheckAfterCommit(t, multiround.New(), binding(alice),
		[]modetest.Input{in}, commitIn(coordinator, true), in)
}

// TestDescriptor pins the discovery descriptor (checklist MR-1, MODE-6;
// RFC-MACP-0002 §3 ext.* namespace).
func TestDescriptor(t *testing.T) {
	modetest.CheckDescriptorIs(t, multiround.New, modetest.WantDescriptor{
		Mode: "ext.multi_round.v1", Version: "1.0.0",
		Title:       "Multi-Round Mode",
		Determinism: "semantic-deterministic", ParticipantModel: "peer",
		MessageTypes: []string{"SessionStart", "Contribute", "Commitment"},
		Standard:     false,
	})
}

// TestLargeSession: convergence stays cheap with many participants (O(1)
// per Contribute).
func TestLargeSession(t *testing.T) {
	const n = 1000
	ps := make([]string, n)
	inputs := make([]modetest.Input, 0, 2*n+1)
	for i := range ps {
		ps[i] = fmt.Sprintf("agent://p%d", i)
		inputs = append(inputs, contributeIn(ps[i], fmt.Sprintf("v%d", i%2)))
	}
	for i := 1; i < n; i += 2 {
		inputs = append(inputs, contributeIn(ps[i], "v0"))
	}
	b := binding(ps...)
	st, err := multiround.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]any{"converged": true, "converged_value": "v0", "round": n + n/2, "contributors": n}
	if err := modetest.MatchSubset(st.Project(), want); err != nil {
		t.Error(err)
	}
}

// TestRandomRuns drives the generator through the suite invariants with
// fixed seeds, and checks it reaches the valid paths.
func TestRandomRuns(t *testing.T) {
	modetest.RandomRunsReach(t, multiround.New(), gen{}, 17, 600, 60, 160,
		func(n int) int { return n / 5 }, func(n int) int { return 2 * n })
}

// FuzzMultiRound feeds fuzzer-chosen message sequences through the shared
// suite's invariants (no panic, rejections inert, determinism, replay).
func FuzzMultiRound(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 5, 0, 0, 1, 5, 0, 2, 1, 5, 0, 0, 0, 14, 0})
	f.Add([]byte("multi-round fuzz seed with a longer body to produce more messages......................"))
	f.Fuzz(func(t *testing.T, data []byte) {
		modetest.FuzzSteps(t, multiround.New(), gen{}, data)
	})
}

// FuzzContributePayload: any payload bytes are either a valid Contribute or
// INVALID_ENVELOPE, never a panic, and an accepted value round-trips.
func FuzzContributePayload(f *testing.F) {
	for _, p := range badPayloads {
		f.Add(p)
	}
	f.Add([]byte(`{"value":"a"}`))
	f.Add([]byte(`{"x":[{"value":1}],"value":"\ud83d\ude00"}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		b := binding(alice, bob)
		st, err := multiround.New().Start(b)
		if err != nil {
			t.Fatal(err)
		}
		m := mode.Message{Type: multiround.TypeContribute, ID: "m1", Sender: alice, Payload: payload}
		err = st.Step(b, &m)
		if err != nil {
			if c := coord.CodeOf(err); c != invalidEnv {
				t.Fatalf("code %q for %q", c, payload)
			}
			return
		}
		v, _ := st.Project()["values"].(map[string]any)[alice].(string)
		again := contributeIn(bob, v)
		if err := st.Step(b, &again.Msg); err != nil {
			t.Fatalf("re-encoded value %q rejected: %v", v, err)
		}
		if p := st.Project(); p["converged"] != true {
			t.Fatalf("payload %q value %q: re-encoded contribution did not converge: %v", payload, v, p)
		}
	})
}
