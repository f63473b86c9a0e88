// Package conformance runs MACP conformance fixtures (the spec's
// schemas/conformance format, checklist §8) against a Target: the runtime
// in-process (package inproc), or any MACP runtime over gRPC (GRPC, used
// by macpctl conformance).
//
// Two fixture formats are read; Load detects the format of each file on
// its own, so a directory may hold either or both (LoadDirs skips a
// directory's schema.json):
//
// FormatLatest (the spec's newest schemas/conformance/schema.json): a file
// is in this format when a message names a fully-qualified payload_type
// (macp.v1.CommitmentPayload, macp.modes.decision.v1.ProposalPayload,
// macp.modes.multi_round.v1.ContributePayload, ...). Load holds it to the
// schema: the required keys, no other keys except "_"-prefixed annotations
// (ignored), expect accept|reject, every payload_type fully qualified,
// expected_final_state Open|Suspended|Resolved|Expired|Cancelled. Top level
// may carry description, policy (an inline PolicyDescriptor: policy_id,
// mode, description, schema_version, rules as a JSON object; policy_version
// must name it), expected_resolution, expected_mode_state,
// expect_resolution_present and verify_replay_equivalence. One deviation
// from schema.json: participants may be empty (the spec's own
// decision_zero_participants fixture declares none).
//
// FormatApril (the spec at 17ca7a1): short payload_type names
// ("Commitment", "decision.Proposal", "multi_round.Contribute", ...), and
// macpd's extensions, used by testdata/conformance: a message may set
// message_id (default m<i>) so duplicates can be expressed, expect
// "duplicate" (ok=true, duplicate=true), payload_b64 (raw payload bytes
// instead of payload), mode (override the envelope mode), action "cancel"
// (CancelSession by sender with reason) or "wait" (wait_ms of time passes:
// slept, in-process too, so TTL timers fire as in production). A fixture may set
// "start_expect": "reject" with "start_expected_error_code" to test
// SessionStart rejections, and "start_extra" to merge extra
// SessionStartPayload fields.
//
// Payloads (EncodePayload): JSON with proto field names into the named
// message, encoded as protobuf; bytes fields may be UTF-8 strings or byte
// arrays; a CommitmentPayload without outcome_positive is positive (both
// formats, as the reference runtime's harness does). Only the April
// multi_round.Contribute is sent as the JSON itself; the latest
// macp.modes.multi_round.v1.ContributePayload is protobuf.
//
// Run, for one fixture and a fresh session id:
//
//  1. Registers the inline policy, if any, as the initiator through the
//     target's PolicyRegistrar. A policy id already registered with the same
//     mode, schema_version (0 = 1) and rules (compared as JSON values) counts
//     as registered, so fixtures sharing a policy, parallel runs and re-runs
//     against one runtime pass; the same id with other rules fails the
//     fixture, and so does a target that cannot register policies.
//  2. Sends the implicit SessionStart (CONF-1, CONF-10), then each message
//     as its sender, comparing each outcome with expect and
//     expected_error_code.
//  3. Compares the final state (GetSession); with an Inspector (in-process)
//     also the resolution, the mode state (subset match, CONF-15) and replay
//     equivalence, the latter for every fixture. A target without one lists
//     those expectations in Result.Unchecked; they are not counted as
//     checked.
//
// Every failure names the step: "message N (sender type): expected reject
// CODE, got accept" or "... got reject OTHER (message)", N counting
// messages from 1; callers prefix the fixture name.
package conformance
