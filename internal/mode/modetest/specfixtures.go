package modetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/testutil"
)

// LatestConformanceDirEnv overrides where [LatestConformanceDir] looks.
const LatestConformanceDirEnv = "MACP_CONFORMANCE_LATEST_DIR"

// LatestConformanceDir returns the directory of the newest spec's
// conformance fixtures (../shared/conformance-latest relative to the
// repository root, or $MACP_CONFORMANCE_LATEST_DIR). It fails t when the
// directory holds no fixture: the fixtures are never skipped.
func LatestConformanceDir(t testing.TB) string {
	t.Helper()
	d := os.Getenv(LatestConformanceDirEnv)
	if d == "" {
		d = filepath.Join(testutil.RepoRoot(t), "..", "shared", "conformance-latest")
	}
	if m, _ := filepath.Glob(filepath.Join(d, "*.json")); len(m) == 0 {
		t.Fatalf("no latest conformance fixtures in %s (set %s)", d, LatestConformanceDirEnv)
	}
	return d
}

// SpecFixture is one transcript fixture in the newest spec format
// (schemas/conformance/schema.json): fully qualified payload_type names
// ("macp.modes.decision.v1.ProposalPayload", "macp.v1.CommitmentPayload")
// and an optional inline policy registered before SessionStart. Keys
// starting with "_" are annotations and are ignored.
type SpecFixture struct {
	Description             string               `json:"description"`
	Mode                    string               `json:"mode"`
	Initiator               string               `json:"initiator"`
	Participants            []string             `json:"participants"`
	ModeVersion             string               `json:"mode_version"`
	ConfigurationVersion    string               `json:"configuration_version"`
	PolicyVersion           string               `json:"policy_version"`
	TTLMs                   int64                `json:"ttl_ms"`
	Messages                []SpecFixtureMessage `json:"messages"`
	ExpectedFinalState      string               `json:"expected_final_state"`
	ExpectedResolution      map[string]any       `json:"expected_resolution"`
	ExpectedModeState       map[string]any       `json:"expected_mode_state"`
	ExpectResolutionPresent *bool                `json:"expect_resolution_present"`
	VerifyReplayEquivalence *bool                `json:"verify_replay_equivalence"`
	Policy                  *SpecFixturePolicy   `json:"policy"`
}

// SpecFixtureMessage is one scripted message.
type SpecFixtureMessage struct {
	Sender            string          `json:"sender"`
	MessageType       string          `json:"message_type"`
	PayloadType       string          `json:"payload_type"`
	Payload           json.RawMessage `json:"payload"`
	Expect            string          `json:"expect"`
	ExpectedErrorCode string          `json:"expected_error_code"`
}

// SpecFixturePolicy is an inline PolicyDefinition (rules as a JSON object).
type SpecFixturePolicy struct {
	PolicyID      string          `json:"policy_id"`
	Mode          string          `json:"mode"`
	Description   string          `json:"description"`
	SchemaVersion uint32          `json:"schema_version"`
	Rules         json.RawMessage `json:"rules"`
}

// Descriptor converts the inline policy to a policy.Descriptor (rules as
// compact JSON text).
func (p *SpecFixturePolicy) Descriptor() (policy.Descriptor, error) {
	var rules bytes.Buffer
	if len(p.Rules) == 0 {
		rules.WriteString("{}")
	} else if err := json.Compact(&rules, p.Rules); err != nil {
		return policy.Descriptor{}, err
	}
	return policy.Descriptor{ID: p.PolicyID, Mode: p.Mode, Description: p.Description,
		Rules: rules.String(), SchemaVersion: p.SchemaVersion}, nil
}

// ReadSpecFixture reads and decodes one fixture file.
func ReadSpecFixture(file string) (*SpecFixture, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var fx SpecFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Base(file), err)
	}
	return &fx, nil
}

