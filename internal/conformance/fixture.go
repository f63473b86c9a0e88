package conformance

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/multi_round/v1" // registers macp.modes.multi_round.v1.*
	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Fixture formats, detected per file by Load.
const (
	// FormatApril is the spec's format at 17ca7a1 (short payload_type names
	// such as "decision.Proposal", "Commitment") with macpd's extensions.
	FormatApril = "april"
	// FormatLatest is the spec's newest format (schemas/conformance/
	// schema.json): fully-qualified payload_type names, optional inline
	// policy, expect accept|reject only, no extensions.
	FormatLatest = "latest"
)

// Fixture is one conformance scenario.
type Fixture struct {
	Name string `json:"-"`
	// Format is FormatApril or FormatLatest (detected by Load).
	Format                  string          `json:"-"`
	Description             string          `json:"description,omitempty"`
	Mode                    string          `json:"mode"`
	Initiator               string          `json:"initiator"`
	Participants            []string        `json:"participants"`
	ModeVersion             string          `json:"mode_version"`
	ConfigurationVersion    string          `json:"configuration_version"`
	PolicyVersion           string          `json:"policy_version"`
	TTLMs                   int64           `json:"ttl_ms"`
	StartExpect             string          `json:"start_expect,omitempty"`
	StartExpectedErrorCode  string          `json:"start_expected_error_code,omitempty"`
	StartExtra              json.RawMessage `json:"start_extra,omitempty"`
	Messages                []Message       `json:"messages"`
	ExpectedFinalState      string          `json:"expected_final_state"`
	ExpectResolutionPresent *bool           `json:"expect_resolution_present,omitempty"`
	ExpectedResolution      map[string]any  `json:"expected_resolution,omitempty"`
	ExpectedModeState       map[string]any  `json:"expected_mode_state,omitempty"`
	// Policy is an inline PolicyDescriptor (policy_id, mode, description,
	// schema_version, rules as a JSON object) that Run registers before
	// SessionStart (FormatLatest).
	Policy json.RawMessage `json:"policy,omitempty"`
	// VerifyReplayEquivalence asks for the replay check (FormatLatest);
	// in-process targets check replay for every fixture anyway.
	VerifyReplayEquivalence *bool `json:"verify_replay_equivalence,omitempty"`
}

// Message is one step of a fixture.
type Message struct {
	Sender            string          `json:"sender"`
	MessageType       string          `json:"message_type"`
	PayloadType       string          `json:"payload_type"`
	Payload           json.RawMessage `json:"payload"`
	PayloadB64        *string         `json:"payload_b64,omitempty"`
	Expect            string          `json:"expect"`
	ExpectedErrorCode string          `json:"expected_error_code,omitempty"`
	MessageID         string          `json:"message_id,omitempty"`
	Mode              string          `json:"mode,omitempty"`
	Action            string          `json:"action,omitempty"` // "", "cancel", "wait"
	Reason            string          `json:"reason,omitempty"`
	WaitMs            int64           `json:"wait_ms,omitempty"`
}

