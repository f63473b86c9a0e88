package coord

import (
	"errors"
	"fmt"
)

// Code is a MACP error code from the spec's error registry
// (registries/error-codes.md). The string value is what travels in
// MACPError.code.
type Code string

// The registry's codes. UNAUTHORIZED is the deprecated alias of FORBIDDEN: it
// is understood on input and never emitted.
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
	CodeUnauthorized               Code = "UNAUTHORIZED" // deprecated alias of FORBIDDEN; never emitted
)

// HTTPStatus is the registry's HTTP status for the code (RFC-MACP-0006 HTTP
// binding; the table in codetable.go). Unknown codes map to 500.
func (c Code) HTTPStatus() int { return c.Mapping().HTTPStatus }

// Retryable reports whether a client may usefully retry the same request
// later (the table's retry class). Only rate limiting and internal
// failures are transient.
func (c Code) Retryable() bool { return c.Mapping().Retry != RetryNever }

// Error is the one typed error that crosses package boundaries with a stable
// MACP code. Message is human-readable and must not leak internals; Reasons
// carries machine-readable detail (for POLICY_DENIED, the policy's reasons).
type Error struct {
	Code    Code
	Message string
	Reasons []string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is lets errors.Is match on the code: errors.Is(err, &Error{Code: X}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Reasons == nil
}

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf extracts the MACP code of err. Errors that carry no code are
// INTERNAL_ERROR: unknown failures never masquerade as client mistakes.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternalError
}

// AsError converts any error into an *Error. Untyped errors become
// INTERNAL_ERROR with a generic message so internals do not leak.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternalError, Message: "internal error"}
}

// AsErrorCode is AsError, except that an untyped error gets code c.
func AsErrorCode(err error, c Code) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: c, Message: err.Error()}
}