// Bind returns the session binding of fx under profile: its inline policy
// (policy.Parse, then the mode's RulesValidator, and the policy's mode
// must be m's or "*") or policy.default.
func (fx *SpecFixture) Bind(m mode.Mode, profile string) (*mode.Binding, error) {
	pol := policy.MustDefault()
	if fx.Policy != nil {
		d, err := fx.Policy.Descriptor()
		if err != nil {
			return nil, err
		}
		if pol, err = policy.Parse(d); err != nil {
			return nil, err
		}
		if d.Mode != "*" && d.Mode != fx.Mode {
			return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "policy mode %q is not the session's %q", d.Mode, fx.Mode)
		}
		if v, ok := m.(mode.RulesValidator); ok {
			if err := v.ValidateRules(pol); err != nil {
				return nil, err
			}
		}
	}
	if fx.PolicyVersion != "" && fx.PolicyVersion != pol.Descriptor.ID && fx.PolicyVersion != coord.DefaultPolicyID {
		return nil, fmt.Errorf("policy_version %q names no inline policy", fx.PolicyVersion)
	}
	return &mode.Binding{
		SessionID: "conformance", Mode: fx.Mode, ModeVersion: fx.ModeVersion,
		ConfigurationVersion: fx.ConfigurationVersion, PolicyVersion: pol.Descriptor.ID, Policy: pol,
		Initiator: fx.Initiator, Participants: fx.Participants, Profile: profile,
	}, nil
}

// SpecInput encodes message i (ids "m<i+1>") as a mode Input. The April
// baseline's short payload_type names ("decision.Vote", "Commitment",
// multi_round.Contribute as raw JSON) are read too. payload_type
// is resolved in the protobuf registry by its fully qualified name (the
// gen packages of the modes register them); macp.v1.CommitmentPayload
// becomes a Commitment input. A bytes field written as [] is empty and one
// written as a string carries that string's UTF-8 bytes (CONF-12).
func (fx *SpecFixture) SpecInput(i int) (Input, error) {
	fm := fx.Messages[i]
	in := Input{Msg: mode.Message{Type: fm.MessageType, ID: "m" + strconv.Itoa(i+1), Sender: fm.Sender}}
	name := fm.PayloadType
	april := !strings.HasPrefix(name, "macp.")
	if april {
		// The April baseline's short names (CONF-11): "Commitment",
		// "<mode>.<Type>", and multi_round.Contribute as raw UTF-8 JSON.
		switch {
		case name == "Commitment":
			name = "macp.v1.CommitmentPayload"
		case name == "multi_round.Contribute":
			var compact bytes.Buffer
			if err := json.Compact(&compact, fm.Payload); err != nil {
				return in, err
			}
			in.Msg.Payload = compact.Bytes()
			return in, nil
		default:
			pkg, typ, _ := strings.Cut(name, ".")
			name = "macp.modes." + pkg + ".v1." + typ + "Payload"
		}
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return in, fmt.Errorf("message %d: payload_type %q: %v", i+1, fm.PayloadType, err)
	}
	msg := mt.New().Interface()
	if err := decodeFixtureJSON(msg, fm.Payload); err != nil {
		return in, fmt.Errorf("message %d: %s payload: %v", i+1, fm.PayloadType, err)
	}
	if in.Msg.Payload, err = proto.Marshal(msg); err != nil {
		return in, err
	}
	if c, ok := msg.(*macpv1.CommitmentPayload); ok {
		if april && !bytes.Contains(fm.Payload, []byte(`"outcome_positive"`)) {
			c.OutcomePositive = true // CONF-11: absent means true
			in.Msg.Payload, _ = proto.Marshal(c)
		}
		in.Commitment = c
	}
	return in, nil
}

func decodeFixtureJSON(m proto.Message, payload json.RawMessage) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return err
	}
	fields := m.ProtoReflect().Descriptor().Fields()
	for k, v := range obj {
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k))
		}
		if fd == nil || fd.Kind() != protoreflect.BytesKind {
			continue
		}
		v = bytes.TrimSpace(v)
		if bytes.HasPrefix(v, []byte("[")) {
			delete(obj, k)
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			obj[k], _ = json.Marshal([]byte(s)) // base64, as protojson expects
		}
	}
	clean, _ := json.Marshal(obj)
	return protojson.Unmarshal(clean, m)
}

// SpecResult is what running a fixture produced.
type SpecResult struct {
	Binding  *mode.Binding
	State    mode.State
	Accepted []Input
	Resolved *macpv1.CommitmentPayload
	// Failures lists every expectation the run did not meet (empty: pass).
	Failures []string
}

