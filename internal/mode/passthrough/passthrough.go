// Package passthrough implements dynamically registered extension modes
// (RFC-MACP-0002 §12, RegisterExtMode): a mode defined only by its
// descriptor. Declared participants and the initiator may send any of the
// descriptor's message types; the runtime validates nothing inside the
// payloads; a Commitment (whose authority, shape and versions the core
// checks) resolves the session.
package passthrough

import (
	"slices"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"google.golang.org/protobuf/proto"
)

// Validate checks a descriptor submitted to RegisterExtMode and returns
// the normalized copy that will be registered.
func Validate(d *macpv1.ModeDescriptor) (*macpv1.ModeDescriptor, error) {
	if d == nil {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "mode_descriptor is required")
	}
	d = proto.Clone(d).(*macpv1.ModeDescriptor)
	switch {
	case strings.TrimSpace(d.Mode) == "" || strings.TrimSpace(d.Mode) != d.Mode:
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "mode must be a non-empty id without surrounding spaces")
	case mode.IsStandardID(d.Mode):
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "the macp.mode.* namespace is reserved for standards-track modes")
	case d.ModeVersion == "":
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "mode_version is required")
	}
	var types []string
	for _, t := range d.MessageTypes {
		switch {
		case t == "":
			return nil, coord.Errorf(coord.CodeInvalidEnvelope, "message types must not be empty")
		case t == coord.TypeSessionCancel || t == coord.TypeSignal || t == coord.TypeProgress:
			return nil, coord.Errorf(coord.CodeInvalidEnvelope, "%s is a core message type and cannot be a mode message", t)
		case slices.Contains(types, t):
			return nil, coord.Errorf(coord.CodeInvalidEnvelope, "message type %q is listed twice", t)
		}
		types = append(types, t)
	}
	if !slices.Contains(types, coord.TypeSessionStart) {
		types = append([]string{coord.TypeSessionStart}, types...)
	}
	if !slices.Contains(types, coord.TypeCommitment) {
		types = append(types, coord.TypeCommitment)
	}
	if len(types) < 3 {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "at least one mode message type besides SessionStart and Commitment is required")
	}
	for _, t := range d.TerminalMessageTypes {
		if t != coord.TypeCommitment {
			return nil, coord.Errorf(coord.CodeInvalidEnvelope, "registered extension modes terminate with Commitment only, not %q", t)
		}
	}
	d.MessageTypes = types
	d.TerminalMessageTypes = []string{coord.TypeCommitment}
	if d.Title == "" {
		d.Title = d.Mode
	}
	if d.DeterminismClass == "" {
		d.DeterminismClass = "structural-only"
	}
	if d.ParticipantModel == "" {
		d.ParticipantModel = "declared"
	}
	return d, nil
}

// Mode is a registered extension mode.
type Mode struct {
	desc  *macpv1.ModeDescriptor
	types map[string]bool
}

// New returns a passthrough mode for a descriptor already checked with
// Validate.
func New(d *macpv1.ModeDescriptor) *Mode {
	m := &Mode{desc: d, types: make(map[string]bool, len(d.MessageTypes))}
	for _, t := range d.MessageTypes {
		m.types[t] = true
	}
	return m
}

// Descriptor implements mode.Mode.
func (m *Mode) Descriptor() *macpv1.ModeDescriptor { return m.desc }

// Start implements mode.Mode: at least one declared participant.
func (m *Mode) Start(b *mode.Binding) (mode.State, error) {
	if len(b.Participants) == 0 {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "%s sessions need at least one participant", m.desc.Mode)
	}
	return &state{m: m, counts: map[string]int{}}, nil
}

type state struct {
	m         *Mode
	counts    map[string]int
	committed bool
}

func (s *state) Step(b *mode.Binding, msg *mode.Message) error {
	if msg.Sender != b.Initiator && !b.IsParticipant(msg.Sender) {
		return coord.Errorf(coord.CodeForbidden, "%s is not a participant of this session", msg.Sender)
	}
	if !s.m.types[msg.Type] || msg.Type == coord.TypeSessionStart || msg.Type == coord.TypeCommitment {
		return coord.Errorf(coord.CodeInvalidEnvelope, "%s is not a message type of %s", msg.Type, s.m.desc.Mode)
	}
	s.counts[msg.Type]++
	return nil
}

func (s *state) Commit(*mode.Binding, *mode.Message, *macpv1.CommitmentPayload) error {
	s.committed = true
	return nil
}

func (s *state) Project() map[string]any {
	counts := make(map[string]any, len(s.counts))
	for k, v := range s.counts {
		counts[k] = v
	}
	phase := "Open"
	if s.committed {
		phase = "Committed"
	}
	return map[string]any{"phase": phase, "message_counts": counts}
}
