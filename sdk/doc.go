// Package sdk is the Go client for MACP runtimes such as macpd: it dials
// the gRPC binding (macp.v1.MACPRuntimeService), authenticates every call,
// builds envelopes, and turns rejections into typed errors.
//
// # Connecting
//
// [Dial] returns a [Client]. Transport security is TLS with the system
// roots unless [WithTLSConfig] or [WithInsecure] (plaintext, development
// only) says otherwise. [WithBearer] sends "authorization: Bearer <token>"
// with every call; against macpd started with MACP_ALLOW_INSECURE=1 the
// token is the agent id itself. Dial does not wait for the connection: the
// first call makes it, and [Client.Initialize] is the usual first call
// (it negotiates protocol version "1.0", RFC-MACP-0001 §4). Close the
// client when done. One Client is safe for concurrent use and carries one
// identity; use one Client per agent.
//
// # Sending
//
// [Client.Send] submits one envelope and returns its Ack:
//
//   - ok: the error is nil. ack.Duplicate is true when the runtime had
//     already accepted this message_id in this session (RFC-MACP-0001
//     §8.2); nothing happened twice.
//   - rejected (ack.ok is false): Send returns the Ack and an [*Error]
//     carrying the MACP code (FORBIDDEN, SESSION_NOT_OPEN, ...), message and
//     details from ack.error.
//   - transport failure: the gRPC status error. If the status carries a
//     macp.v1.MACPError detail (for example UNAUTHENTICATED), it is returned
//     as an [*Error] whose Unwrap is the status error.
//
// Send fills in an envelope's empty macp_version ("1.0"), message_id (a new
// UUID) and timestamp_unix_ms (now) on a copy; the sender is always bound by
// the runtime to the authenticated identity (RFC-MACP-0004 §3), so builders
// leave it empty. The builders ([NewEnvelope], [NewSessionStart],
// [NewCommitment], [NewSignal], [NewProposal], [NewEvaluation],
// [NewObjection], [NewVote]) fill all three themselves.
//
// # Errors
//
// Every other RPC reports failure as a gRPC status; when the status names a
// MACP code (in a MACPError detail, or as the "CODE: " prefix of its message)
// the method returns an [*Error]. [CodeOf] extracts the code of any error
// (the empty Code when it carries none), and errors.Is(err,
// &sdk.Error{Code: sdk.CodeForbidden}) matches on the code alone.
//
// # Retries
//
// With [WithRetry](n), unary calls that fail with gRPC Unavailable (the
// runtime is unreachable or restarting) are retried up to n more times with
// exponential backoff and jitter, until ctx ends. Every unary RPC is safe to
// repeat: reads have no effect, CancelSession of a terminal session answers
// its state, and Send resends the identical envelope with the same
// message_id, so a retry after a lost response is answered as a duplicate
// instead of acting twice. Rejections (ack.ok false) are never retried.
//
// # Streams
//
// [Client.WatchSessions] and [Client.WatchSignals] return iterators. Each
// range opens one server stream and closes it when the loop ends; a failure
// is yielded once as the error, after which iteration stops. Ending ctx ends
// the iteration without an error. WatchSessions first reports every OPEN
// session the caller may see as CREATED, then lifecycle events as they
// become durable; signals have no backlog.
//
// [Client.Subscribe] follows one session's accepted history: everything
// after a sequence number, then live envelopes. It numbers what it delivers,
// skips heartbeat Signals, and when the connection drops it reconnects with
// backoff and resumes after the last envelope it delivered, so the
// application sees one gap-free stream that ends when the session does
// (docs/resume.md).
//
// # Decision Mode
//
// [DecisionSession] wraps one macp.mode.decision.v1 session (RFC-MACP-0007):
// Start, Propose, Evaluate, Object, Vote, Commit, Cancel and Metadata. Each
// participant makes its own DecisionSession for the same id with
// [Client.Decision]. Commit fills the commitment's id and version binding
// (mode_version, configuration_version, policy_version) from the session.
package sdk
