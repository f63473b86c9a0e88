package conformance_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	multi_roundv1 "github.com/macpd/macpd/gen/macp/modes/multi_round/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/conformance"
	"github.com/macpd/macpd/internal/testutil"
	"google.golang.org/protobuf/proto"
)

const latestFixture = `{
  "_comment": "annotation",
  "description": "d",
  "mode": "macp.mode.decision.v1",
  "initiator": "agent://o",
  "participants": ["agent://o", "agent://a"],
  "mode_version": "1.0.0",
  "configuration_version": "cfg-1",
  "policy": {"policy_id": "policy.t", "mode": "macp.mode.decision.v1", "schema_version": 2,
             "description": "x", "rules": {"voting": {"algorithm": "majority"}}},
  "policy_version": "policy.t",
  "ttl_ms": 60000,
  "messages": [
    {"_comment": "c", "sender": "agent://o", "message_type": "Proposal",
     "payload_type": "macp.modes.decision.v1.ProposalPayload",
     "payload": {"proposal_id": "p1", "option": "go"}, "expect": "accept"},
    {"sender": "agent://a", "message_type": "Vote",
     "payload_type": "macp.modes.decision.v1.VotePayload",
     "payload": {"proposal_id": "p1", "vote": "APPROVE"}, "expect": "reject", "expected_error_code": "FORBIDDEN"}
  ],
  "expected_final_state": "Open"
}`

const aprilFixture = `{
  "mode": "macp.mode.decision.v1", "initiator": "agent://o", "participants": ["agent://o"],
  "mode_version": "1.0.0", "configuration_version": "cfg-1", "policy_version": "", "ttl_ms": 60000,
  "messages": [
    {"sender": "agent://o", "message_type": "Proposal", "payload_type": "decision.Proposal",
     "payload": {"proposal_id": "p1", "option": "go"}, "expect": "accept", "message_id": "x1"},
    {"sender": "agent://o", "message_type": "Proposal", "payload_type": "decision.Proposal",
     "payload": {"proposal_id": "p1", "option": "go"}, "expect": "duplicate", "message_id": "x1"}
  ],
  "expected_final_state": "Open"
}`

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadDetectsFormat: each file's format is detected on its own, a
// directory may mix them, and its schema.json is not a fixture.
func TestLoadDetectsFormat(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a_latest.json", latestFixture)
	writeFile(t, dir, "b_april.json", aprilFixture)
	writeFile(t, dir, "schema.json", `{"$schema": "x", "type": "object"}`)
	fs, err := conformance.LoadDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 {
		t.Fatalf("loaded %d fixtures, expected 2 (schema.json skipped)", len(fs))
	}
	if fs[0].Name != "a_latest" || fs[0].Format != conformance.FormatLatest {
		t.Errorf("%s: format %s, expected latest", fs[0].Name, fs[0].Format)
	}
	if fs[1].Name != "b_april" || fs[1].Format != conformance.FormatApril {
		t.Errorf("%s: format %s, expected april", fs[1].Name, fs[1].Format)
	}
	pd, err := fs[0].PolicyDescriptor()
	if err != nil {
		t.Fatal(err)
	}
	if pd.PolicyId != "policy.t" || pd.SchemaVersion != 2 || pd.Description != "x" ||
		pd.Rules != `{"voting":{"algorithm":"majority"}}` || pd.Mode != "macp.mode.decision.v1" {
		t.Errorf("policy descriptor %v", pd)
	}
}