// RunSpecFixture runs fx against m at the mode level under profile and
// returns every unmet expectation. The core's part of a Commitment
// (commitment authority) is emulated with policy.MayCommit, and a message
// after the session resolved is refused SESSION_NOT_OPEN as the core does;
// everything else is the mode's. Checked: each message's accept/reject and
// expected_error_code, the final state, expect_resolution_present,
// expected_resolution (against the accepted Commitment) and
// expected_mode_state (a subset of Project()), and that the accepted
// history passes [Check] (determinism, replay equivalence, invariants).
func RunSpecFixture(m mode.Mode, fx *SpecFixture, profile string) *SpecResult {
	res := &SpecResult{}
	fail := func(format string, args ...any) { res.Failures = append(res.Failures, fmt.Sprintf(format, args...)) }
	if fx.Mode != m.Descriptor().GetMode() {
		fail("fixture mode %q, mode %q", fx.Mode, m.Descriptor().GetMode())
		return res
	}
	b, err := fx.Bind(m, profile)
	if err != nil {
		fail("binding: %v", err)
		return res
	}
	res.Binding = b
	st, err := m.Start(b)
	if err != nil {
		fail("Start: %v", err)
		return res
	}
	res.State = st
	for i, fm := range fx.Messages {
		in, err := fx.SpecInput(i)
		if err != nil {
			fail("%v", err)
			return res
		}
		switch {
		case res.Resolved != nil:
			err = coord.Errorf(coord.CodeSessionNotOpen, "core: session resolved")
		case in.Commitment != nil && !b.Policy.MayCommit(fm.Sender, b.Initiator, b.Participants):
			err = coord.Errorf(coord.CodeForbidden, "core: commitment authority")
		case in.Commitment != nil:
			err = st.Commit(b, &in.Msg, in.Commitment)
		default:
			err = st.Step(b, &in.Msg)
		}
		switch fm.Expect {
		case "accept":
			if err != nil {
				fail("message %d (%s from %s): rejected (%v), want accept", i+1, fm.MessageType, fm.Sender, err)
				continue
			}
			res.Accepted = append(res.Accepted, in)
			if in.Commitment != nil {
				res.Resolved = in.Commitment
			}
		case "reject":
			if err == nil {
				fail("message %d (%s from %s): accepted, want reject %s", i+1, fm.MessageType, fm.Sender, fm.ExpectedErrorCode)
				if in.Commitment != nil {
					res.Resolved = in.Commitment
				}
				continue
			}
			if fm.ExpectedErrorCode != "" && coord.CodeOf(err) != coord.Code(fm.ExpectedErrorCode) {
				fail("message %d (%s from %s): code %s (%v), want %s", i+1, fm.MessageType, fm.Sender, coord.CodeOf(err), err, fm.ExpectedErrorCode)
			}
		default:
			fail("message %d: expect %q", i+1, fm.Expect)
		}
	}
	final := "Open"
	if res.Resolved != nil {
		final = "Resolved"
	}
	if fx.ExpectedFinalState != final {
		fail("final state %s, want %s", final, fx.ExpectedFinalState)
	}
	if fx.ExpectResolutionPresent != nil && *fx.ExpectResolutionPresent != (res.Resolved != nil) {
		fail("resolution present = %v, want %v", res.Resolved != nil, *fx.ExpectResolutionPresent)
	}
	if fx.ExpectedResolution != nil {
		if res.Resolved == nil {
			fail("expected_resolution given but nothing resolved")
		} else {
			got := map[string]any{}
			j, _ := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(res.Resolved)
			_ = json.Unmarshal(j, &got)
			if err := MatchSubset(got, fx.ExpectedResolution); err != nil {
				fail("expected_resolution: %v", err)
			}
		}
	}
	if fx.ExpectedModeState != nil {
		if err := MatchSubset(st.Project(), fx.ExpectedModeState); err != nil {
			fail("expected_mode_state: %v", err)
		}
	}
	if _, err := Check(m, b, res.Accepted); err != nil {
		fail("invariants of the accepted history: %v", err)
	}
	return res
}

// RunSpecFixtures runs every fixture of dir matching glob (one subtest
// each) with the mode modes returns for the fixture's mode id, under
// profile, and returns how many passed. It fails t when nothing matches
// or a fixture's mode is unknown (never skips).
func RunSpecFixtures(t *testing.T, dir, glob, profile string, modes func(id string) mode.Mode) (passed, total int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, glob))
	for _, file := range files {
		name := filepath.Base(file)
		if name == "schema.json" || strings.HasPrefix(name, "vector-") {
			continue
		}
		total++
		t.Run(name, func(t *testing.T) {
			fx, err := ReadSpecFixture(file)
			if err != nil {
				t.Fatal(err)
			}
			m := modes(fx.Mode)
			if m == nil {
				t.Fatalf("no mode %q", fx.Mode)
			}
			res := RunSpecFixture(m, fx, profile)
			for _, f := range res.Failures {
				t.Error(f)
			}
			if len(res.Failures) == 0 {
				passed++
			}
		})
	}
	if total == 0 {
		t.Fatalf("no fixture matches %s in %s", glob, dir)
	}
	return passed, total
}
