// Package wire holds the mappings every non-gRPC transport shares
// (RFC-MACP-0006 §4-5; RFC-MACP-0001 §10): the JSON forms of envelopes,
// acks and errors, the JSON views of standard payloads, and one table from
// each MACP error code to its HTTP status (the spec's error-code
// registry), JSON-RPC error code and WebSocket close code.
//
// Envelope JSON, read (DecodeEnvelope): the proto3 JSON mapping of
// macp.v1.Envelope (protojson; proto or lowerCamel field names), with
// "payload" as base64 of the exact payload bytes. Also accepted, from the
// canonical JSON mapping of RFC-MACP-0001 §10: "timestamp" (RFC 3339)
// instead of "timestamp_unix_ms", "payload_b64" (base64), and "payload"
// as a JSON object: the payload message of the envelope's mode and
// message type in proto3 JSON (PayloadType names it), encoded to protobuf
// bytes here. Unknown fields, malformed JSON, invalid UTF-8, both
// "payload" and "payload_b64", or a payload object with no known schema
// are INVALID_ENVELOPE errors; nothing is guessed.
//
// Envelope JSON, written: EncodeEnvelope is the proto3 JSON mapping with
// proto field names and "payload" as base64, so decoding it gives the
// stored bytes exactly (byte-identical on every transport).
// EncodeEnvelopeView(…, PayloadJSON) is the readable canonical form:
// "payload" is the decoded object when the schema is known, else
// "payload_b64"; it is for display and never for re-sending bytes.
//
// Payload schemas (PayloadType): the Core types' own messages
// (SessionStart, SessionCancel, and the runtime's SessionSuspend and
// SessionResume of the latest profile, Commitment, Signal, Progress) and
// macp.modes.<mode>.v1.<Type>Payload for the standard modes. States and
// lifecycle events are written by their enum names, SESSION_STATE_SUSPENDED,
// SESSION_STATE_CANCELLED, EVENT_TYPE_SUSPENDED, EVENT_TYPE_RESUMED and
// EVENT_TYPE_CANCELLED included.
//
// The package does no I/O and holds no state.
package wire
