// Package modetest is the shared test suite every coordination mode passes
// (RFC-MACP-0002, checklist §5.0 and DISC-6).
//
// A mode's tests call:
//
//   - [CheckDescriptor] for the discovery descriptor;
//   - [Run] with table-driven [Scenario]s: each input's expected outcome is
//     checked, and every input also goes through the invariants below;
//   - [RandomRuns] and, from a native fuzz target, [FuzzSteps] with a
//     mode-supplied [Generator] that turns random bytes into plausible inputs.
//
// The invariants checked on every input ([Check]):
//
//  1. no panic; every error is a *coord.Error with a registry code, never
//     INTERNAL_ERROR;
//  2. a message of a type the mode does not define is rejected with
//     INVALID_ENVELOPE and changes nothing;
//  3. a rejected input changes nothing: Project() is identical before and
//     after (RFC-MACP-0003: only accepted history shapes state);
//  4. determinism: two states started from the same binding and fed the same
//     inputs make the same accept/reject decisions (same code) and project
//     identical states after every input;
//  5. Project() is JSON-compatible and JSON-marshalable, returns a fresh value
//     each call (mutating it does not affect the state), and is stable;
//  6. replay equivalence: replaying only the accepted inputs into a fresh
//     state accepts every one of them again and ends in the same projection.
//
// After an accepted Commitment the session is resolved and the core sends the
// mode nothing more, so a sequence stops there.
//
// The spec's conformance fixtures run at the mode level with [RunFixtures]
// (the April format, per mode) and [RunSpecFixtures] / [RunSpecFixture]
// (both formats; the newest one has fully qualified payload_type names
// and inline policies, see specfixtures.go), under a given profile.
package modetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
)

// Input is one message offered to a mode State: Commit when Commitment is
// non-nil (the core has already decoded and checked it), Step otherwise.
type Input struct {
	Msg        mode.Message
	Commitment *macpv1.CommitmentPayload
}

func (in Input) String() string {
	if in.Commitment != nil {
		return fmt.Sprintf("Commit(%s from %s: action=%q positive=%v)", in.Msg.Type, in.Msg.Sender,
			in.Commitment.GetAction(), in.Commitment.GetOutcomePositive())
	}
	return fmt.Sprintf("Step(%s from %s: %d payload bytes %x)", in.Msg.Type, in.Msg.Sender, len(in.Msg.Payload), in.Msg.Payload)
}

// Step is an Input with its expected outcome.
type Step struct {
	Input
	// Want is the expected error code; "" means the input is accepted.
	Want coord.Code
	// Note says what the step proves (e.g. the RFC section); it appears in
	// failure messages.
	Note string
}

// Scenario is one table-driven case: a binding, an expected Start outcome,
// inputs with expected outcomes, and an optional expected final projection.
type Scenario struct {
	Name    string
	Binding *mode.Binding
	// StartErr is the expected code of Start; "" means Start succeeds.
	StartErr coord.Code
	Steps    []Step
	// WantState, if non-nil, is matched against the final Project() as a
	// subset (checklist CONF-15, see [MatchSubset]).
	WantState map[string]any
}

// ValidDeterminismClasses are the classes of RFC-MACP-0002 §7.
var ValidDeterminismClasses = []string{"structural-only", "semantic-deterministic", "context-frozen", "non-deterministic"}

// ValidParticipantModels are the models of RFC-MACP-0002 §5.
var ValidParticipantModels = []string{"declared", "quorum", "orchestrated", "peer", "delegated"}

// schemaURIKeys are the keys RFC-MACP-0002 §4 defines for schema_uris.
var schemaURIKeys = []string{"proto", "json_schema", "docs"}

