package conformance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Target is a MACP runtime under test. Each call acts as the named sender
// (an authenticated identity).
type Target interface {
	Send(ctx context.Context, sender string, env *macpv1.Envelope) (*macpv1.Ack, error)
	// Cancel returns the MACP code of a refusal ("" when accepted).
	Cancel(ctx context.Context, sender, sessionID, reason string) (code string, err error)
	GetSession(ctx context.Context, sender, sessionID string) (*macpv1.SessionMetadata, error)
	// Wait lets d pass (a sleep over the network, a clock step in-process).
	Wait(ctx context.Context, d time.Duration) error
	// Now is the target's clock in Unix ms, for envelope timestamps.
	Now() int64
}

// Inspector is implemented by in-process targets that can show internal
// state: the mode-state projection, the resolution and a replay check.
type Inspector interface {
	ModeState(ctx context.Context, sessionID string) (map[string]any, error)
	Resolution(ctx context.Context, sessionID string) (*macpv1.CommitmentPayload, error)
	// CheckReplay replays the stored history into a fresh core and reports
	// any difference from the live session (state, resolution, dedup set,
	// mode state).
	CheckReplay(ctx context.Context, sessionID string) error
}

// PolicyRegistrar is implemented by targets that can register a
// fixture's inline policy (RFC-MACP-0012 §7) before its SessionStart.
type PolicyRegistrar interface {
	// RegisterPolicy registers pd acting as sender; a refusal is an error
	// (with the MACP code in its text when the target reports one).
	RegisterPolicy(ctx context.Context, sender string, pd *macpv1.PolicyDescriptor) error
	// GetPolicy returns the policy registered under id, or nil, nil when
	// none is.
	GetPolicy(ctx context.Context, sender, id string) (*macpv1.PolicyDescriptor, error)
}

// Result of one fixture.
type Result struct {
	Name     string
	Failures []string
	// Unchecked lists the fixture's expectations this target cannot
	// check (mode state, resolution and replay need an Inspector): they
	// are neither passed nor failed, and callers show them.
	Unchecked []string
}

// Passed reports whether the fixture passed.
func (r Result) Passed() bool { return len(r.Failures) == 0 }