// TestLatestFormatStrict: the latest format is held to schema.json.
func TestLatestFormatStrict(t *testing.T) {
	cases := map[string]struct{ old, new, want string }{
		"unknown top key":    {`"description": "d",`, `"description": "d", "start_extra": {},`, `unknown key "start_extra"`},
		"macpd extension":    {`"expect": "accept"}`, `"expect": "accept", "message_id": "m"}`, `message 1: unknown key "message_id"`},
		"duplicate expect":   {`"expect": "accept"}`, `"expect": "duplicate"}`, `expect "duplicate" must be accept or reject`},
		"short payload type": {`"macp.modes.decision.v1.VotePayload"`, `"decision.Vote"`, `message 2: payload_type "decision.Vote" is not a fully-qualified`},
		"final state":        {`"expected_final_state": "Open"`, `"expected_final_state": "Closed"`, `expected_final_state "Closed"`},
		"missing required":   {`"configuration_version": "cfg-1",`, ``, `"configuration_version" is required`},
		"policy version":     {`"policy_version": "policy.t",`, `"policy_version": "policy.other",`, `policy_version "policy.other" must name the inline policy "policy.t"`},
		"policy key":         {`"description": "x",`, `"descr": "x",`, `policy.descr: unknown key`},
		"payload not object": {`"payload": {"proposal_id": "p1", "vote": "APPROVE"}`, `"payload": "x"`, `message 2: payload must be a JSON object`},
		"mode id": {`"mode": "macp.mode.decision.v1",
  "initiator"`, `"mode": "decision",
  "initiator"`, `mode "decision" is not a mode identifier`},
		"annotation not string": {`"_comment": "annotation",`, `"_comment": "annotation", "_x": 1, "y": 2,`, `unknown key "y"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(latestFixture, c.old) {
				t.Fatalf("test bug: %q not in the fixture", c.old)
			}
			p := writeFile(t, t.TempDir(), "f.json", strings.Replace(latestFixture, c.old, c.new, 1))
			_, err := conformance.Load(p)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v, expected an error containing %q", err, c.want)
			}
		})
	}
	if _, err := conformance.Load(writeFile(t, t.TempDir(), "ok.json", latestFixture)); err != nil {
		t.Errorf("the valid fixture: %v", err)
	}
}

// TestSpecPayloadsEncode: every message of the spec's fixture sets, both
// formats, encodes to its payload type.
func TestSpecPayloadsEncode(t *testing.T) {
	for _, dir := range []string{testutil.ConformanceDir(t), testutil.ConformanceLatestDir(t)} {
		fs, err := conformance.LoadDirs(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fs {
			for i, m := range f.Messages {
				if _, err := conformance.EncodePayload(m.PayloadType, m.Payload); err != nil {
					t.Errorf("%s message %d: %v", f.Name, i+1, err)
				}
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s: no messages", dir)
		}
	}
}

func TestEncodeQualified(t *testing.T) {
	b, err := conformance.EncodePayload("macp.v1.CommitmentPayload", json.RawMessage(`{"action": "decision.approved"}`))
	if err != nil {
		t.Fatal(err)
	}
	var c macpv1.CommitmentPayload
	if err := proto.Unmarshal(b, &c); err != nil || c.Action != "decision.approved" || !c.OutcomePositive {
		t.Errorf("commitment %v (%v): expected action set and outcome_positive defaulted to true", &c, err)
	}
	b, err = conformance.EncodePayload("macp.v1.CommitmentPayload", json.RawMessage(`{"outcome_positive": false,
		"supersedes": {"session_id": "s", "commitment_hash": "h"}}`))
	if err != nil {
		t.Fatal(err)
	}
	c.Reset()
	if err := proto.Unmarshal(b, &c); err != nil || c.OutcomePositive || c.GetSupersedes().GetSessionId() != "s" {
		t.Errorf("commitment %v (%v)", &c, err)
	}
	b, err = conformance.EncodePayload("macp.modes.multi_round.v1.ContributePayload", json.RawMessage(`{"value": "option_a"}`))
	if err != nil {
		t.Fatal(err)
	}
	var mr multi_roundv1.ContributePayload
	if err := proto.Unmarshal(b, &mr); err != nil || mr.Value != "option_a" || b[0] == '{' {
		t.Errorf("multi_round contribute %q: expected protobuf with value option_a (%v)", b, err)
	}
	if _, err := conformance.EncodePayload("macp.modes.decision.v1.NoSuchPayload", json.RawMessage(`{}`)); err == nil {
		t.Error("an unknown fully-qualified type encoded")
	}
	if _, err := conformance.EncodePayload("macp.modes.decision.v1.VotePayload", json.RawMessage(`{"bogus": 1}`)); err == nil {
		t.Error("an unknown payload field encoded")
	}
}

// fake is a scripted Target and PolicyRegistrar.
type fake struct {
	policies   map[string]*macpv1.PolicyDescriptor
	registered int
	reject     map[string]*macpv1.MACPError // message_id -> refusal
	state      macpv1.SessionState
}

func (f *fake) Send(_ context.Context, _ string, env *macpv1.Envelope) (*macpv1.Ack, error) {
	if e, ok := f.reject[env.MessageId]; ok {
		return &macpv1.Ack{Ok: false, Error: e}, nil
	}
	return &macpv1.Ack{Ok: true}, nil
}
func (f *fake) Cancel(context.Context, string, string, string) (string, error) { return "", nil }
func (f *fake) GetSession(context.Context, string, string) (*macpv1.SessionMetadata, error) {
	return &macpv1.SessionMetadata{State: f.state}, nil
}
func (f *fake) Wait(context.Context, time.Duration) error { return nil }
func (f *fake) Now() int64                                { return 1 }
func (f *fake) RegisterPolicy(_ context.Context, _ string, pd *macpv1.PolicyDescriptor) error {
	if _, ok := f.policies[pd.PolicyId]; ok {
		return &testError{"INVALID_POLICY_DEFINITION: already registered"}
	}
	f.policies[pd.PolicyId] = pd
	f.registered++
	return nil
}
func (f *fake) GetPolicy(_ context.Context, _, id string) (*macpv1.PolicyDescriptor, error) {
	return f.policies[id], nil
}

type testError struct{ s string }

func (e *testError) Error() string { return e.s }

func loadString(t *testing.T, body string) *conformance.Fixture {
	t.Helper()
	f, err := conformance.Load(writeFile(t, t.TempDir(), "fx.json", body))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestInlinePolicy: the policy is registered before SessionStart; a run
// that finds it registered with the same rules passes without registering
// again; the same id with other rules fails the fixture.
func TestInlinePolicy(t *testing.T) {
	ctx := context.Background()
	tg := &fake{policies: map[string]*macpv1.PolicyDescriptor{}, reject: map[string]*macpv1.MACPError{
		"m2": {Code: "FORBIDDEN", Message: "not a participant"},
	}, state: macpv1.SessionState_SESSION_STATE_OPEN}
	f := loadString(t, latestFixture)
	for run := 1; run <= 2; run++ {
		if res := conformance.Run(ctx, f, tg, "s"); !res.Passed() {
			t.Fatalf("run %d: %q", run, res.Failures)
		}
	}
	if tg.registered != 1 {
		t.Errorf("registered %d times, expected once", tg.registered)
	}
	// Same rules written differently (whitespace, key order): the same policy.
	tg.policies["policy.t"].Rules = `{ "voting" : { "algorithm" : "majority" } }`
	if res := conformance.Run(ctx, f, tg, "s"); !res.Passed() {
		t.Errorf("equivalent rules: %q", res.Failures)
	}
	other := loadString(t, strings.Replace(latestFixture, `"majority"`, `"unanimous"`, 1))
	res := conformance.Run(ctx, other, tg, "s")
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0], `policy "policy.t" is already registered with other rules`) {
		t.Errorf("conflicting policy: %q", res.Failures)
	}
	plain := &struct{ conformance.Target }{tg} // no PolicyRegistrar
	res = conformance.Run(ctx, f, plain, "s")
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0], "cannot register policies") {
		t.Errorf("target without a registry: %q", res.Failures)
	}
}

// TestFailureMessages: a failure names the message (1-based index, sender,
// type), the expected outcome and code, and what came back.
func TestFailureMessages(t *testing.T) {
	ctx := context.Background()
	f := loadString(t, latestFixture)
	tg := &fake{policies: map[string]*macpv1.PolicyDescriptor{}, reject: map[string]*macpv1.MACPError{
		"m1": {Code: "INVALID_ENVELOPE", Message: "bad proposal"},
	}, state: macpv1.SessionState_SESSION_STATE_RESOLVED}
	res := conformance.Run(ctx, f, tg, "s")
	want := []string{
		"message 1 (agent://o Proposal): expected accept, got reject INVALID_ENVELOPE (bad proposal)",
		"message 2 (agent://a Vote): expected reject FORBIDDEN, got accept",
		"final state SESSION_STATE_RESOLVED, expected SESSION_STATE_OPEN",
	}
	if strings.Join(res.Failures, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nexpected:\n%s", strings.Join(res.Failures, "\n"), strings.Join(want, "\n"))
	}
	tg.reject = map[string]*macpv1.MACPError{"m2": {Code: "SESSION_NOT_OPEN", Message: "closed"}}
	tg.state = macpv1.SessionState_SESSION_STATE_OPEN
	res = conformance.Run(ctx, f, tg, "s")
	if len(res.Failures) != 1 || res.Failures[0] != "message 2 (agent://a Vote): expected reject FORBIDDEN, got reject SESSION_NOT_OPEN (closed)" {
		t.Errorf("wrong code: %q", res.Failures)
	}
	// A black-box target cannot check resolution or mode state: listed, not passed.
	withState := loadString(t, strings.Replace(latestFixture, `"expected_final_state": "Open"`,
		`"expected_final_state": "Open", "expected_mode_state": {"phase": "Proposal"}`, 1))
	tg.reject = map[string]*macpv1.MACPError{"m2": {Code: "FORBIDDEN"}}
	res = conformance.Run(ctx, withState, tg, "s")
	if !res.Passed() || len(res.Unchecked) != 1 || !strings.HasPrefix(res.Unchecked[0], "expected_mode_state") {
		t.Errorf("unchecked: %q failures %q", res.Unchecked, res.Failures)
	}
}
