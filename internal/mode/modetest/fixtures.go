package modetest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/testutil"
)

// FixtureOptions says what differs between modes when running the spec's
// conformance fixtures with [RunFixtures].
type FixtureOptions struct {
	// Glob selects the spec's fixtures (testutil.ConformanceDir), e.g.
	// "handoff_*.json".
	Glob string
	// ModeID, when set, must equal every fixture's mode.
	ModeID string
	// Payloads maps a fixture payload_type (after PayloadPrefix is trimmed)
	// to a constructor of its protobuf message. "Commitment" is built in.
	Payloads map[string]func() proto.Message
	// PayloadPrefix is trimmed from a payload_type before Payloads is
	// consulted (so "decision.Vote" and "Vote" both work).
	PayloadPrefix string
	// JSONPayloads are payload_types carried as compact UTF-8 JSON rather
	// than protobuf (CONF-11, e.g. multi_round.Contribute).
	JSONPayloads []string
	// NumberedIDs gives message i (from 1) the id "m<i>"; otherwise every
	// message's id is "m".
	NumberedIDs bool
	// PinnedCodes, by fixture file name, are the codes macpd returns for
	// each message ("" for accepted) where the fixture gives none.
	PinnedCodes map[string][]coord.Code
	// PinnedState, by fixture file name, is matched against the final
	// projection in addition to any expected_mode_state.
	PinnedState map[string]map[string]any
}

type fixtureMessage struct {
	Sender            string          `json:"sender"`
	MessageType       string          `json:"message_type"`
	PayloadType       string          `json:"payload_type"`
	Payload           json.RawMessage `json:"payload"`
	Expect            string          `json:"expect"`
	ExpectedErrorCode string          `json:"expected_error_code"`
}

type fixture struct {
	Mode                    string           `json:"mode"`
	Initiator               string           `json:"initiator"`
	Participants            []string         `json:"participants"`
	ModeVersion             string           `json:"mode_version"`
	ConfigurationVersion    string           `json:"configuration_version"`
	Messages                []fixtureMessage `json:"messages"`
	ExpectedFinalState      string           `json:"expected_final_state"`
	ExpectResolutionPresent *bool            `json:"expect_resolution_present"`
	ExpectedModeState       map[string]any   `json:"expected_mode_state"`
}

// RunFixtures runs the spec's conformance fixtures matching opts.Glob at the
// mode level with m, one subtest per file. The core's part of a Commitment
// (authority, CONF-11 payload decoding) is emulated with policy.MayCommit;
// everything else is the mode's. Each message must be accepted or rejected
// as the fixture says, with its expected_error_code and any pinned code; the
// final state, resolution and expected_mode_state (plus any pinned state)
// are checked; and the accepted history must pass [Check]. It fails when
// the fixtures are not found or none matches opts.Glob (never skips).
func RunFixtures(t *testing.T, m mode.Mode, opts FixtureOptions) {
	t.Helper()
	dir := testutil.ConformanceDir(t)
	files, _ := filepath.Glob(filepath.Join(dir, opts.Glob))
	if len(files) == 0 {
		t.Fatalf("no spec fixture matches %s in %s", opts.Glob, dir)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) { runFixture(t, m, opts, file, name) })
	}
}

