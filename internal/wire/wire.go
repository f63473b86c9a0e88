package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/jsonscan"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Every standard mode's payload messages, so PayloadType finds them.
	_ "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	_ "github.com/macpd/macpd/gen/macp/modes/task/v1"
)

// corePayloads are the Core message types' payloads (RFC-MACP-0001 §6).
var corePayloads = map[string]protoreflect.FullName{
	coord.TypeSessionStart:   "macp.v1.SessionStartPayload",
	"SessionCancel":          "macp.v1.SessionCancelPayload",
	coord.TypeSessionSuspend: "macp.v1.SessionSuspendPayload",
	coord.TypeSessionResume:  "macp.v1.SessionResumePayload",
	"Commitment":             "macp.v1.CommitmentPayload",
	coord.TypeSignal:         "macp.v1.SignalPayload",
	coord.TypeProgress:       "macp.v1.ProgressPayload",
}

// PayloadType finds the payload message of messageType in mode: a Core
// type, or <Type>Payload in the mode's proto package (mode
// "macp.mode.<m>.v1" has its payloads in package "macp.modes.<m>.v1").
func PayloadType(mode, messageType string) (protoreflect.MessageType, error) {
	name, ok := corePayloads[messageType]
	if !ok {
		rest, found := strings.CutPrefix(mode, "macp.mode.")
		if !found {
			return nil, fmt.Errorf("no payload schema is known for %s in mode %q", messageType, mode)
		}
		name = protoreflect.FullName("macp.modes." + rest + "." + messageType + "Payload")
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return nil, fmt.Errorf("no payload schema is known for %s in mode %q (looked for %s)", messageType, mode, name)
	}
	return mt, nil
}

var (
	// out is the proto3 JSON written on every transport: proto field
	// names (RFC-MACP-0001 §10), every field present.
	out = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	// payloadOut renders decoded payloads like the official SDKs'
	// MessageToDict(preserving_proto_field_name=True).
	payloadOut = protojson.MarshalOptions{UseProtoNames: true}
	// in is strict: unknown fields are errors (they would be silently
	// dropped, and a typo'd field changes what is stored).
	in = protojson.UnmarshalOptions{}
)

// Marshal is the proto3 JSON of m with proto field names.
func Marshal(m proto.Message) ([]byte, error) { return out.Marshal(m) }