func (r *Result) failf(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// Run executes f against t in a fresh session sessionID.
func Run(ctx context.Context, f *Fixture, t Target, sessionID string) Result {
	res := Result{Name: f.Name}
	if err := ensurePolicy(ctx, f, t); err != nil {
		res.failf("policy: %v", err)
		return res
	}
	startPayload, err := f.StartPayload()
	if err != nil {
		res.failf("SessionStart payload: %v", err)
		return res
	}
	ack, err := t.Send(ctx, f.Initiator, &macpv1.Envelope{
		MacpVersion: "1.0", Mode: f.Mode, MessageType: "SessionStart", MessageId: "m0",
		SessionId: sessionID, Sender: f.Initiator, TimestampUnixMs: t.Now(), Payload: startPayload,
	})
	if err != nil {
		res.failf("SessionStart: transport error: %v", err)
		return res
	}
	if f.StartExpect == "reject" {
		if !ack.Ok && f.StartExpectedErrorCode != "" && ack.GetError().GetCode() != f.StartExpectedErrorCode {
			res.failf("SessionStart: expected reject %s, got reject %s (%s)", f.StartExpectedErrorCode,
				ack.GetError().GetCode(), ack.GetError().GetMessage())
			return res
		}
		if ack.Ok {
			res.failf("SessionStart: accepted, expected rejection %s", f.StartExpectedErrorCode)
		}
		return res
	}
	if !ack.Ok {
		res.failf("SessionStart rejected: %s: %s", ack.GetError().GetCode(), ack.GetError().GetMessage())
		return res
	}
	for i, m := range f.Messages {
		step := fmt.Sprintf("message %d (%s %s)", i+1, m.Sender, m.MessageType)
		switch m.Action {
		case "wait":
			if err := t.Wait(ctx, time.Duration(m.WaitMs)*time.Millisecond); err != nil {
				res.failf("%s: wait: %v", step, err)
				return res
			}
			continue
		case "cancel":
			step = fmt.Sprintf("message %d (%s CancelSession)", i+1, m.Sender)
			code, err := t.Cancel(ctx, m.Sender, sessionID, m.Reason)
			if err != nil {
				res.failf("%s: transport error: %v", step, err)
				continue
			}
			checkOutcome(&res, step, m, code == "", false, code, "")
			continue
		}
		env := &macpv1.Envelope{
			MacpVersion: "1.0", Mode: f.Mode, MessageType: m.MessageType, MessageId: m.MessageID,
			SessionId: sessionID, Sender: m.Sender, TimestampUnixMs: t.Now(),
		}
		if env.MessageId == "" {
			env.MessageId = fmt.Sprintf("m%d", i+1)
		}
		if m.Mode != "" {
			env.Mode = m.Mode
		}
		if m.PayloadB64 != nil {
			env.Payload, err = base64.StdEncoding.DecodeString(*m.PayloadB64)
		} else {
			env.Payload, err = EncodePayload(m.PayloadType, m.Payload)
		}
		if err != nil {
			res.failf("%s: %v", step, err)
			continue
		}
		ack, err := t.Send(ctx, m.Sender, env)
		if err != nil {
			res.failf("%s: transport error: %v", step, err)
			continue
		}
		checkOutcome(&res, step, m, ack.Ok, ack.Duplicate, ack.GetError().GetCode(), ack.GetError().GetMessage())
	}
	md, err := t.GetSession(ctx, f.Initiator, sessionID)
	if err != nil {
		res.failf("GetSession: %v", err)
		return res
	}
	if want := normalizeState(f.ExpectedFinalState); want != "" && md.State.String() != want {
		res.failf("final state %s, expected %s", md.State, want)
	}
	in, ok := t.(Inspector)
	if !ok {
		if f.ExpectResolutionPresent != nil || f.ExpectedResolution != nil {
			res.Unchecked = append(res.Unchecked, "resolution (needs an in-process target)")
		}
		if f.ExpectedModeState != nil {
			res.Unchecked = append(res.Unchecked, "expected_mode_state (needs an in-process target)")
		}
		if f.VerifyReplayEquivalence != nil && *f.VerifyReplayEquivalence {
			res.Unchecked = append(res.Unchecked, "verify_replay_equivalence (needs an in-process target)")
		}
		return res
	}
	if f.ExpectResolutionPresent != nil || f.ExpectedResolution != nil {
		r, err := in.Resolution(ctx, sessionID)
		if err != nil {
			res.failf("resolution: %v", err)
		}
		present := r != nil
		if f.ExpectResolutionPresent != nil && present != *f.ExpectResolutionPresent {
			res.failf("resolution present = %v, expected %v", present, *f.ExpectResolutionPresent)
		}
		if f.ExpectedResolution != nil && present {
			got, _ := protoToMap(r)
			if diff := Subset(f.ExpectedResolution, got, "resolution"); diff != "" {
				res.failf("%s", diff)
			}
		}
	}
	if f.ExpectedModeState != nil {
		st, err := in.ModeState(ctx, sessionID)
		if err != nil {
			res.failf("mode state: %v", err)
		} else if diff := Subset(f.ExpectedModeState, JSONNormal(st), "mode_state"); diff != "" {
			res.failf("%s", diff)
		}
	}
	if err := in.CheckReplay(ctx, sessionID); err != nil {
		res.failf("replay equivalence: %v", err)
	}
	return res
}

// checkOutcome compares one step's outcome with its expectation; a
// failure names the step (message index, sender, message type), the
// expected outcome and code, and the outcome got with its code and
// message.
func checkOutcome(res *Result, step string, m Message, ok, dup bool, code, msg string) {
	got := "accept"
	switch {
	case ok && dup:
		got = "duplicate"
	case !ok:
		got = "reject " + code
		if msg != "" {
			got += " (" + msg + ")"
		}
	}
	want := m.Expect
	if m.Expect == "reject" && m.ExpectedErrorCode != "" {
		want = "reject " + m.ExpectedErrorCode
	}
	switch m.Expect {
	case "accept":
		if !ok || dup {
			res.failf("%s: expected accept, got %s", step, got)
		}
	case "duplicate":
		if !ok || !dup {
			res.failf("%s: expected duplicate, got %s", step, got)
		}
	case "reject":
		if ok || (m.ExpectedErrorCode != "" && code != m.ExpectedErrorCode) {
			res.failf("%s: expected %s, got %s", step, want, got)
		}
	}
}

// ensurePolicy registers f's inline policy on t before the transcript
// runs. A policy id already registered with the same mode, schema version
// (0 counts as 1) and rules (compared as JSON values) counts as
// registered, so fixtures sharing a policy, runs in parallel and re-runs
// against the same runtime pass; the same id with other rules fails the
// fixture (policy ids are immutable, RFC-MACP-0012 §2.3).
func ensurePolicy(ctx context.Context, f *Fixture, t Target) error {
	pd, err := f.PolicyDescriptor()
	if err != nil || pd == nil {
		return err
	}
	reg, ok := t.(PolicyRegistrar)
	if !ok {
		return fmt.Errorf("the fixture carries policy %q and this target cannot register policies", pd.PolicyId)
	}
	have, err := reg.GetPolicy(ctx, f.Initiator, pd.PolicyId)
	if err != nil {
		return fmt.Errorf("GetPolicy %q: %v", pd.PolicyId, err)
	}
	if have == nil {
		rerr := reg.RegisterPolicy(ctx, f.Initiator, pd)
		if rerr == nil {
			return nil
		}
		// Registered meanwhile (another fixture, in parallel)?
		if have, err = reg.GetPolicy(ctx, f.Initiator, pd.PolicyId); err != nil || have == nil {
			return fmt.Errorf("RegisterPolicy %q: %v", pd.PolicyId, rerr)
		}
	}
	if d := policyDiff(pd, have); d != "" {
		return fmt.Errorf("policy %q is already registered with other %s", pd.PolicyId, d)
	}
	return nil
}

// policyDiff names the first difference that matters between the wanted
// and the registered descriptor ("" when equivalent).
func policyDiff(want, have *macpv1.PolicyDescriptor) string {
	sv := func(v uint32) uint32 { return max(v, 1) }
	switch {
	case want.Mode != have.Mode:
		return fmt.Sprintf("mode (%q, fixture %q)", have.Mode, want.Mode)
	case sv(want.SchemaVersion) != sv(have.SchemaVersion):
		return fmt.Sprintf("schema_version (%d, fixture %d)", have.SchemaVersion, want.SchemaVersion)
	}
	var w, h any
	if json.Unmarshal([]byte(want.Rules), &w) != nil || json.Unmarshal([]byte(have.Rules), &h) != nil || !reflect.DeepEqual(w, h) {
		return fmt.Sprintf("rules (%s, fixture %s)", have.Rules, want.Rules)
	}
	return ""
}

// normalizeState accepts Open/Resolved/Expired and SESSION_STATE_* names.
func normalizeState(s string) string {
	if s == "" {
		return ""
	}
	if strings.HasPrefix(s, "SESSION_STATE_") {
		return s
	}
	return "SESSION_STATE_" + strings.ToUpper(s)
}

func protoToMap(m *macpv1.CommitmentPayload) (map[string]any, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(b, &out)
}

// JSONNormal normalizes a projection to JSON types (float64 numbers,
// []any, map[string]any).
func JSONNormal(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// Subset checks that want is contained in got (checklist CONF-15): object
// keys must exist and match recursively, arrays must be at least as long
// and match index-wise, scalars must be equal. It returns "" or a
// description of the first difference.
func Subset(want, got any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: expected an object, got %v", path, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: missing", path, k)
			}
			if d := Subset(wv, gv, path+"."+k); d != "" {
				return d
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) < len(w) {
			return fmt.Sprintf("%s: expected an array of at least %d, got %v", path, len(w), got)
		}
		for i := range w {
			if d := Subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
	case float64:
		g, ok := got.(float64)
		if !ok || math.Abs(g-w) > 1e-9 {
			return fmt.Sprintf("%s: expected %v, got %v", path, w, got)
		}
	default:
		if want != got {
			return fmt.Sprintf("%s: expected %v, got %v", path, want, got)
		}
	}
	return ""
}