// DescriptorErrors returns every way d falls short of DISC-6 (the mode
// descriptor JSON schema), RFC-MACP-0002 §4–§7 and checklist MODE-6.
func DescriptorErrors(d *macpv1.ModeDescriptor) []string {
	if d == nil {
		return []string{"descriptor is nil"}
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	for _, f := range []struct{ name, v string }{
		{"mode", d.GetMode()}, {"mode_version", d.GetModeVersion()}, {"title", d.GetTitle()},
		{"description", d.GetDescription()}, {"participant_model", d.GetParticipantModel()},
	} {
		if strings.TrimSpace(f.v) == "" {
			bad("%s is empty (DISC-6)", f.name)
		}
	}
	if strings.ContainsAny(d.GetMode(), " \t\n") {
		bad("mode %q contains whitespace", d.GetMode())
	}
	if !slices.Contains(ValidDeterminismClasses, d.GetDeterminismClass()) {
		bad("determinism_class %q not in %v (RFC-MACP-0002 §7)", d.GetDeterminismClass(), ValidDeterminismClasses)
	}
	if mode.IsStandardID(d.GetMode()) && !slices.Contains(ValidParticipantModels, d.GetParticipantModel()) {
		bad("participant_model %q not in %v (RFC-MACP-0002 §5)", d.GetParticipantModel(), ValidParticipantModels)
	}
	mt, tt := d.GetMessageTypes(), d.GetTerminalMessageTypes()
	if len(mt) == 0 {
		bad("message_types is empty (DISC-6)")
	}
	if len(tt) == 0 {
		bad("terminal_message_types is empty (DISC-6)")
	}
	for _, list := range []struct {
		name string
		v    []string
	}{{"message_types", mt}, {"terminal_message_types", tt}} {
		seen := map[string]bool{}
		for _, t := range list.v {
			if t == "" {
				bad("%s contains an empty type", list.name)
			}
			if seen[t] {
				bad("%s lists %q twice", list.name, t)
			}
			seen[t] = true
		}
	}
	for _, want := range []string{coord.TypeSessionStart, coord.TypeCommitment} {
		if !slices.Contains(mt, want) {
			bad("message_types lacks %s (MODE-6)", want)
		}
	}
	for _, t := range tt {
		if !slices.Contains(mt, t) {
			bad("terminal type %q is not in message_types", t)
		}
	}
	if !slices.Contains(tt, coord.TypeCommitment) {
		bad("terminal_message_types lacks Commitment (RFC-MACP-0002 §6)")
	}
	for k, v := range d.GetSchemaUris() {
		if !slices.Contains(schemaURIKeys, k) {
			bad("schema_uris key %q not in %v (RFC-MACP-0002 §4)", k, schemaURIKeys)
		}
		if strings.TrimSpace(v) == "" {
			bad("schema_uris[%q] is empty", k)
		}
	}
	slices.Sort(errs)
	return errs
}

// CheckDescriptor fails t for every DescriptorErrors finding, and if two
// calls to Descriptor disagree.
func CheckDescriptor(t testing.TB, m mode.Mode) {
	t.Helper()
	for _, e := range DescriptorErrors(m.Descriptor()) {
		t.Errorf("descriptor: %s", e)
	}
	a, b := m.Descriptor(), m.Descriptor()
	if a.GetMode() != b.GetMode() || a.GetModeVersion() != b.GetModeVersion() ||
		!slices.Equal(a.GetMessageTypes(), b.GetMessageTypes()) {
		t.Errorf("descriptor: two calls returned different descriptors")
	}
}

// Run checks the descriptor, then runs each scenario as a subtest: Start's
// outcome, every step's expected outcome plus the invariants of [Check],
// and the final projection against WantState.
func Run(t *testing.T, m mode.Mode, scenarios ...Scenario) {
	t.Helper()
	t.Run("descriptor", func(t *testing.T) { CheckDescriptor(t, m) })
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) { runScenario(t, m, sc) })
	}
}

func runScenario(t *testing.T, m mode.Mode, sc Scenario) {
	t.Helper()
	if _, err := m.Start(sc.Binding); codeOf(err) != sc.StartErr {
		t.Fatalf("Start: got %q (%v), want %q", codeOf(err), err, sc.StartErr)
	} else if err != nil {
		return
	}
	inputs := make([]Input, len(sc.Steps))
	for i, s := range sc.Steps {
		inputs[i] = s.Input
	}
	res, err := Check(m, sc.Binding, inputs)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sc.Steps {
		if i >= len(res.Codes) {
			t.Fatalf("step %d (%s): not run: an earlier Commitment resolved the session", i, s.Note)
		}
		if got := res.Codes[i]; got != s.Want {
			t.Errorf("step %d %v (%s): got %q (%v), want %q", i, s.Input, s.Note, got, res.Errs[i], s.Want)
		}
	}
	if sc.WantState != nil {
		if err := MatchSubset(res.Final, sc.WantState); err != nil {
			t.Errorf("final state: %v\n got: %s", err, mustJSON(res.Final))
		}
	}
}

