package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Every mode's payload messages, so payloadType finds them.
	_ "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/task/v1"
)

// corePayloads are the Core message types' payloads (RFC-MACP-0001 §6).
var corePayloads = map[string]protoreflect.FullName{
	"SessionStart":  "macp.v1.SessionStartPayload",
	"SessionCancel": "macp.v1.SessionCancelPayload",
	"Commitment":    "macp.v1.CommitmentPayload",
	"Signal":        "macp.v1.SignalPayload",
	"Progress":      "macp.v1.ProgressPayload",
}

// payloadType finds the payload message of messageType in mode: a Core type,
// or <Type>Payload in the mode's package (mode "macp.mode.<m>.v1" has its
// payloads in proto package "macp.modes.<m>.v1").
func payloadType(mode, messageType string) (protoreflect.MessageType, error) {
	name, ok := corePayloads[messageType]
	if !ok {
		rest, found := strings.CutPrefix(mode, "macp.mode.")
		if !found {
			return nil, fmt.Errorf("no payload schema is known for %s in mode %q; use --payload-b64", messageType, mode)
		}
		name = protoreflect.FullName("macp.modes." + rest + "." + messageType + "Payload")
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return nil, fmt.Errorf("no payload schema is known for %s in mode %q (looked for %s); use --payload-b64", messageType, mode, name)
	}
	return mt, nil
}

// encodePayload parses JSON with proto field names into the payload message
// of messageType and returns it.
func encodePayload(mode, messageType, js string) (proto.Message, error) {
	mt, err := payloadType(mode, messageType)
	if err != nil {
		return nil, err
	}
	m := mt.New().Interface()
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		return nil, fmt.Errorf("--payload-json is not a valid %s: %v", mt.Descriptor().FullName(), err)
	}
	return m, nil
}

var jsonOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// canonical returns m as one line of canonical JSON (RFC-MACP-0001 §10:
// proto field names, enum names, every field present).
func canonical(m proto.Message) ([]byte, error) {
	b, err := jsonOut.Marshal(m)
	if err != nil {
		return nil, err
	}
	// protojson varies its whitespace on purpose; make it one stable line.
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// envelopeJSON is the canonical JSON form of an Envelope (RFC-MACP-0001
// §10.1-10.2): timestamp_unix_ms becomes the RFC 3339 "timestamp", and the
// payload is the decoded payload object when its schema is known, else
// "payload_b64".
type envelopeJSON struct {
	MacpVersion string          `json:"macp_version"`
	Mode        string          `json:"mode"`
	MessageType string          `json:"message_type"`
	MessageID   string          `json:"message_id"`
	SessionID   string          `json:"session_id"`
	Sender      string          `json:"sender"`
	Timestamp   string          `json:"timestamp"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	PayloadB64  *string         `json:"payload_b64,omitempty"`
}

func canonicalEnvelope(env *macpv1.Envelope) ([]byte, error) {
	out := envelopeJSON{
		MacpVersion: env.MacpVersion, Mode: env.Mode, MessageType: env.MessageType, MessageID: env.MessageId,
		SessionID: env.SessionId, Sender: env.Sender,
		Timestamp: time.UnixMilli(env.TimestampUnixMs).UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	}
	if mt, err := payloadType(env.Mode, env.MessageType); err == nil {
		m := mt.New().Interface()
		if proto.Unmarshal(env.Payload, m) == nil {
			if b, err := canonical(m); err == nil {
				out.Payload = b
			}
		}
	}
	if out.Payload == nil {
		b64 := base64.StdEncoding.EncodeToString(env.Payload)
		out.PayloadB64 = &b64
	}
	return json.Marshal(out)
}
