package modetest

import (
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
)

// Helpers the modes' tests share to build bindings, payloads and steps.

// Marshal encodes m; a failure is a bug in the test and panics.
func Marshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// Binding returns a binding of session "s1" for the mode, configuration
// "cfg-1", the given initiator and participants, under policy.default when
// rules is "" and otherwise under the policy policyID with these rules. A
// rules string that does not parse fails t; with a nil t (generators build
// bindings outside a test) it panics.
func Binding(t testing.TB, modeID, modeVersion, policyID, rules, initiator string, participants []string) *mode.Binding {
	if t != nil {
		t.Helper()
	}
	pol := policy.MustDefault()
	if rules != "" {
		var err error
		pol, err = policy.Parse(policy.Descriptor{ID: policyID, Mode: modeID, Rules: rules, SchemaVersion: 1})
		if err != nil {
			msg := fmt.Sprintf("policy.Parse(%s): %v", rules, err)
			if t == nil {
				panic(msg)
			}
			t.Fatal(msg)
		}
	}
	return &mode.Binding{
		SessionID: "s1", Mode: modeID, ModeVersion: modeVersion,
		ConfigurationVersion: "cfg-1", PolicyVersion: pol.Descriptor.ID, Policy: pol,
		Initiator: initiator, Participants: participants,
	}
}

// Commitment is a Commitment input for the mode: action is positiveAction
// or negativeAction as positive says; configuration "cfg-1".
func Commitment(msg mode.Message, modeVersion, positiveAction, negativeAction string, positive bool) Input {
	action := positiveAction
	if !positive {
		action = negativeAction
	}
	return Input{
		Msg: msg,
		Commitment: &macpv1.CommitmentPayload{
			CommitmentId: "c1", Action: action, AuthorityScope: "test", Reason: "done",
			ModeVersion: modeVersion, ConfigurationVersion: "cfg-1", OutcomePositive: positive,
		},
	}
}

// Ok is a step expected to be accepted.
func Ok(in Input, note string) Step { return Step{Input: in, Note: note} }

// Rej is a step expected to be rejected with code.
func Rej(in Input, code coord.Code, note string) Step { return Step{Input: in, Want: code, Note: note} }

// RejectUnchanged offers each input to st (Commit for a Commitment, Step
// otherwise) and requires a rejection that leaves Project() deeply equal
// ("on error nothing changed", the mode.State contract).
func RejectUnchanged(t testing.TB, st mode.State, b *mode.Binding, ins ...Input) {
	t.Helper()
	for _, in := range ins {
		before := st.Project()
		var err error
		if in.Commitment != nil {
			err = st.Commit(b, &in.Msg, in.Commitment)
		} else {
			err = st.Step(b, &in.Msg)
		}
		if err == nil {
			t.Fatalf("%v accepted, want a rejection", in)
		}
		if after := st.Project(); !reflect.DeepEqual(before, after) {
			t.Errorf("%v rejected (%v) but changed the state:\nbefore %v\nafter  %v", in, err, before, after)
		}
	}
}

// Apply steps each input into st and fails t on the first rejection.
func Apply(t testing.TB, st mode.State, b *mode.Binding, ins ...Input) {
	t.Helper()
	for _, in := range ins {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatalf("%v: %v", in, err)
		}
	}
}

// BindingAt is Binding with the policy's schema_version and the session's
// profile (coord.ProfileApril or coord.ProfileLatest). rules "" is
// policy.default (schema_version 1 whatever version says).
func BindingAt(t testing.TB, modeID, modeVersion, policyID, rules string, version uint32, profile, initiator string, participants []string) *mode.Binding {
	if t != nil {
		t.Helper()
	}
	b := Binding(t, modeID, modeVersion, "", "", initiator, participants)
	b.Profile = profile
	if rules == "" {
		return b
	}
	pol, err := policy.Parse(policy.Descriptor{ID: policyID, Mode: modeID, Rules: rules, SchemaVersion: version})
	if err != nil {
		msg := fmt.Sprintf("policy.Parse(v%d %s): %v", version, rules, err)
		if t == nil {
			panic(msg)
		}
		t.Fatal(msg)
	}
	b.Policy, b.PolicyVersion = pol, pol.Descriptor.ID
	return b
}
