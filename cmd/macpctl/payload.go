package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/wire"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	// Every mode's payload messages, so payloadType finds them.
	_ "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/task/v1"
)

// payloadType finds the payload message of messageType in mode
// (wire.PayloadType).
func payloadType(mode, messageType string) (protoreflect.MessageType, error) {
	mt, err := wire.PayloadType(mode, messageType)
	if err != nil {
		return nil, fmt.Errorf("%v; use --payload-b64", err)
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

// canonicalEnvelope is the canonical JSON form of an Envelope
// (RFC-MACP-0001 §10.1-10.2, wire.Canonical).
func canonicalEnvelope(env *macpv1.Envelope) ([]byte, error) { return wire.EncodeCanonical(env) }
