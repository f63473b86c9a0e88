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
// instead of acting twice. SuspendSession and ResumeSession never act
// twice either, but a retry after a lost response that had succeeded is
// answered SESSION_NOT_OPEN (the session is already SUSPENDED, or OPEN
// again): on that code after a retry, GetSession tells which. Rejections
// (ack.ok false) are never retried.
//
// # Streams
//
// [Client.WatchSessions] and [Client.WatchSignals] return iterators. Each
// range opens one server stream and closes it when the loop ends; a failure
// is yielded once as the error, after which iteration stops. Ending ctx ends
// the iteration without an error. WatchSessions first reports every OPEN or
// SUSPENDED session the caller may see as CREATED, then lifecycle events
// (CREATED, RESOLVED, EXPIRED, SUSPENDED, RESUMED, CANCELLED) as they
// become durable; signals have no backlog.
//
// [Client.Subscribe] follows one session's accepted history: everything
// after a sequence number, then live envelopes. It numbers what it delivers,
// skips heartbeat Signals, and when the connection drops it reconnects with
// backoff and resumes after the last envelope it delivered, so the
// application sees one gap-free stream that ends when the session does
// (docs/resume.md).
//
// # Sessions, one helper per mode
//
// Each standard mode has a session helper with the same shape, made by a
// Client method with the session id ("" for a new one): [Client.Decision]
// (RFC-MACP-0007), [Client.Proposal] (0008), [Client.Task] (0009),
// [Client.Handoff] (0010), [Client.Quorum] (0011) and
// [Client.MultiRound] (ext.multi_round.v1). Each embeds [Session], which
// has Start, Commit, CommitOutcome, Suspend, Resume, Cancel, Metadata and
// Subscribe, and adds
// one method per message type of its mode (Propose, Vote, RequestApproval,
// Approve, Offer, Accept, ...). The initiator calls Start; every other
// participant makes its own helper for the same id with its own Client and
// never calls Start. Commit fills the commitment's id and version binding
// (mode_version, configuration_version, policy_version) from the session.
// [Client.Session] serves extension modes.
//
// # Lifecycle and profiles
//
// The initiator controls the lifecycle (RFC-MACP-0001 §7.2-7.5):
// Suspend moves an OPEN session to SUSPENDED (the runtime then refuses
// every message of it with SESSION_NOT_OPEN and its TTL stops), Resume
// moves it back to OPEN with the TTL it had left, and Cancel ends an OPEN
// or SUSPENDED session. What a cancel ends as depends on the profile the
// runtime bound the session to at SessionStart: CANCELLED under
// [ProfileLatest] (2026-09), EXPIRED under [ProfileApril] (2026-04, macpd's
// default). Each call's Ack carries the state reached. The profile is a
// runtime setting (MACP_PROFILE) that nothing on the wire names per
// session; [Client.Profile] reads the one the runtime announces for new
// sessions. [Client.ListSessionsPage] lists sessions a page at a time.
//
// # Superseding a commitment
//
// A Commitment may name an accepted Commitment of another session that it
// supersedes (CommitmentPayload.supersedes, RFC-MACP-0001 §7.3.1): the
// session id and that commitment's canonical hash. [CommitmentHash]
// computes the hash as RFC-MACP-0013 defines it (macp-commitment-hash/1:
// SHA-256 over the label and the RFC 8785 serialization of the nine
// payload fields; a test checks it against the spec's vectors and
// macpd's own implementation). Pass [Supersedes] (the prior payload),
// [SupersedesSession] (read from the prior session's history) or
// [SupersedesHash] to Commit or CommitOutcome; [SessionView.CommitmentRef]
// gives the reference to a projected session's Commitment. The runtime
// checks the reference's shape only (under 2026-09 the hash must be
// "sha256:" and 64 lowercase hex digits), never that it names a real
// commitment.
//
// # Projections
//
// A projection folds a session's accepted envelopes into its current
// state: [DecisionProjection], [ProposalProjection], [TaskProjection],
// [HandoffProjection], [QuorumProjection], [MultiRoundProjection]. Feed one
// the events of a subscription from sequence 0, or a stored history. Each
// has Eligible(), which says which Commitment outcomes the mode's base
// rules allow now (none while the session is SUSPENDED or after it ended),
// and the [SessionView] of every projection has State(): OPEN, SUSPENDED
// between the runtime's SessionSuspend and SessionResume records,
// RESOLVED, and after a SessionCancel record CANCELLED or EXPIRED by the
// view's Profile, which the caller sets before folding (the history does
// not carry it; "" is 2026-04). [DecisionProjection.CanPropose] follows
// the profile too (an initiator who is not a declared participant may
// propose under 2026-04 only). A test checks projections against the
// runtime's own session and mode logic on 10,000 random histories per
// mode and per profile, with suspend, resume and cancel calls among the
// messages. For a Decision session bound to another policy,
// [ParseDecisionRules] reads its rules and [DecisionProjection.EligibleUnder]
// applies the newest Decision rules (RFC-MACP-0007 §6.2, RFC-MACP-0012
// §4.1: vetoes and their actions, require_vote_quorum, the voting
// algorithms on the decisive tally, the decline guard), which the runtime
// uses for sessions of profile 2026-09 and for every session bound to a
// schema_version 2 or 3 policy; a test checks them against the runtime on
// 10,000 random policies and histories. The April rules (2026-04 with a
// schema_version 1 policy) are not modelled ([ErrAprilDecisionRules]), nor
// are other modes' policy rules, so there Eligible may be more permissive
// than the runtime. Projections do not re-validate their input; the
// runtime's Ack decides.
//
// # Agents
//
// An [Agent] is a participant that follows one session and reacts to it:
// it subscribes (resuming by itself after connection failures), keeps an
// optional projection current, and calls the [Handler] registered for each
// accepted envelope's message type, in history order. A handler replies
// with [Message.Reply] or any session helper. Run returns when the session
// ends, on [Agent.Stop] (graceful: the handler in progress finishes), or on
// a handler error.
//
// Suspension is reported, not hidden: an agent keeps running while its
// session is SUSPENDED, dispatches the runtime's SessionSuspend and
// SessionResume records to the handlers registered for
// [TypeSessionSuspend] and [TypeSessionResume] like any envelope, and
// [Agent.Suspended] says whether the last such record was a suspension.
// The agent does not hold back or queue anything: while the session is
// SUSPENDED no other envelope is accepted, so none is delivered, and a
// handler that sends anyway (say, from a SessionSuspend handler, or
// because it raced the suspension) gets SESSION_NOT_OPEN, which it may
// ignore or act on. Pausing is the application's choice: a handler that
// must not act during a suspension checks Suspended (or its projection's
// State) first. Agents reach the runtime through the [Transport]
// interface (Send and Follow); [*Client] implements it over gRPC, and any
// other binding that implements the two methods with the same resume
// guarantee runs the same agents.
//
// # Writing a Quorum agent
//
// A release manager asks three reviewers to approve a deployment, two
// approvals required (RFC-MACP-0011). With macpd running locally
// (MACP_ALLOW_INSECURE=1 go run ./cmd/macpd), the bearer token is the
// agent id.
//
// The release manager starts the session and requests approval; the
// participants are the voters:
//
//	rm, _ := sdk.Dial(ctx, "127.0.0.1:50051", sdk.WithInsecure(), sdk.WithBearer("release-manager"))
//	q := rm.Quorum("")
//	q.Start(ctx, "deploy v2.4", []string{"ana", "ben", "cai"}, 5*time.Minute)
//
// Each reviewer, in its own process, is an agent that answers the request.
// WithSelf keeps an agent from reacting to its own messages:
//
//	c, _ := sdk.Dial(ctx, addr, sdk.WithInsecure(), sdk.WithBearer("ana"))
//	a := sdk.NewAgent(c, sessionID, sdk.WithSelf("ana"))
//	a.Handle(sdk.TypeApprovalRequest, func(ctx context.Context, m *sdk.Message) error {
//		var req quorumv1.ApprovalRequestPayload
//		if err := m.Decode(&req); err != nil {
//			return err
//		}
//		_, err := m.Reply(ctx, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: req.RequestId, Reason: "tests pass"})
//		if sdk.CodeOf(err) == sdk.CodeSessionNotOpen {
//			return nil // the quorum was reached without this ballot
//		}
//		return err
//	})
//	err := a.Run(ctx) // nil once the session resolved
//
// The release manager's own agent keeps a [QuorumProjection] and commits
// as soon as the outcome is decided; ballots accepted before its
// Commitment may still be delivered after it was sent, hence the flag:
//
//	proj := sdk.NewQuorumProjection()
//	ra := sdk.NewAgent(rm, q.ID, sdk.WithProjection(proj))
//	done := false
//	decide := func(ctx context.Context, m *sdk.Message) error {
//		approve, reject := proj.Eligible()
//		switch {
//		case done:
//		case approve:
//			done = true
//			_, err := q.CommitOutcome(ctx, "quorum.approved", true, "two approvals")
//			return err
//		case reject:
//			done = true
//			_, err := q.CommitOutcome(ctx, "quorum.rejected", false, "cannot reach two")
//			return err
//		}
//		return nil
//	}
//	ra.Handle(sdk.TypeApprove, decide).Handle(sdk.TypeReject, decide).Handle(sdk.TypeAbstain, decide)
//	go ra.Run(ctx)
//	q.RequestApproval(ctx, "deploy-v2.4", "deploy v2.4 to production", "", 2)
//
// Every call returns an Ack or an [*Error] with the MACP code: a second
// ballot from the same reviewer is INVALID_ENVELOPE, a ballot from a
// non-participant FORBIDDEN, a Commitment before the threshold
// INVALID_ENVELOPE. The complete program, which checks its outcome, is
// examples/quorum in the macpd repository (go run ./examples/quorum).
//
// # Policies
//
// [NewPolicy] builds a policy descriptor (RFC-MACP-0012) and
// [Client.RegisterPolicy], [Client.GetPolicy], [Client.ListPolicies],
// [Client.UnregisterPolicy] and [Client.WatchPolicies] manage the
// registry. A session binds a registered policy with its helper's
// PolicyVersion field before Start.
//
// # Retry classification
//
// Transport failures (gRPC Unavailable) are retried by [WithRetry] and by
// subscriptions. Among MACP codes, [Code.Retryable] is true only for
// RATE_LIMITED (retry after a backoff) and INTERNAL_ERROR (resend the
// identical envelope, message_id included, with [Client.Send]: if the first
// attempt was accepted after all, the retry is answered ok with
// duplicate=true; the helper methods make a new message_id per call, so
// calling one twice sends two messages). Every other code is final for the
// request. [Codes] lists the registry; a test keeps it equal to the
// runtime's.
package sdk
