// Package conformance runs MACP conformance fixtures (the spec's
// schemas/conformance format, checklist §8) against a Target: the runtime
// in-process, or any MACP runtime over gRPC (macpctl conformance).
//
// Fixture format (spec): mode, initiator, participants, mode_version,
// configuration_version, policy_version, ttl_ms; messages[] of {sender,
// message_type, payload_type, payload, expect: accept|reject,
// expected_error_code?}; expected_final_state (Open|Resolved|Expired or
// SESSION_STATE_*); optional expect_resolution_present, expected_resolution
// (subset of the resolving CommitmentPayload) and expected_mode_state
// (subset of the mode's state projection; in-process only).
//
// macpd extensions (used by testdata/conformance, ignored by nothing in the
// spec format): a message may set message_id (default m<i>) so duplicates
// can be expressed, expect "duplicate" (ok=true, duplicate=true),
// payload_b64 (raw payload bytes instead of payload), mode (override the
// envelope mode), action "cancel" (CancelSession by sender with reason) or
// "wait" (wait_ms of time passes: slept over gRPC, a clock step
// in-process). A fixture may set "start_expect": "reject" with
// "start_expected_error_code" to test SessionStart rejections, and
// "start_extra" to merge extra SessionStartPayload fields.
package conformance
