package session

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/protobuf/proto"
)

// CheckEnvelope applies the structural rules every envelope must meet before
// anything else looks at it (RFC-MACP-0001 §6; checklist ADM-11, ADM-12):
// protocol version, non-empty message_type and message_id, session_id and
// mode both empty (Signal, ambient Progress) or both set, payload size.
// The sender is not checked here: the shell binds it to the authenticated
// identity first.
func CheckEnvelope(env *macpv1.Envelope, lim Limits) *coord.Error {
	if env == nil {
		return coord.Errorf(coord.CodeInvalidEnvelope, "envelope is required")
	}
	if env.MacpVersion != coord.ProtocolVersion {
		return coord.Errorf(coord.CodeUnsupportedProtocolVersion, "macp_version %q is not supported; use %q", env.MacpVersion, coord.ProtocolVersion)
	}
	if env.MessageType == "" {
		return coord.Errorf(coord.CodeInvalidEnvelope, "message_type is required")
	}
	if env.MessageId == "" {
		return coord.Errorf(coord.CodeInvalidEnvelope, "message_id is required")
	}
	if len(env.MessageId) > 256 {
		return coord.Errorf(coord.CodeInvalidEnvelope, "message_id is longer than 256 bytes")
	}
	if lim.MaxPayloadBytes > 0 && len(env.Payload) > lim.MaxPayloadBytes {
		return coord.Errorf(coord.CodePayloadTooLarge, "payload is %d bytes; the limit is %d", len(env.Payload), lim.MaxPayloadBytes)
	}
	ambient := env.MessageType == coord.TypeSignal || (env.MessageType == coord.TypeProgress && env.SessionId == "")
	switch {
	case ambient:
		if env.SessionId != "" || env.Mode != "" {
			return coord.Errorf(coord.CodeInvalidEnvelope, "%s envelopes must have empty session_id and mode", env.MessageType)
		}
	case env.SessionId == "" || env.Mode == "":
		return coord.Errorf(coord.CodeInvalidEnvelope, "session-scoped envelopes need both session_id and mode")
	}
	return nil
}

// CheckNewEnvelope is CheckEnvelope plus the rules that apply to envelopes
// being admitted but not to stored history (which replays under the rules
// it was accepted by): message_id holds no control character (C0, DEL),
// which would split or hide it in logs and terminals.
func CheckNewEnvelope(env *macpv1.Envelope, lim Limits) *coord.Error {
	if err := CheckEnvelope(env, lim); err != nil {
		return err
	}
	for i := 0; i < len(env.MessageId); i++ {
		if c := env.MessageId[i]; c < 0x20 || c == 0x7f {
			return coord.Errorf(coord.CodeInvalidEnvelope, "message_id contains the control character 0x%02X at byte %d; use printable characters", c, i)
		}
	}
	return nil
}

// CheckAmbient validates an ambient Signal or Progress envelope (already
// structurally checked). Signals never touch session state (RFC-MACP-0001
// §7.4); this only checks the payload.
func CheckAmbient(env *macpv1.Envelope) *coord.Error {
	switch env.MessageType {
	case coord.TypeSignal:
		var p macpv1.SignalPayload
		if err := proto.Unmarshal(env.Payload, &p); err != nil {
			return coord.Errorf(coord.CodeInvalidEnvelope, "payload is not a SignalPayload")
		}
		if p.SignalType == "" {
			return coord.Errorf(coord.CodeInvalidEnvelope, "signal_type is required")
		}
	case coord.TypeProgress:
		var p macpv1.ProgressPayload
		if err := proto.Unmarshal(env.Payload, &p); err != nil {
			return coord.Errorf(coord.CodeInvalidEnvelope, "payload is not a ProgressPayload")
		}
	default:
		return coord.Errorf(coord.CodeInvalidEnvelope, "%s is not an ambient message type", env.MessageType)
	}
	return nil
}
