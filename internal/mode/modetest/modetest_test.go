package modetest

import (
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
)

// toy is a minimal mode used to prove the suite catches broken modes: "Add"
// appends its payload to a list; payload "bad" is rejected. Each bug flag
// breaks one invariant.
type toy struct {
	mutateOnReject bool // appends before validating
	aliasProject   bool // Project returns internal memory
	nondet         *int // decisions depend on a counter shared across states
	acceptUnknown  bool // Step accepts undefined types
	untypedError   bool // returns a plain error
	badJSON        bool // Project contains a non-JSON type
}

type toyState struct {
	m    *toy
	list []any
	view map[string]any
}

var toyDesc = &macpv1.ModeDescriptor{
	Mode: "ext.toy.v1", ModeVersion: "1.0.0", Title: "Toy", Description: "test mode",
	DeterminismClass: "structural-only", ParticipantModel: "peer",
	MessageTypes: []string{"SessionStart", "Add", "Commitment"}, TerminalMessageTypes: []string{"Commitment"},
}

func (m *toy) Descriptor() *macpv1.ModeDescriptor { return toyDesc }
func (m *toy) Start(*mode.Binding) (mode.State, error) {
	return &toyState{m: m, list: []any{}}, nil
}

func (s *toyState) Step(_ *mode.Binding, msg *mode.Message) error {
	if msg.Type != "Add" && !s.m.acceptUnknown {
		return coord.Errorf(coord.CodeInvalidEnvelope, "unknown type")
	}
	if s.m.mutateOnReject {
		s.list = append(s.list, string(msg.Payload))
	}
	if string(msg.Payload) == "bad" {
		if s.m.untypedError {
			return errString("bad")
		}
		return coord.Errorf(coord.CodeInvalidEnvelope, "bad")
	}
	if s.m.nondet != nil {
		*s.m.nondet++
		if *s.m.nondet%2 == 0 {
			return coord.Errorf(coord.CodeInvalidEnvelope, "flaky")
		}
	}
	if !s.m.mutateOnReject {
		s.list = append(s.list, string(msg.Payload))
	}
	return nil
}

func (s *toyState) Commit(*mode.Binding, *mode.Message, *macpv1.CommitmentPayload) error { return nil }

func (s *toyState) Project() map[string]any {
	if s.m.aliasProject {
		if s.view == nil {
			s.view = map[string]any{}
		}
		s.view["list"] = s.list
		return s.view
	}
	p := map[string]any{"list": append([]any{}, s.list...)}
	if s.m.badJSON {
		p["bytes"] = []byte("x")
	}
	return p
}

type errString string

func (e errString) Error() string { return string(e) }

func add(payload string) Input {
	return Input{Msg: mode.Message{Type: "Add", ID: payload, Sender: "a", Payload: []byte(payload)}}
}

func TestCheckCatchesBrokenModes(t *testing.T) {
	b := &mode.Binding{Initiator: "i", Participants: []string{"a"}}
	inputs := []Input{add("x"), add("bad"), add("y"), add("z")}
	if _, err := Check(&toy{}, b, inputs); err != nil {
		t.Fatalf("correct toy mode fails: %v", err)
	}
	counter := 0
	for _, tc := range []struct {
		name string
		m    *toy
		want string
	}{
		{"mutate on reject", &toy{mutateOnReject: true}, "changed the state"},
		{"aliased projection", &toy{aliasProject: true}, "shares memory"},
		{"non-deterministic", &toy{nondet: &counter}, "non-deterministic"},
		{"accepts unknown types", &toy{acceptUnknown: true}, "undefined type"},
		{"untyped error", &toy{untypedError: true}, "not a *coord.Error"},
		{"non-JSON projection", &toy{badJSON: true}, "not a JSON-compatible type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(tc.m, b, inputs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDescriptorErrors(t *testing.T) {
	if errs := DescriptorErrors(toyDesc); len(errs) != 0 {
		t.Errorf("valid descriptor: %v", errs)
	}
	bad := &macpv1.ModeDescriptor{
		Mode: "macp.mode.x.v1", DeterminismClass: "mostly", ParticipantModel: "crowd",
		MessageTypes: []string{"Add", "Add"}, TerminalMessageTypes: []string{"Done"},
		SchemaUris: map[string]string{"protobuf": "x", "docs": ""},
	}
	got := strings.Join(DescriptorErrors(bad), "\n")
	for _, want := range []string{
		"mode_version is empty", "title is empty", "description is empty", "determinism_class",
		"participant_model \"crowd\"", "lists \"Add\" twice", "lacks SessionStart", "lacks Commitment",
		"\"Done\" is not in message_types", "terminal_message_types lacks Commitment",
		"key \"protobuf\"", "schema_uris[\"docs\"] is empty",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing finding %q in:\n%s", want, got)
		}
	}
	if errs := DescriptorErrors(nil); len(errs) != 1 {
		t.Errorf("nil descriptor: %v", errs)
	}
}

func TestMatchSubset(t *testing.T) {
	got := map[string]any{
		"phase": "Voting",
		"votes": map[string]any{"p1": map[string]any{"a": map[string]any{"vote": "APPROVE", "reason": "r"}}},
		"list":  []any{map[string]any{"n": 1, "x": true}, "two"},
		"n":     3,
	}
	for _, want := range []map[string]any{
		{},
		{"phase": "Voting"},
		{"votes": map[string]any{"p1": map[string]any{"a": map[string]any{"vote": "APPROVE"}}}},
		{"list": []any{map[string]any{"n": 1.0}}},
		{"n": 3.0},
	} {
		if err := MatchSubset(got, want); err != nil {
			t.Errorf("MatchSubset(%v): %v", want, err)
		}
	}
	for _, want := range []map[string]any{
		{"phase": "Committed"},
		{"missing": 1},
		{"votes": map[string]any{"p1": map[string]any{"b": map[string]any{}}}},
		{"list": []any{nil, "two", "three"}},
		{"list": map[string]any{}},
		{"n": "3"},
	} {
		if err := MatchSubset(got, want); err == nil {
			t.Errorf("MatchSubset(%v) matched", want)
		}
	}
}

func TestRand(t *testing.T) {
	r := NewRand([]byte{5, 7, 0xff, 1})
	if got := r.Intn(3); got != 2 {
		t.Errorf("Intn(3) = %d", got)
	}
	if !r.Bool() {
		t.Error("Bool of 7 is true")
	}
	if r.Float64() != 1 {
		t.Error("Float64 of 0xff is 1")
	}
	if r.Pick("a", "b") != "b" {
		t.Error("Pick")
	}
	if r.Remaining() != 0 || r.Intn(10) != 0 || r.Bool() || r.Intn(1000) != 0 {
		t.Error("exhausted Rand must return zero choices")
	}
}