// Load reads one fixture file. A file is in FormatLatest when any message
// names a fully-qualified payload_type (macp.v1.X or
// macp.modes.<mode>.v<n>.XPayload); it is then checked against the
// spec's schema.json (required keys, no keys beyond the schema's except
// "_"-prefixed annotations, expect accept|reject, every payload_type
// fully qualified, the final-state enum, the inline policy's shape).
// Otherwise it is in FormatApril and macpd's extensions are allowed.
func Load(path string) (*Fixture, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f Fixture
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Name = strings.TrimSuffix(filepath.Base(path), ".json")
	f.Format = FormatApril
	for _, m := range f.Messages {
		if IsQualifiedPayloadType(m.PayloadType) {
			f.Format = FormatLatest
			break
		}
	}
	if f.Format == FormatLatest {
		if err := checkLatest(b, &f); err != nil {
			return nil, fmt.Errorf("%s (latest format): %w", path, err)
		}
		return &f, nil
	}
	if f.Mode == "" || f.Initiator == "" {
		return nil, fmt.Errorf("%s: mode and initiator are required", path)
	}
	if len(f.Policy) > 0 {
		if _, err := f.PolicyDescriptor(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	for i, m := range f.Messages {
		switch m.Action {
		case "", "cancel", "wait":
		default:
			return nil, fmt.Errorf("%s: message %d: unknown action %q", path, i+1, m.Action)
		}
		if m.Action == "" {
			switch m.Expect {
			case "accept", "reject", "duplicate":
			default:
				return nil, fmt.Errorf("%s: message %d: expect must be accept, reject or duplicate", path, i+1)
			}
		}
	}
	return &f, nil
}

// Keys of the latest format (schema.json); keys starting with "_" are
// annotations and ignored.
var (
	latestTopKeys = map[string]bool{
		"description": true, "mode": true, "initiator": true, "participants": true, "mode_version": true,
		"configuration_version": true, "policy_version": true, "ttl_ms": true, "messages": true,
		"expected_final_state": true, "expected_resolution": true, "expected_mode_state": true,
		"expect_resolution_present": true, "verify_replay_equivalence": true, "policy": true,
	}
	latestTopRequired = []string{"mode", "initiator", "participants", "mode_version",
		"configuration_version", "ttl_ms", "messages", "expected_final_state"}
	latestMsgKeys = map[string]bool{
		"sender": true, "message_type": true, "payload_type": true, "payload": true,
		"expect": true, "expected_error_code": true,
	}
	latestMsgRequired = []string{"sender", "message_type", "payload_type", "payload", "expect"}
	latestFinalStates = map[string]bool{"Open": true, "Suspended": true, "Resolved": true, "Expired": true, "Cancelled": true}
	modeIDPattern     = regexp.MustCompile(`^(macp\.mode\.[a-z_]+\.v\d+|ext\.[a-z_.]+\.v\d+)$`)
	qualifiedPattern  = regexp.MustCompile(`^(macp\.v1\.[A-Za-z]+|macp\.modes\.[a-z_]+\.v\d+\.[A-Za-z]+Payload)$`)
)

// IsQualifiedPayloadType reports whether name is a fully-qualified
// payload_type of the latest fixture format (schema.json's pattern).
func IsQualifiedPayloadType(name string) bool { return qualifiedPattern.MatchString(name) }

// checkLatest validates a latest-format fixture against schema.json.
func checkLatest(raw []byte, f *Fixture) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	if err := checkKeys(top, latestTopKeys, latestTopRequired, "fixture"); err != nil {
		return err
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	if len(msgs) == 0 {
		return errors.New("messages: at least one is required")
	}
	if !modeIDPattern.MatchString(f.Mode) {
		return fmt.Errorf("mode %q is not a mode identifier (macp.mode.<name>.v<n> or ext.<name>.v<n>)", f.Mode)
	}
	// schema.json says participants has minItems 1, but the spec's own
	// decision_zero_participants.json declares none (its point): an empty
	// list is accepted, empty ids are not.
	if f.Initiator == "" || slices.Contains(f.Participants, "") {
		return errors.New("initiator and every participant must be non-empty")
	}
	if f.ModeVersion == "" || f.ConfigurationVersion == "" {
		return errors.New("mode_version and configuration_version must be non-empty")
	}
	if f.TTLMs < 1 {
		return fmt.Errorf("ttl_ms %d: must be at least 1", f.TTLMs)
	}
	if !latestFinalStates[f.ExpectedFinalState] {
		return fmt.Errorf("expected_final_state %q: must be Open, Suspended, Resolved, Expired or Cancelled", f.ExpectedFinalState)
	}
	for i, m := range msgs {
		what := fmt.Sprintf("message %d", i+1)
		if err := checkKeys(m, latestMsgKeys, latestMsgRequired, what); err != nil {
			return err
		}
		fm := f.Messages[i]
		if fm.Sender == "" || fm.MessageType == "" {
			return fmt.Errorf("%s: sender and message_type must be non-empty", what)
		}
		if !IsQualifiedPayloadType(fm.PayloadType) {
			return fmt.Errorf("%s: payload_type %q is not a fully-qualified message name", what, fm.PayloadType)
		}
		if fm.Expect != "accept" && fm.Expect != "reject" {
			return fmt.Errorf("%s: expect %q must be accept or reject", what, fm.Expect)
		}
		if p := strings.TrimSpace(string(fm.Payload)); !strings.HasPrefix(p, "{") {
			return fmt.Errorf("%s: payload must be a JSON object", what)
		}
	}
	if len(f.Policy) > 0 {
		if _, err := f.PolicyDescriptor(); err != nil {
			return err
		}
	}
	return nil
}

// checkKeys rejects keys outside allowed (except "_" annotations) and
// missing required keys.
func checkKeys(obj map[string]json.RawMessage, allowed map[string]bool, required []string, what string) error {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !allowed[k] && !strings.HasPrefix(k, "_") {
			return fmt.Errorf("%s: unknown key %q", what, k)
		}
	}
	for _, k := range required {
		if _, ok := obj[k]; !ok {
			return fmt.Errorf("%s: %q is required", what, k)
		}
	}
	return nil
}

// PolicyDescriptor returns the fixture's inline policy as the descriptor
// to register: policy_id, mode, description and schema_version as given,
// rules (a JSON object, or a string holding JSON text) as compact JSON
// text. It returns nil, nil when the fixture has no policy.
func (f *Fixture) PolicyDescriptor() (*macpv1.PolicyDescriptor, error) {
	if len(f.Policy) == 0 || string(f.Policy) == "null" {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(f.Policy, &obj); err != nil {
		return nil, fmt.Errorf("policy: must be a JSON object: %w", err)
	}
	pd := &macpv1.PolicyDescriptor{}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		var err error
		switch k {
		case "policy_id":
			err = json.Unmarshal(v, &pd.PolicyId)
		case "mode":
			err = json.Unmarshal(v, &pd.Mode)
		case "description":
			err = json.Unmarshal(v, &pd.Description)
		case "schema_version":
			err = json.Unmarshal(v, &pd.SchemaVersion)
		case "rules":
			var text string
			if json.Unmarshal(v, &text) == nil {
				pd.Rules = text
				break
			}
			var buf bytes.Buffer
			if err = json.Compact(&buf, v); err == nil {
				pd.Rules = buf.String()
			}
		default:
			if !strings.HasPrefix(k, "_") {
				err = errors.New("unknown key")
			}
		}
		if err != nil {
			return nil, fmt.Errorf("policy.%s: %v", k, err)
		}
	}
	if pd.PolicyId == "" || pd.Mode == "" {
		return nil, errors.New("policy: policy_id and mode are required")
	}
	if f.PolicyVersion != pd.PolicyId {
		return nil, fmt.Errorf("policy: policy_version %q must name the inline policy %q", f.PolicyVersion, pd.PolicyId)
	}
	return pd, nil
}

// IsSchemaFile reports whether path names a JSON Schema beside the
// fixtures (schema.json, *.schema.json, *-schema.json) rather than a
// fixture; LoadDirs skips those in directories.
func IsSchemaFile(path string) bool {
	b := filepath.Base(path)
	return b == "schema.json" || strings.HasSuffix(b, ".schema.json") || strings.HasSuffix(b, "-schema.json")
}

// LoadDirs reads every *.json fixture in the given files or directories
// (each file in the format Load detects, so directories of either format
// or both may be mixed), sorted by path within each directory; a
// directory's schema files are skipped (IsSchemaFile).
func LoadDirs(paths ...string) ([]*Fixture, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		m, err := filepath.Glob(filepath.Join(p, "*.json"))
		if err != nil {
			return nil, err
		}
		slices.Sort(m)
		for _, f := range m {
			if !IsSchemaFile(f) {
				files = append(files, f)
			}
		}
	}
	out := make([]*Fixture, 0, len(files))
	for _, f := range files {
		fx, err := Load(f)
		if err != nil {
			return nil, err
		}
		out = append(out, fx)
	}
	return out, nil
}

