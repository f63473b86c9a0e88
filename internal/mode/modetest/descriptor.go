package modetest

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
)

// WantDescriptor is what a built-in mode's descriptor must say
// (RFC-MACP-0002 §4; checklist MODE-6).
type WantDescriptor struct {
	Mode, Version, Title          string // Title: checked when set
	Determinism, ParticipantModel string
	MessageTypes                  []string
	// Standard: a standards-track macp.mode.* id with proto, json_schema
	// and docs schema URIs; otherwise an ext.* extension id.
	Standard bool
}

// CheckDescriptorIs checks that newMode's descriptor is one shared value
// (two modes from newMode and two calls agree), that it says what want
// says, with Commitment as its only terminal message type, and passes
// [CheckDescriptor].
func CheckDescriptorIs(t *testing.T, newMode func() mode.Mode, want WantDescriptor) {
	t.Helper()
	m := newMode()
	d := m.Descriptor()
	if d != m.Descriptor() || d != newMode().Descriptor() {
		t.Error("Descriptor must return the same shared value")
	}
	if d.GetMode() != want.Mode || d.GetModeVersion() != want.Version ||
		(want.Title != "" && d.GetTitle() != want.Title) ||
		d.GetDeterminismClass() != want.Determinism || d.GetParticipantModel() != want.ParticipantModel ||
		!slices.Equal(d.GetMessageTypes(), want.MessageTypes) || !slices.Equal(d.GetTerminalMessageTypes(), []string{"Commitment"}) {
		t.Errorf("descriptor = %v, want %+v", d, want)
	}
	if want.Standard {
		for _, k := range []string{"proto", "json_schema", "docs"} {
			if d.GetSchemaUris()[k] == "" {
				t.Errorf("schema_uris[%q] missing", k)
			}
		}
		if !mode.IsStandardID(d.GetMode()) {
			t.Errorf("%s is not a standards-track mode id", d.GetMode())
		}
	} else if mode.IsStandardID(d.GetMode()) || !strings.HasPrefix(d.GetMode(), "ext.") {
		t.Errorf("%s is not an ext.* extension id", d.GetMode())
	}
	CheckDescriptor(t, m)
}

// RandomRunsReach runs [RandomRuns] with n sequences (nShort under
// -short) and fails unless at least minResolved(n) ended in an accepted
// Commitment and minAccepted(n) inputs were accepted: the generator must
// reach the valid paths, not only the rejections.
func RandomRunsReach(t *testing.T, m mode.Mode, g Generator, seed uint64, n, nShort, size int, minResolved, minAccepted func(n int) int) {
	t.Helper()
	if testing.Short() {
		n = nShort
	}
	resolved, accepted := RandomRuns(t, m, g, seed, n, size)
	t.Logf("%d runs: %d resolved, %d inputs accepted", n, resolved, accepted)
	if resolved < minResolved(n) || accepted < minAccepted(n) {
		t.Errorf("generator reaches too few valid paths: %d resolved, %d accepted", resolved, accepted)
	}
}

// Garbage is not decodable as any protobuf message (a truncated varint).
var Garbage = []byte{0xff, 0xff}

// Messages returns a constructor of mode messages whose ids are m1, m2,
// ... in call order (one counter per returned function).
func Messages() func(typ, sender string, payload []byte) mode.Message {
	n := 0
	return func(typ, sender string, payload []byte) mode.Message {
		n++
		return mode.Message{Type: typ, ID: "m" + strconv.Itoa(n), Sender: sender, Payload: payload}
	}
}

// CheckAfterCommit drives m from Start(b) through steps and commit, each
// accepted; then every input of after, a second Commit and a Commit
// without its payload are refused with SESSION_NOT_OPEN (a committed state
// refuses everything; the core normally stops first), and a Commit without
// its payload on a fresh state is INVALID_ENVELOPE.
func CheckAfterCommit(t *testing.T, m mode.Mode, b *mode.Binding, steps []Input, commit Input, after ...Input) {
	t.Helper()
	st, err := m.Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range steps {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Commit(b, &commit.Msg, commit.Commitment); err != nil {
		t.Fatal(err)
	}
	for _, in := range after {
		if got := coord.CodeOf(st.Step(b, &in.Msg)); got != coord.CodeSessionNotOpen {
			t.Errorf("Step %s after commit: %q", in.Msg.Type, got)
		}
	}
	if got := coord.CodeOf(st.Commit(b, &commit.Msg, commit.Commitment)); got != coord.CodeSessionNotOpen {
		t.Errorf("second Commit: %q", got)
	}
	if got := coord.CodeOf(st.Commit(b, &commit.Msg, nil)); got != coord.CodeSessionNotOpen {
		t.Errorf("Commit without payload after commit: %q", got)
	}
	fresh, err := m.Start(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := coord.CodeOf(fresh.Commit(b, &commit.Msg, nil)); got != coord.CodeInvalidEnvelope {
		t.Errorf("Commit without payload: %q", got)
	}
}