func runFixture(t *testing.T, m mode.Mode, opts FixtureOptions, file, name string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if opts.ModeID != "" && fx.Mode != opts.ModeID {
		t.Fatalf("fixture mode %q", fx.Mode)
	}
	pol := policy.MustDefault()
	b := &mode.Binding{
		SessionID: "conformance", Mode: fx.Mode, ModeVersion: fx.ModeVersion,
		ConfigurationVersion: fx.ConfigurationVersion, PolicyVersion: pol.Descriptor.ID, Policy: pol,
		Initiator: fx.Initiator, Participants: fx.Participants, Profile: coord.ProfileApril,
	}
	st, err := m.Start(b)
	if err != nil {
		t.Fatal(err)
	}
	pinned := opts.PinnedCodes[name]
	if pinned != nil && len(pinned) != len(fx.Messages) {
		t.Fatalf("PinnedCodes[%s] has %d entries for %d messages", name, len(pinned), len(fx.Messages))
	}
	var inputs []Input
	resolved := false
	for i, fm := range fx.Messages {
		id := "m"
		if opts.NumberedIDs {
			id += strconv.Itoa(i + 1)
		}
		in := fixtureInput(t, opts, id, fm)
		var err error
		switch {
		case in.Commitment != nil && !pol.MayCommit(fm.Sender, b.Initiator, b.Participants):
			err = coord.Errorf(coord.CodeForbidden, "core: commitment authority")
		case in.Commitment != nil:
			err = st.Commit(b, &in.Msg, in.Commitment)
		default:
			err = st.Step(b, &in.Msg)
		}
		switch fm.Expect {
		case "accept":
			if err != nil {
				t.Fatalf("message %d (%s from %s): rejected: %v", i+1, fm.MessageType, fm.Sender, err)
			}
			inputs = append(inputs, in)
			resolved = resolved || in.Commitment != nil
		case "reject":
			if err == nil {
				t.Fatalf("message %d (%s from %s): accepted, want reject", i+1, fm.MessageType, fm.Sender)
			}
			if fm.ExpectedErrorCode != "" && coord.CodeOf(err) != coord.Code(fm.ExpectedErrorCode) {
				t.Errorf("message %d: code %s, want %s", i+1, coord.CodeOf(err), fm.ExpectedErrorCode)
			}
		default:
			t.Fatalf("message %d: expect %q", i+1, fm.Expect)
		}
		if pinned != nil && codeOf(err) != pinned[i] {
			t.Errorf("message %d: code %q, pinned %q (%v)", i+1, codeOf(err), pinned[i], err)
		}
	}
	final := "Open"
	if resolved {
		final = "Resolved"
	}
	if fx.ExpectedFinalState != "" && fx.ExpectedFinalState != final {
		t.Errorf("final state %s, want %s", final, fx.ExpectedFinalState)
	}
	if fx.ExpectResolutionPresent != nil && *fx.ExpectResolutionPresent != resolved {
		t.Errorf("resolution present = %v, want %v", resolved, *fx.ExpectResolutionPresent)
	}
	if fx.ExpectedModeState != nil {
		if err := MatchSubset(st.Project(), fx.ExpectedModeState); err != nil {
			t.Errorf("expected_mode_state: %v", err)
		}
	}
	if want := opts.PinnedState[name]; want != nil {
		if err := MatchSubset(st.Project(), want); err != nil {
			t.Errorf("pinned state: %v", err)
		}
	}
	// The accepted history also passes the suite's invariants.
	if _, err := Check(m, b, inputs); err != nil {
		t.Error(err)
	}
}

// fixtureInput encodes a fixture message (checklist CONF-11, CONF-12).
func fixtureInput(t *testing.T, opts FixtureOptions, id string, fm fixtureMessage) Input {
	t.Helper()
	in := Input{Msg: mode.Message{Type: fm.MessageType, ID: id, Sender: fm.Sender}}
	if fm.PayloadType == "Commitment" {
		c := &macpv1.CommitmentPayload{}
		if err := protojson.Unmarshal(fm.Payload, c); err != nil {
			t.Fatalf("commitment payload: %v", err)
		}
		if !bytes.Contains(fm.Payload, []byte(`"outcome_positive"`)) {
			c.OutcomePositive = true // CONF-11: absent means true
		}
		in.Commitment = c
		in.Msg.Payload, _ = proto.Marshal(c)
		return in
	}
	for _, jt := range opts.JSONPayloads {
		if fm.PayloadType == jt {
			var compact bytes.Buffer
			if err := json.Compact(&compact, fm.Payload); err != nil {
				t.Fatal(err)
			}
			in.Msg.Payload = compact.Bytes()
			return in
		}
	}
	newMsg := opts.Payloads[strings.TrimPrefix(fm.PayloadType, opts.PayloadPrefix)]
	if newMsg == nil {
		t.Fatalf("unknown payload_type %q", fm.PayloadType)
	}
	in.Msg.Payload = encodeFixturePayload(t, newMsg(), fm.Payload)
	return in
}

// encodeFixturePayload decodes fixture JSON into m and marshals it. CONF-12:
// a bytes field written as [] is empty and one written as a string carries
// that string's UTF-8 bytes (not base64).
func encodeFixturePayload(t *testing.T, m proto.Message, payload json.RawMessage) []byte {
	t.Helper()
	if err := decodeFixtureJSON(m, payload); err != nil {
		t.Fatalf("%T payload: %v", m, err)
	}
	out, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
