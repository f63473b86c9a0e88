// Package multiround implements ext.multi_round.v1, the runtime-shipped
// extension mode for iterative convergence (RFC-MACP-0002 §3 names it as the
// example ext.* id; there is no RFC, so the behaviour follows the reference
// runtime, checklist MR-1..MR-5): declared participants Contribute a string
// value, revising it over rounds, until every declared participant holds
// the same value; the initiator then commits.
//
// It is registered as an Extension, BuiltIn mode (listed by ListExtModes,
// not ListModes; not removable).
//
// Phases (projected): Collecting --all declared participants hold one value--> Converged --Commitment--> Committed.
//
// The package is pure: no clock, I/O, goroutines or map-order dependence.
// Every interpretation of a silent point is marked "Decision:".
package multiround

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	multiroundv1 "github.com/macpd/macpd/gen/macp/modes/multi_round/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
)

// ModeID and ModeVersion identify the mode (checklist MR-1).
const (
	ModeID      = "ext.multi_round.v1"
	ModeVersion = "1.0.0"
)

// TypeContribute is the mode's one message type (checklist MR-3).
const TypeContribute = "Contribute"

// ConvergenceAllEqual is the only convergence rule: every declared
// participant has contributed and all current values are equal.
const ConvergenceAllEqual = "all_equal"

// Phase is the session phase as projected.
type Phase uint8

// Phases.
const (
	PhaseCollecting Phase = iota
	PhaseConverged
	PhaseCommitted
)

var phaseNames = [...]string{"Collecting", "Converged", "Committed"}

func (p Phase) String() string { return phaseNames[p] }

// Decision: schema_uris is empty — the Contribute payload is JSON with no
// published schema or proto, and no document specifies the mode.
var descriptor = &macpv1.ModeDescriptor{
	Mode:        ModeID,
	ModeVersion: ModeVersion,
	Title:       "Multi-Round Mode",
	Description: "Iterative convergence through multiple contribution rounds until all participants agree, " +
		"with a terminal Commitment.",
	DeterminismClass:     "semantic-deterministic",
	ParticipantModel:     "peer",
	MessageTypes:         []string{coord.TypeSessionStart, TypeContribute, coord.TypeCommitment},
	TerminalMessageTypes: []string{coord.TypeCommitment},
}

type multiRoundMode struct{}

// New returns the Multi-Round extension mode.
func New() mode.Mode { return multiRoundMode{} }

// Descriptor returns the shared descriptor; callers must not modify it.
func (multiRoundMode) Descriptor() *macpv1.ModeDescriptor { return descriptor }

// Start requires declared participants (checklist MR-2: the strict
// SessionStart validation of the standard modes). The mode has no policy
// rules of its own (RFC-MACP-0012 §4.6: none declared, any JSON accepted);
// commitment authority is the core's.
func (multiRoundMode) Start(b *mode.Binding) (mode.State, error) {
	s := &state{participant: make(map[string]int, len(b.Participants))}
	for _, p := range b.Participants {
		if _, dup := s.participant[p]; !dup {
			s.participant[p] = len(s.names)
			s.names = append(s.names, p)
		}
	}
	if len(s.names) == 0 {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "%s requires declared participants", ModeID)
	}
	s.values = make([]string, len(s.names))
	s.has = make([]bool, len(s.names))
	s.holders = make(map[string]int, len(s.names))
	return s, nil
}

// state is one session's multi-round state. The map is only used for
// lookups and counts, never iterated.
type state struct {
	participant map[string]int
	names       []string

	// values[i] is participant i's latest value, valid when has[i].
	values       []string
	has          []bool
	contributors int
	// holders counts the participants currently holding each value, so
	// convergence is an O(1) check.
	holders map[string]int
	// round counts value changes, a participant's first contribution
	// included (reference runtime).
	round int
	// contributions counts accepted Contribute messages.
	contributions int
	converged     bool
	committed     bool
}

func invalid(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidEnvelope, format, args...)
}

// Step validates and applies a Contribute: authority (FORBIDDEN), then
// payload and phase (INVALID_ENVELOPE). Nothing changes on error.
func (s *state) Step(b *mode.Binding, m *mode.Message) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "multi-round session already committed")
	}
	if m.Type != TypeContribute {
		return invalid("message type %q is not defined by %s", m.Type, ModeID)
	}
	// MR-3: declared participants only; an unlisted initiator is not one.
	i, ok := s.participant[m.Sender]
	if !ok {
		return coord.Errorf(coord.CodeForbidden, "%s may not send %s: not a declared participant", m.Sender, m.Type)
	}
	v, _, err := DecodeContribute(m.Payload, b.Profile)
	if err != nil {
		return invalid("Contribute payload must be a macp.modes.multi_round.v1.ContributePayload or the legacy UTF-8 JSON {\"value\": \"<string>\"}: %v", err)
	}
	// MR-4: the session converged; only the Commitment remains.
	if s.converged {
		return invalid("the session has converged on %q; no further contributions (checklist MR-4)", s.values[0])
	}
	s.contributions++
	if s.has[i] && s.values[i] == v {
		// Decision (reference runtime): resubmitting one's current value is
		// accepted and recorded in history but is no new round.
		return nil
	}
	s.round++
	if s.has[i] {
		old := s.values[i]
		if s.holders[old] == 1 {
			delete(s.holders, old)
		} else {
			s.holders[old]--
		}
	} else {
		s.has[i] = true
		s.contributors++
	}
	s.values[i] = v
	s.holders[v]++
	s.converged = s.contributors == len(s.names) && s.holders[v] == len(s.names)
	return nil
}