// Result is what [Check] observed.
type Result struct {
	// Codes[i] is the outcome of input i ("" = accepted); inputs after an
	// accepted Commitment are not run.
	Codes []coord.Code
	Errs  []error
	// Final is the last projection.
	Final map[string]any
	// Resolved reports that an accepted Commitment ended the sequence.
	Resolved bool
}

// unknownTypes are message types no mode defines (invariant 2).
var unknownTypes = []string{"", "NoSuchMessageType", "proposal", "Signal"}

// Check runs inputs through two states started from b and verifies the
// invariants listed in the package doc. It returns an error describing the
// first violation (with the sequence that led to it); a panic in the mode
// propagates, so fuzzing reports it with its input.
func Check(m mode.Mode, b *mode.Binding, inputs []Input) (*Result, error) {
	a, err := m.Start(b)
	if err != nil {
		return nil, fmt.Errorf("Start: %v", err)
	}
	twin, err := m.Start(b)
	if err != nil {
		return nil, fmt.Errorf("second Start: %v", err)
	}
	res := &Result{}
	snap, err := projection(a)
	if err != nil {
		return nil, fmt.Errorf("after Start: %v", err)
	}
	if twinSnap, err := marshalProject(twin); err != nil || !bytes.Equal(snap, twinSnap) {
		return nil, fmt.Errorf("two Starts project differently (%v):\n%s\n%s", err, snap, twinSnap)
	}
	senders := append([]string{b.Initiator}, b.Participants...)
	var accepted []Input
	fail := func(i int, format string, args ...any) error {
		var sb strings.Builder
		for j := 0; j <= i && j < len(inputs); j++ {
			fmt.Fprintf(&sb, "\n  %3d %v", j, inputs[j])
			if j < len(res.Codes) {
				fmt.Fprintf(&sb, " -> %q", res.Codes[j])
			}
		}
		return fmt.Errorf("input %d: %s\nsequence:%s", i, fmt.Sprintf(format, args...), sb.String())
	}
	for i, in := range inputs {
		// Invariant 2, in every phase: unknown types are rejected and inert.
		for k, ut := range unknownTypes {
			msg := mode.Message{Type: ut, ID: fmt.Sprintf("unknown-%d-%d", i, k), Sender: senders[k%len(senders)], Payload: in.Msg.Payload}
			if ut == in.Msg.Type {
				continue
			}
			if err := a.Step(b, &msg); codeOf(err) != coord.CodeInvalidEnvelope {
				return nil, fail(i, "Step with undefined type %q from %s: got %v, want INVALID_ENVELOPE", ut, msg.Sender, err)
			}
		}
		if after, err := marshalProject(a); err != nil || !bytes.Equal(snap, after) {
			return nil, fail(i, "rejected undefined types %q changed the state (%v):\nbefore %s\nafter  %s", unknownTypes, err, snap, after)
		}

		errA := apply(a, b, in)
		errB := apply(twin, b, in)
		codeA, codeB := codeOf(errA), codeOf(errB)
		res.Codes = append(res.Codes, codeA)
		res.Errs = append(res.Errs, errA)
		if errA != nil {
			var ce *coord.Error
			if !errors.As(errA, &ce) {
				return nil, fail(i, "error %v is not a *coord.Error", errA)
			}
			if ce.Code == coord.CodeInternalError || ce.Code.HTTPStatus() == 500 {
				return nil, fail(i, "error code %q is not a client-facing registry code", ce.Code)
			}
		}
		if codeA != codeB {
			return nil, fail(i, "non-deterministic decision: %q vs %q", codeA, codeB)
		}
		after, err := projection(a)
		if err != nil {
			return nil, fail(i, "%v", err)
		}
		twinAfter, err := marshalProject(twin)
		if err != nil {
			return nil, fail(i, "%v", err)
		}
		if !bytes.Equal(after, twinAfter) {
			return nil, fail(i, "non-deterministic state:\n%s\n%s", after, twinAfter)
		}
		if errA != nil && !bytes.Equal(snap, after) {
			return nil, fail(i, "rejected input (%v) changed the state:\nbefore %s\nafter  %s", errA, snap, after)
		}
		snap = after
		if errA == nil {
			accepted = append(accepted, in)
			if in.Commitment != nil {
				res.Resolved = true
				break
			}
		}
	}
	// Invariant 6: replay of the accepted history.
	r, err := m.Start(b)
	if err != nil {
		return nil, fmt.Errorf("replay Start: %v", err)
	}
	for j, in := range accepted {
		if err := apply(r, b, in); err != nil {
			return nil, fmt.Errorf("replay of accepted input %d %v rejected: %v", j, in, err)
		}
	}
	replayed, err := projection(r)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(replayed, snap) {
		return nil, fmt.Errorf("replay of the accepted history differs:\nlive   %s\nreplay %s", snap, replayed)
	}
	res.Final = a.Project()
	return res, nil
}