// Compact is Marshal on one line without protojson's deliberately
// unstable whitespace.
func Compact(m proto.Message) ([]byte, error) {
	b, err := out.Marshal(m)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EncodeEnvelope is the envelope's proto3 JSON: payload as base64 of the
// exact bytes.
func EncodeEnvelope(env *macpv1.Envelope) ([]byte, error) { return Compact(env) }

// DecodePayload renders payload bytes of mode/messageType as a JSON
// object (proto field names), or returns ok=false when no schema is known
// or the bytes do not parse as it.
func DecodePayload(mode, messageType string, payload []byte) (json.RawMessage, bool) {
	mt, err := PayloadType(mode, messageType)
	if err != nil {
		return nil, false
	}
	m := mt.New().Interface()
	if proto.Unmarshal(payload, m) != nil {
		return nil, false
	}
	b, err := payloadOut.Marshal(m)
	if err != nil {
		return nil, false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// CanonicalEnvelope is the canonical JSON form of an envelope
// (RFC-MACP-0001 §10.1-10.2): "timestamp" (RFC 3339, UTC, milliseconds)
// instead of timestamp_unix_ms, and "payload" as the decoded object when
// its schema is known, else "payload_b64".
type CanonicalEnvelope struct {
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

// Canonical returns the canonical view of env.
func Canonical(env *macpv1.Envelope) CanonicalEnvelope {
	c := CanonicalEnvelope{
		MacpVersion: env.GetMacpVersion(), Mode: env.GetMode(), MessageType: env.GetMessageType(), MessageID: env.GetMessageId(),
		SessionID: env.GetSessionId(), Sender: env.GetSender(),
		Timestamp: time.UnixMilli(env.GetTimestampUnixMs()).UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	}
	if p, ok := DecodePayload(env.GetMode(), env.GetMessageType(), env.GetPayload()); ok {
		c.Payload = p
	} else {
		b64 := base64.StdEncoding.EncodeToString(env.GetPayload())
		c.PayloadB64 = &b64
	}
	return c
}

// EncodeCanonical is json.Marshal(Canonical(env)).
func EncodeCanonical(env *macpv1.Envelope) ([]byte, error) { return json.Marshal(Canonical(env)) }

// invalid is an INVALID_ENVELOPE error.
func invalid(format string, args ...any) *coord.Error {
	return coord.Errorf(coord.CodeInvalidEnvelope, format, args...)
}

// DecodeEnvelope parses one envelope in either JSON form (see the package
// doc). Errors are INVALID_ENVELOPE with a message saying what is wrong.
func DecodeEnvelope(b []byte) (*macpv1.Envelope, *coord.Error) {
	if !utf8.Valid(b) {
		return nil, invalid("the envelope JSON is not valid UTF-8")
	}
	if cerr := uniqueTopLevelKeys(b); cerr != nil {
		return nil, cerr
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&fields); err != nil {
		return nil, invalid("the envelope is not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, invalid("the envelope is followed by more JSON; send exactly one object")
	}
	if fields == nil {
		return nil, invalid("the envelope is not a JSON object (null)")
	}
	members := len(fields)
	var payloadObj json.RawMessage
	var rawPayload []byte
	hasRaw := false
	if p, ok := fields["payload"]; ok {
		switch t := bytes.TrimSpace(p); {
		case len(t) > 0 && t[0] == '{':
			payloadObj = t
			delete(fields, "payload")
		case len(t) > 0 && t[0] == '"':
			// proto3 JSON bytes: left to protojson (base64).
		case bytes.Equal(t, []byte("null")):
			delete(fields, "payload")
		default:
			return nil, invalid(`"payload" must be a base64 string or a JSON object`)
		}
	}
	if p, ok := fields["payload_b64"]; ok && bytes.Equal(bytes.TrimSpace(p), []byte("null")) {
		delete(fields, "payload_b64")
	}
	if p, ok := fields["payload_b64"]; ok {
		delete(fields, "payload_b64")
		if _, both := fields["payload"]; both || payloadObj != nil {
			return nil, invalid(`send either "payload" or "payload_b64", not both`)
		}
		var s string
		if err := json.Unmarshal(p, &s); err != nil {
			return nil, invalid(`"payload_b64" must be a base64 string`)
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, invalid(`"payload_b64" is not standard base64: %v`, err)
		}
		rawPayload, hasRaw = raw, true
	}
	var tsMs int64
	hasTS := false
	if t, ok := fields["timestamp"]; ok {
		delete(fields, "timestamp")
		_, a := fields["timestamp_unix_ms"]
		_, b := fields["timestampUnixMs"]
		if a || b {
			return nil, invalid(`send either "timestamp" or "timestamp_unix_ms", not both`)
		}
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return nil, invalid(`"timestamp" must be an RFC 3339 string`)
		}
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, invalid(`"timestamp" is not RFC 3339: %v`, err)
		}
		tsMs, hasTS = ts.UnixMilli(), true
	}
	// Only the members above are ever removed: when none was, the object
	// is already plain proto3 JSON (checked: valid, one object, no
	// duplicate), and protojson reads it as sent rather than re-encoded.
	rest := b
	if len(fields) != members {
		var err error
		if rest, err = json.Marshal(fields); err != nil {
			return nil, invalid("the envelope JSON could not be re-read: %v", err)
		}
	}
	env := &macpv1.Envelope{}
	if err := in.Unmarshal(rest, env); err != nil {
		return nil, invalid("the envelope is not a valid macp.v1.Envelope in proto3 JSON: %v", err)
	}
	if hasTS {
		env.TimestampUnixMs = tsMs
	}
	if hasRaw {
		env.Payload = rawPayload
	}
	if payloadObj != nil {
		mt, err := PayloadType(env.Mode, env.MessageType)
		if err != nil {
			return nil, invalid(`"payload" is a JSON object but %v; send the payload bytes as base64 ("payload" string or "payload_b64")`, err)
		}
		m := mt.New().Interface()
		if err := in.Unmarshal(payloadObj, m); err != nil {
			return nil, invalid(`"payload" is not a valid %s in proto3 JSON: %v`, mt.Descriptor().FullName(), err)
		}
		pb, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return nil, invalid("the payload could not be encoded: %v", err)
		}
		env.Payload = pb
	}
	return env, nil
}

// uniqueTopLevelKeys refuses an envelope object that names a top-level
// key twice, also in another letter case ("message_id" and "Message_ID"):
// decoded into a map, the last one would win silently (inside the payload,
// protojson refuses duplicates itself). What is not an object is left to
// DecodeEnvelope's own errors.
func uniqueTopLevelKeys(b []byte) *coord.Error {
	// Fast path: a scan of the names without decoding (jsonscan); the
	// token decoder below when the scan cannot tell or there are many.
	type name struct{ fold, k string }
	var seen [24]name
	n, many := 0, false
	var cerr *coord.Error
	ok := jsonscan.Keys(b, func(raw []byte) bool {
		if n == len(seen) {
			many = true
			return false
		}
		k := string(raw)
		fold := strings.ToLower(k)
		for _, s := range seen[:n] {
			if s.fold == fold {
				cerr = duplicateKey(s.k, k)
				return false
			}
		}
		seen[n] = name{fold, k}
		n++
		return true
	})
	if ok && !many {
		return cerr
	}
	return uniqueTopLevelKeysSlow(b)
}

func duplicateKey(prev, k string) *coord.Error {
	if prev == k {
		return invalid("the envelope names %q twice; send each field once", k)
	}
	return invalid("the envelope names %q and %q, the same field in another letter case; send each field once, in its documented spelling", prev, k)
}

func uniqueTopLevelKeysSlow(b []byte) *coord.Error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	seen := map[string]string{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		k, ok := t.(string)
		if !ok {
			return nil
		}
		fold := strings.ToLower(k)
		if prev, dup := seen[fold]; dup {
			return duplicateKey(prev, k)
		}
		seen[fold] = k
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// ErrorOf returns the MACPError of a coord error.
func ErrorOf(e *coord.Error) *macpv1.MACPError {
	return &macpv1.MACPError{Code: string(e.Code), Message: e.Message}
}

// HTTPStatus is the HTTP status of a MACP code: the HTTP Status column of
// the spec's error-code registry (coord.Code.HTTPStatus).
func HTTPStatus(code string) int { return coord.Code(code).HTTPStatus() }

// JSON-RPC 2.0 error codes (the reserved range, and -32000 for a MACP
// error carried in the error's data).
const (
	RPCParseError     = -32700
	RPCInvalidRequest = -32600
	RPCMethodNotFound = -32601
	RPCInvalidParams  = -32602
	RPCInternalError  = -32603
	// RPCMACPError: the request was understood but refused; error.data is
	// the MACPError.
	RPCMACPError = -32000
)

// CloseCode is the WebSocket close code that carries a MACP error: 4000 +
// the code's HTTP status (4401 UNAUTHENTICATED, 4403 FORBIDDEN, 4404
// SESSION_NOT_FOUND, 4409, 4400, 4413, 4429, 4500), the close-code column
// of coord's code table. The close reason starts with the MACP code.
func CloseCode(code string) int { return coord.Code(code).Mapping().CloseCode }

// IsCore reports whether messageType is a Core message type with a
// payload schema of its own (RFC-MACP-0001 §6).
func IsCore(messageType string) bool {
	_, ok := corePayloads[messageType]
	return ok
}