// payloadTypes maps a fixture payload_type to its message.
var payloadTypes = map[string]func() proto.Message{
	"Commitment":          func() proto.Message { return &macpv1.CommitmentPayload{} },
	"SessionStart":        func() proto.Message { return &macpv1.SessionStartPayload{} },
	"Signal":              func() proto.Message { return &macpv1.SignalPayload{} },
	"Progress":            func() proto.Message { return &macpv1.ProgressPayload{} },
	"decision.Proposal":   func() proto.Message { return &decisionv1.ProposalPayload{} },
	"decision.Evaluation": func() proto.Message { return &decisionv1.EvaluationPayload{} },
	"decision.Objection":  func() proto.Message { return &decisionv1.ObjectionPayload{} },
	"decision.Vote":       func() proto.Message { return &decisionv1.VotePayload{} },
	"proposal.Proposal":   func() proto.Message { return &proposalv1.ProposalPayload{} },
	"proposal.CounterProposal": func() proto.Message {
		return &proposalv1.CounterProposalPayload{}
	},
	"proposal.Accept":        func() proto.Message { return &proposalv1.AcceptPayload{} },
	"proposal.Reject":        func() proto.Message { return &proposalv1.RejectPayload{} },
	"proposal.Withdraw":      func() proto.Message { return &proposalv1.WithdrawPayload{} },
	"task.TaskRequest":       func() proto.Message { return &taskv1.TaskRequestPayload{} },
	"task.TaskAccept":        func() proto.Message { return &taskv1.TaskAcceptPayload{} },
	"task.TaskReject":        func() proto.Message { return &taskv1.TaskRejectPayload{} },
	"task.TaskUpdate":        func() proto.Message { return &taskv1.TaskUpdatePayload{} },
	"task.TaskComplete":      func() proto.Message { return &taskv1.TaskCompletePayload{} },
	"task.TaskFail":          func() proto.Message { return &taskv1.TaskFailPayload{} },
	"handoff.HandoffOffer":   func() proto.Message { return &handoffv1.HandoffOfferPayload{} },
	"handoff.HandoffContext": func() proto.Message { return &handoffv1.HandoffContextPayload{} },
	"handoff.HandoffAccept":  func() proto.Message { return &handoffv1.HandoffAcceptPayload{} },
	"handoff.HandoffDecline": func() proto.Message { return &handoffv1.HandoffDeclinePayload{} },
	"quorum.ApprovalRequest": func() proto.Message { return &quorumv1.ApprovalRequestPayload{} },
	"quorum.Approve":         func() proto.Message { return &quorumv1.ApprovePayload{} },
	"quorum.Reject":          func() proto.Message { return &quorumv1.RejectPayload{} },
	"quorum.Abstain":         func() proto.Message { return &quorumv1.AbstainPayload{} },
}

