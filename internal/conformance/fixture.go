package conformance

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Fixture is one conformance scenario.
type Fixture struct {
	Name                    string          `json:"-"`
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

// Load reads one fixture file.
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
	if f.Mode == "" || f.Initiator == "" {
		return nil, fmt.Errorf("%s: mode and initiator are required", path)
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

// LoadDirs reads every *.json fixture in the given files or directories,
// sorted by path.
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
		files = append(files, m...)
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
// array of byte values; a Commitment without outcome_positive is positive;
// multi_round.Contribute (and any unknown "ext" type) is the JSON itself.
func EncodePayload(payloadType string, raw json.RawMessage) ([]byte, error) {
	if payloadType == "multi_round.Contribute" || strings.HasPrefix(payloadType, "json.") {
		return []byte(raw), nil
	}
	newMsg, ok := payloadTypes[payloadType]
	if !ok {
		return nil, fmt.Errorf("unknown payload_type %q", payloadType)
	}
	m := newMsg()
	var obj map[string]any
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
	}
	if obj == nil {
		obj = map[string]any{}
	}
	if payloadType == "Commitment" {
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