// Contribute payload formats (DecodeContribute).
const (
	FormatProto = "proto" // macp.modes.multi_round.v1.ContributePayload (macp-proto 0.1.6)
	FormatJSON  = "json"  // legacy UTF-8 JSON {"value": "<string>"} (CONF-11)
)

// DecodeContribute returns the value of a Contribute payload and its
// format. Two encodings exist: the canonical protobuf ContributePayload
// {value = 1} and the legacy JSON object of the April baseline, which old
// histories hold and must replay byte-identically.
//
// Decision (docs/spec-decisions.md "multi_round Contribute encodings"):
// the two are told apart by trying both decoders strictly, in an order
// fixed by the session's profile, so the result is a pure function of
// (profile, bytes):
//   - ProfileApril (and ""): a payload the legacy grammar (parseContribute)
//     accepts is JSON; otherwise it must decode as ContributePayload. Every
//     payload an April session ever accepted is therefore read exactly as
//     before.
//   - ProfileLatest: a payload that decodes as ContributePayload with no
//     unknown field is protobuf; otherwise legacy JSON; otherwise protobuf
//     with unknown fields (proto3 forward compatibility).
//
// The decoders overlap only on payloads that are at once a legacy JSON
// object and an exact protobuf encoding: the first byte would have to be
// 0x0a (the field-1 tag, which is also the JSON whitespace LF) followed by
// a length byte that is itself JSON whitespace or '{' and a value that is
// JSON; no encoder produces such a payload except on purpose, and the
// profile order settles it deterministically. The protobuf value must be
// valid UTF-8 (proto3 string). The empty payload is ContributePayload{}
// (value "") under ProfileLatest; April sessions keep refusing it, as
// they always did.
func DecodeContribute(p []byte, profile string) (value, format string, err error) {
	var pb multiroundv1.ContributePayload
	pbErr := proto.Unmarshal(p, &pb)
	exact := pbErr == nil && len(pb.ProtoReflect().GetUnknown()) == 0
	if coord.IsLatest(profile) && exact {
		return pb.Value, FormatProto, nil
	}
	v, jsonErr := parseContribute(p)
	if jsonErr == nil {
		return v, FormatJSON, nil
	}
	if pbErr == nil && (len(p) > 0 || coord.IsLatest(profile)) {
		return pb.Value, FormatProto, nil
	}
	return "", "", jsonErr
}

// parseContribute decodes the legacy Contribute payload: a UTF-8 JSON
// object with a string member "value" (checklist MR-3, CONF-11).
//
// Decisions: the key is matched case-sensitively and must appear once; its
// value must be a JSON string (null, numbers, objects are refused); other
// members are ignored (forward compatibility, as the reference runtime's
// serde default); any string, the empty one included, is a value; nothing
// but whitespace may follow the object.
func parseContribute(p []byte) (string, error) {
	if !utf8.Valid(p) {
		return "", errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", errors.New("not a JSON object")
	}
	var (
		value string
		seen  bool
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", errors.New("malformed JSON")
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", errors.New("malformed JSON")
		}
		if key != "value" {
			continue
		}
		if seen {
			return "", errors.New(`duplicate "value"`)
		}
		seen = true
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &value) != nil {
			return "", errors.New(`"value" must be a string`)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "", errors.New("malformed JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("trailing data after the JSON object")
	}
	if !seen {
		return "", errors.New(`missing "value"`)
	}
	return value, nil
}

// Commit checks eligibility: only after convergence (checklist MR-5,
// INVALID_ENVELOPE).
//
// Decisions: the outcome flag is taken at face value once converged (the
// core has already matched it against the action suffix, e.g.
// multi_round.converged needs true); before convergence no outcome is
// eligible, negative included, as in the reference runtime. Commitment
// authority is the core's (policy commitment.authority, default the
// initiator — MR-5's "initiator only"); the mode adds no check of its own,
// so a policy that widens authority is honoured.
func (s *state) Commit(b *mode.Binding, m *mode.Message, c *macpv1.CommitmentPayload) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "multi-round session already committed")
	}
	if c == nil {
		return invalid("commitment payload is required")
	}
	if !s.converged {
		return invalid("a Commitment requires convergence: %d of %d declared participants contributed, values differ or are missing (checklist MR-5)",
			s.contributors, len(s.names))
	}
	s.committed = true
	return nil
}

func (s *state) phase() Phase {
	switch {
	case s.committed:
		return PhaseCommitted
	case s.converged:
		return PhaseConverged
	}
	return PhaseCollecting
}

// Project returns:
//
//	{"phase": "Collecting"|"Converged"|"Committed",
//	 "converged": bool, "convergence_type": "all_equal",
//	 "converged_value": the common value ("" until converged),
//	 "round": value changes so far,
//	 "values": {participant: latest value} (contributors only),
//	 "contributors": participants who contributed,
//	 "contributions": accepted Contribute messages,
//	 "participants": [declared participants in order]}
//
// converged_value, round and values are the reference runtime's resolution
// record {converged_value, round, final}.
func (s *state) Project() map[string]any {
	values := make(map[string]any, s.contributors)
	participants := make([]any, len(s.names))
	for i, n := range s.names {
		participants[i] = n
		if s.has[i] {
			values[n] = s.values[i]
		}
	}
	cv := ""
	if s.converged {
		cv = s.values[0]
	}
	return map[string]any{
		"phase":            s.phase().String(),
		"converged":        s.converged,
		"convergence_type": ConvergenceAllEqual,
		"converged_value":  cv,
		"round":            s.round,
		"values":           values,
		"contributors":     s.contributors,
		"contributions":    s.contributions,
		"participants":     participants,
	}
}
