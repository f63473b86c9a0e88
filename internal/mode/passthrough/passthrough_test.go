package passthrough

import (
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
)

// RFC-MACP-0002 §12 / checklist EXT-2: registration validation.
func TestValidate(t *testing.T) {
	ok := &macpv1.ModeDescriptor{Mode: "ext.vote.v1", ModeVersion: "1.0.0", MessageTypes: []string{"Ballot"}}
	d, err := Validate(ok)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.MessageTypes; len(got) != 3 || got[0] != "SessionStart" || got[1] != "Ballot" || got[2] != "Commitment" {
		t.Fatalf("normalized message types = %v", got)
	}
	if len(d.TerminalMessageTypes) != 1 || d.TerminalMessageTypes[0] != "Commitment" {
		t.Fatalf("terminal = %v", d.TerminalMessageTypes)
	}
	if ok.MessageTypes[0] != "Ballot" {
		t.Fatal("Validate modified its input")
	}
	bad := []*macpv1.ModeDescriptor{
		nil,
		{Mode: "", ModeVersion: "1", MessageTypes: []string{"A"}},
		{Mode: " x", ModeVersion: "1", MessageTypes: []string{"A"}},
		{Mode: "macp.mode.mine.v1", ModeVersion: "1", MessageTypes: []string{"A"}},
		{Mode: "ext.a.v1", MessageTypes: []string{"A"}},
		{Mode: "ext.a.v1", ModeVersion: "1"},
		{Mode: "ext.a.v1", ModeVersion: "1", MessageTypes: []string{"A", "A"}},
		{Mode: "ext.a.v1", ModeVersion: "1", MessageTypes: []string{"SessionCancel"}},
		{Mode: "ext.a.v1", ModeVersion: "1", MessageTypes: []string{"A"}, TerminalMessageTypes: []string{"A"}},
	}
	for i, d := range bad {
		if _, err := Validate(d); err == nil {
			t.Errorf("case %d: accepted %v", i, d)
		}
	}
}

func TestStepAndCommit(t *testing.T) {
	d, _ := Validate(&macpv1.ModeDescriptor{Mode: "ext.vote.v1", ModeVersion: "1.0.0", MessageTypes: []string{"Ballot"}})
	m := New(d)
	b := &mode.Binding{Mode: d.Mode, Initiator: "ini", Participants: []string{"a"}, Policy: policy.MustDefault()}
	if _, err := m.Start(&mode.Binding{Mode: d.Mode, Initiator: "ini"}); coord.CodeOf(err) != coord.CodeInvalidEnvelope {
		t.Fatalf("no participants: %v", err)
	}
	st, err := m.Start(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Step(b, &mode.Message{Type: "Ballot", Sender: "x"}); coord.CodeOf(err) != coord.CodeForbidden {
		t.Fatalf("outsider: %v", err)
	}
	if err := st.Step(b, &mode.Message{Type: "Other", Sender: "a"}); coord.CodeOf(err) != coord.CodeInvalidEnvelope {
		t.Fatalf("unknown type: %v", err)
	}
	if err := st.Step(b, &mode.Message{Type: "Ballot", Sender: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(b, &mode.Message{Type: "Commitment", Sender: "ini"}, &macpv1.CommitmentPayload{}); err != nil {
		t.Fatal(err)
	}
	p := st.Project()
	if p["phase"] != "Committed" || p["message_counts"].(map[string]any)["Ballot"] != 1 {
		t.Fatalf("projection %v", p)
	}
}