func apply(s mode.State, b *mode.Binding, in Input) error {
	msg := in.Msg
	if in.Commitment != nil {
		return s.Commit(b, &msg, in.Commitment)
	}
	return s.Step(b, &msg)
}

// marshalProject returns the JSON of s.Project().
func marshalProject(s mode.State) ([]byte, error) {
	j, err := json.Marshal(s.Project())
	if err != nil {
		return nil, fmt.Errorf("Project is not JSON-marshalable: %v", err)
	}
	return j, nil
}

// projection checks invariant 5 and returns the projection's JSON.
func projection(s mode.State) ([]byte, error) {
	p := s.Project()
	if p == nil {
		return nil, errors.New("Project returned nil")
	}
	if err := checkJSONValue("$", p); err != nil {
		return nil, fmt.Errorf("Project: %v", err)
	}
	j, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("Project is not JSON-marshalable: %v", err)
	}
	scramble(p)
	j2, err := marshalProject(s)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(j, j2) {
		return nil, fmt.Errorf("Project shares memory with the state or is unstable:\n%s\n%s", j, j2)
	}
	return j, nil
}

// checkJSONValue reports values outside the JSON-compatible set the
// mode.State.Project contract allows.
func checkJSONValue(path string, v any) error {
	switch x := v.(type) {
	case nil, string, bool, int, int32, int64, uint32, uint64:
		return nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("%s: %v is not a JSON number", path, x)
		}
		return nil
	case map[string]any:
		for k, e := range x {
			if err := checkJSONValue(path+"."+k, e); err != nil {
				return err
			}
		}
		return nil
	case []any:
		for i, e := range x {
			if err := checkJSONValue(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("%s: %T is not a JSON-compatible type (use map[string]any, []any, string, float64, bool)", path, v)
	}
}

// scramble destroys a projection in place, so a Project that returned
// internal memory shows up as a changed state.
func scramble(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			scramble(e)
			delete(x, k)
		}
		x["_scrambled"] = true
	case []any:
		for i, e := range x {
			scramble(e)
			x[i] = "_scrambled"
		}
	}
}

// MatchSubset reports how got fails to contain want (checklist CONF-15):
// every key of a want object exists in got and matches recursively; a got
// array is at least as long as a want array and matches index-wise;
// scalars are equal after normalising numbers to float64.
func MatchSubset(got, want any) error {
	return matchSubset("$", normalize(got), normalize(want))
}

func matchSubset(path string, got, want any) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: got %T, want object", path, got)
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s.%s: missing", path, k)
			}
			if err := matchSubset(path+"."+k, gv, w[k]); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: got %T, want array", path, got)
		}
		if len(g) < len(w) {
			return fmt.Errorf("%s: got %d elements, want at least %d", path, len(g), len(w))
		}
		for i := range w {
			if err := matchSubset(fmt.Sprintf("%s[%d]", path, i), g[i], w[i]); err != nil {
				return err
			}
		}
		return nil
	default:
		if got != want {
			return fmt.Errorf("%s: got %v (%T), want %v (%T)", path, got, got, want, want)
		}
		return nil
	}
}

// normalize round-trips v through JSON so both sides use the same types.
func normalize(v any) any {
	j, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(j, &out); err != nil {
		return v
	}
	return out
}

func codeOf(err error) coord.Code {
	if err == nil {
		return ""
	}
	return coord.CodeOf(err)
}

func mustJSON(v any) string {
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(j)
}