// EncodePayload turns a fixture payload into envelope payload bytes
// (checklist CONF-11/12): the proto named by payloadType, from JSON with
// proto field names; bytes fields may be given as a UTF-8 string or an
// array of byte values; a Commitment without outcome_positive is positive
// (as in the reference runtime's harness). payloadType is either a
// fully-qualified message name (latest format: any message of the macp.v1
// and macp.modes.* packages, macp.modes.multi_round.v1.ContributePayload
// included, encoded as protobuf) or an April short name (multi_round.Contribute
// and "json." types are the JSON itself).
func EncodePayload(payloadType string, raw json.RawMessage) ([]byte, error) {
	if payloadType == "multi_round.Contribute" || strings.HasPrefix(payloadType, "json.") {
		return []byte(raw), nil
	}
	var m proto.Message
	if IsQualifiedPayloadType(payloadType) {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(payloadType))
		if err != nil {
			return nil, fmt.Errorf("unknown payload_type %q (no such message in macp-proto)", payloadType)
		}
		m = mt.New().Interface()
	} else {
		newMsg, ok := payloadTypes[payloadType]
		if !ok {
			return nil, fmt.Errorf("unknown payload_type %q", payloadType)
		}
		m = newMsg()
	}
	var obj map[string]any
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
	}
	if obj == nil {
		obj = map[string]any{}
	}
	if payloadType == "Commitment" || payloadType == "macp.v1.CommitmentPayload" {
		if _, set := obj["outcome_positive"]; !set {
			obj["outcome_positive"] = true
		}
	}
	if err := normalizeBytes(m.ProtoReflect().Descriptor(), obj); err != nil {
		return nil, err
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("payload for %s: %w", payloadType, err)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// normalizeBytes rewrites bytes fields given as strings (UTF-8) or arrays
// of numbers into protojson's base64 form, recursively.
func normalizeBytes(md protoreflect.MessageDescriptor, obj map[string]any) error {
	for k, v := range obj {
		fd := md.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			fd = md.Fields().ByJSONName(k)
		}
		if fd == nil {
			continue
		}
		switch {
		case fd.Kind() == protoreflect.BytesKind && !fd.IsList() && !fd.IsMap():
			switch tv := v.(type) {
			case string:
				obj[k] = base64.StdEncoding.EncodeToString([]byte(tv))
			case []any:
				buf := make([]byte, len(tv))
				for i, e := range tv {
					n, ok := e.(float64)
					if !ok || n < 0 || n > 255 {
						return fmt.Errorf("field %s: byte array values must be 0..255", k)
					}
					buf[i] = byte(n)
				}
				obj[k] = base64.StdEncoding.EncodeToString(buf)
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
			if sub, ok := v.(map[string]any); ok {
				if err := normalizeBytes(fd.Message(), sub); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// StartPayload builds the implicit SessionStart payload (CONF-1, CONF-10).
func (f *Fixture) StartPayload() ([]byte, error) {
	p := &macpv1.SessionStartPayload{
		Intent:               "conformance: " + f.Name,
		Participants:         f.Participants,
		ModeVersion:          f.ModeVersion,
		ConfigurationVersion: f.ConfigurationVersion,
		PolicyVersion:        f.PolicyVersion,
		TtlMs:                f.TTLMs,
	}
	if len(f.StartExtra) > 0 {
		extra := &macpv1.SessionStartPayload{}
		if err := protojson.Unmarshal(f.StartExtra, extra); err != nil {
			return nil, fmt.Errorf("start_extra: %w", err)
		}
		proto.Merge(p, extra)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(p)
}
