package sdk

import (
	"encoding/json"
	"errors"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/status"
)

// Code is a MACP error code from the spec's error registry
// (registries/error-codes.md), as carried in macp.v1.MACPError.code.
type Code string

// The registry's codes.
const (
	CodeUnauthenticated            Code = "UNAUTHENTICATED"
	CodeForbidden                  Code = "FORBIDDEN"
	CodeSessionNotFound            Code = "SESSION_NOT_FOUND"
	CodeSessionNotOpen             Code = "SESSION_NOT_OPEN"
	CodeDuplicateMessage           Code = "DUPLICATE_MESSAGE"
	CodeSessionAlreadyExists       Code = "SESSION_ALREADY_EXISTS"
	CodeInvalidEnvelope            Code = "INVALID_ENVELOPE"
	CodeUnsupportedProtocolVersion Code = "UNSUPPORTED_PROTOCOL_VERSION"
	CodeModeNotSupported           Code = "MODE_NOT_SUPPORTED"
	CodePayloadTooLarge            Code = "PAYLOAD_TOO_LARGE"
	CodeRateLimited                Code = "RATE_LIMITED"
	CodeInvalidSessionID           Code = "INVALID_SESSION_ID"
	CodeInternalError              Code = "INTERNAL_ERROR"
	CodeUnknownPolicyVersion       Code = "UNKNOWN_POLICY_VERSION"
	CodePolicyDenied               Code = "POLICY_DENIED"
	CodeInvalidPolicyDefinition    Code = "INVALID_POLICY_DEFINITION"
	// CodeUnauthorized is the registry's deprecated alias of FORBIDDEN.
	CodeUnauthorized Code = "UNAUTHORIZED"
)

// registryCodes lists the registry's codes in registry order.
var registryCodes = []Code{
	CodeUnauthenticated, CodeForbidden, CodeSessionNotFound, CodeSessionNotOpen,
	CodeDuplicateMessage, CodeSessionAlreadyExists, CodeInvalidEnvelope,
	CodeUnsupportedProtocolVersion, CodeModeNotSupported, CodePayloadTooLarge,
	CodeRateLimited, CodeInvalidSessionID, CodeInternalError, CodeUnknownPolicyVersion,
	CodePolicyDenied, CodeInvalidPolicyDefinition, CodeUnauthorized,
}

var knownCodes = func() map[Code]bool {
	m := make(map[Code]bool, len(registryCodes))
	for _, c := range registryCodes {
		m[c] = true
	}
	return m
}()

// Codes returns every code of the error registry (a new slice each call).
// A test keeps it equal to the runtime's own list.
func Codes() []Code { return append([]Code(nil), registryCodes...) }

// Known reports whether c is a registry code.
func (c Code) Known() bool { return knownCodes[c] }

// Retryable reports whether a request refused with this code may succeed
// when repeated unchanged later:
//
//   - RATE_LIMITED: a rate or resource limit; retry after a backoff.
//   - INTERNAL_ERROR: a transient runtime failure (for Send, the durable
//     write did not complete). Resending the identical envelope (same
//     message_id) is safe: if the first attempt was in fact accepted, the
//     retry is answered ok with duplicate=true. Helper methods make a new
//     message_id per call, so repeating a helper call sends a new message.
//
// Every other code is final for that request: the caller must change
// something (credentials, payload, session, policy) first. Transport
// failures without a MACP code (gRPC Unavailable) are retried by
// [WithRetry] and by subscriptions; they are not Codes.
func (c Code) Retryable() bool { return c == CodeRateLimited || c == CodeInternalError }

// HTTPStatus is the registry's HTTP status for the code (401, 403, 404,
// 409, 400, 413, 429; 500 for INTERNAL_ERROR and unknown codes).
func (c Code) HTTPStatus() int {
	switch c {
	case CodeUnauthenticated:
		return 401
	case CodeForbidden, CodeUnauthorized, CodePolicyDenied:
		return 403
	case CodeSessionNotFound, CodeUnknownPolicyVersion:
		return 404
	case CodeSessionNotOpen, CodeDuplicateMessage, CodeSessionAlreadyExists:
		return 409
	case CodeInvalidEnvelope, CodeUnsupportedProtocolVersion, CodeModeNotSupported,
		CodeInvalidSessionID, CodeInvalidPolicyDefinition:
		return 400
	case CodePayloadTooLarge:
		return 413
	case CodeRateLimited:
		return 429
	}
	return 500
}

// Retryable reports whether err is worth repeating unchanged: an [*Error]
// whose code is [Code.Retryable].
func Retryable(err error) bool { return CodeOf(err).Retryable() }

// Error is a MACP error reported by the runtime: a rejected envelope
// (ack.error) or a failed RPC whose gRPC status names a MACP code.
type Error struct {
	Code    Code
	Message string
	// SessionID and MessageID identify the rejected envelope, when known.
	SessionID, MessageID string
	// Details is MACPError.details, verbatim (see Reasons).
	Details []byte

	cause error // the gRPC status error, if the error came from one
}

// Error returns "CODE: message".
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap returns the gRPC status error the Error was decoded from, or nil
// for a rejection reported in an Ack.
func (e *Error) Unwrap() error { return e.cause }

// Is matches a target *Error by code when the target has no message:
// errors.Is(err, &sdk.Error{Code: sdk.CodeForbidden}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == ""
}

// Reasons decodes Details of the form {"reasons": [...]} (macpd's
// POLICY_DENIED reasons); nil if Details has another shape.
func (e *Error) Reasons() []string {
	var d struct {
		Reasons []string `json:"reasons"`
	}
	if json.Unmarshal(e.Details, &d) != nil {
		return nil
	}
	return d.Reasons
}

// CodeOf returns the MACP code of err, or "" if err is nil or carries no
// MACP code (a plain transport failure, a local error).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// ackError returns the *Error for a rejected ack, nil for an accepted one.
func ackError(ack *macpv1.Ack) error {
	if ack.GetOk() {
		return nil
	}
	me := ack.GetError()
	if me == nil {
		return &Error{Code: CodeInternalError, Message: "the runtime rejected the message without an error",
			SessionID: ack.GetSessionId(), MessageID: ack.GetMessageId()}
	}
	return fromMACPError(me, nil)
}

func fromMACPError(me *macpv1.MACPError, cause error) *Error {
	return &Error{Code: Code(me.GetCode()), Message: me.GetMessage(), SessionID: me.GetSessionId(),
		MessageID: me.GetMessageId(), Details: me.GetDetails(), cause: cause}
}

// convert turns a gRPC status error naming a MACP code into an *Error and
// leaves every other error as it is.
func convert(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if me, ok := d.(*macpv1.MACPError); ok && me.GetCode() != "" {
			return fromMACPError(me, err)
		}
	}
	// Some statuses (e.g. a watcher that fell behind) name the code only in
	// the message: "RATE_LIMITED: ...".
	if c, msg, ok := strings.Cut(st.Message(), ": "); ok && knownCodes[Code(c)] {
		return &Error{Code: Code(c), Message: msg, cause: err}
	}
	return err
}
