package coord

// The one table of what each MACP code becomes at every edge: its HTTP
// status (the HTTP Status column of the spec's error registry), its gRPC
// status code, its WebSocket close code and its retry class. Every binding
// (internal/server, internal/httpapi, internal/wire) and the snapshot
// routes read it; none maps codes on its own. The Go SDK keeps a copy
// (sdk/errors.go) that a test here holds equal to it.

// GRPCCode is the number of a gRPC status code, the value of
// google.golang.org/grpc/codes.Code (coord imports no transport; the gRPC
// binding converts). The values are fixed by the gRPC specification.
type GRPCCode uint32

// The gRPC status codes the table uses (codes.InvalidArgument, ...).
const (
	GRPCInvalidArgument    GRPCCode = 3
	GRPCNotFound           GRPCCode = 5
	GRPCAlreadyExists      GRPCCode = 6
	GRPCPermissionDenied   GRPCCode = 7
	GRPCResourceExhausted  GRPCCode = 8
	GRPCFailedPrecondition GRPCCode = 9
	GRPCInternal           GRPCCode = 13
	GRPCUnauthenticated    GRPCCode = 16
)

// RetryClass says whether a request refused with a code may succeed when
// repeated unchanged later.
type RetryClass uint8

const (
	// RetryNever: final for that request; the caller must change
	// something (credentials, payload, session, policy) first.
	RetryNever RetryClass = iota
	// RetryBackoff: a rate or resource limit; retry after a backoff.
	RetryBackoff
	// RetryTransient: a transient runtime failure (for Send, the durable
	// write did not complete); resending the identical envelope is safe.
	RetryTransient
)

// Mapping is one row of the table.
type Mapping struct {
	Code Code
	// HTTPStatus is the registry's HTTP status.
	HTTPStatus int
	// GRPC is the gRPC status code of non-Ack failures. The spec defines
	// no gRPC mapping (checklist ERR-21); this one follows the reference
	// runtime's and, where that says "everything else ->
	// FAILED_PRECONDITION", the registry's HTTP class (404 -> NOT_FOUND).
	GRPC GRPCCode
	// CloseCode is the WebSocket close code that carries the error: 4000
	// + the HTTP status.
	CloseCode int
	Retry     RetryClass
}

func row(c Code, http int, g GRPCCode, r RetryClass) Mapping {
	return Mapping{Code: c, HTTPStatus: http, GRPC: g, CloseCode: 4000 + http, Retry: r}
}

// codeTable is the registry in registry order.
var codeTable = [...]Mapping{
	row(CodeUnauthenticated, 401, GRPCUnauthenticated, RetryNever),
	row(CodeForbidden, 403, GRPCPermissionDenied, RetryNever),
	row(CodeSessionNotFound, 404, GRPCNotFound, RetryNever),
	row(CodeSessionNotOpen, 409, GRPCFailedPrecondition, RetryNever),
	row(CodeDuplicateMessage, 409, GRPCFailedPrecondition, RetryNever),
	row(CodeSessionAlreadyExists, 409, GRPCAlreadyExists, RetryNever),
	row(CodeInvalidEnvelope, 400, GRPCInvalidArgument, RetryNever),
	row(CodeUnsupportedProtocolVersion, 400, GRPCFailedPrecondition, RetryNever),
	row(CodeModeNotSupported, 400, GRPCFailedPrecondition, RetryNever),
	row(CodePayloadTooLarge, 413, GRPCResourceExhausted, RetryNever),
	row(CodeRateLimited, 429, GRPCResourceExhausted, RetryBackoff),
	row(CodeInvalidSessionID, 400, GRPCInvalidArgument, RetryNever),
	row(CodeInternalError, 500, GRPCInternal, RetryTransient),
	row(CodeUnknownPolicyVersion, 404, GRPCNotFound, RetryNever),
	row(CodePolicyDenied, 403, GRPCFailedPrecondition, RetryNever),
	row(CodeInvalidPolicyDefinition, 400, GRPCInvalidArgument, RetryNever),
	row(CodeUnauthorized, 403, GRPCPermissionDenied, RetryNever), // deprecated alias of FORBIDDEN
}

// unknownCode is the row of a code the registry does not have: 500, and
// FAILED_PRECONDITION on gRPC, final.
var unknownCode = row("", 500, GRPCFailedPrecondition, RetryNever)

var codeIndex = func() map[Code]int {
	m := make(map[Code]int, len(codeTable))
	for i, r := range codeTable {
		m[r.Code] = i
	}
	return m
}()

// Mapping returns c's row of the table; a code the registry does not have
// gets 500, FAILED_PRECONDITION, 4500 and RetryNever.
func (c Code) Mapping() Mapping {
	if i, ok := codeIndex[c]; ok {
		return codeTable[i]
	}
	m := unknownCode
	m.Code = c
	return m
}

// Known reports whether c is a code of the registry.
func (c Code) Known() bool {
	_, ok := codeIndex[c]
	return ok
}

// CodeTable returns every row of the table, in registry order (a new
// slice each call).
func CodeTable() []Mapping { return append([]Mapping(nil), codeTable[:]...) }
