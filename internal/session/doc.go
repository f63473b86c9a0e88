// Package session is the pure core of macpd: the per-session state machine
// of RFC-MACP-0001 §7-8 (admission, idempotency, lifecycle) that every
// transport and the replay path share.
//
// Contract:
//   - Values in, values out. Time is an input (nowMs); the core never reads
//     the clock, does I/O, starts goroutines, draws random numbers or
//     depends on map iteration order. The shell (internal/runtime) owns one
//     Session per session id and serializes calls on it.
//   - A call that rejects an envelope changes nothing: no state, no
//     sequence number, no dedup slot (RFC-MACP-0001 §8.3).
//   - A call that accepts returns the Records to append to the session's
//     history, in order. The caller must make them durable before it
//     acknowledges or publishes them; if it cannot, it must discard this
//     Session value and rebuild it from the stored history (Restore+Apply),
//     because the Session already reflects the records.
//   - Replay: Restore(start record) followed by Apply(record) for every
//     later record re-runs the same admission decisions with the recorded
//     times, so an accepted history always replays to the same state, and a
//     record that would now be rejected is reported as divergence
//     (RFC-MACP-0003 §4).
//
// Admission order for a session-scoped envelope (after the shell checked
// transport, authentication and deployment admission):
//  1. structure (CheckEnvelope): version, required fields, payload size
//  2. idempotency: a message_id already accepted in this session is a
//     duplicate (ok=true, duplicate=true), even after the session ended
//  3. envelope mode must equal the session mode
//  4. deadline passed: the session expires now (an Expire record) and the
//     envelope is rejected SESSION_NOT_OPEN
//  5. the session must be OPEN (SESSION_NOT_OPEN)
//  6. Commitment: authority (FORBIDDEN), payload shape and version binding
//     (INVALID_ENVELOPE), then the mode's eligibility and policy
//     (INVALID_ENVELOPE / POLICY_DENIED); other types: the mode's Step
//     (FORBIDDEN, then INVALID_ENVELOPE)
//  7. commit: next sequence number, dedup slot, participant activity,
//     mode state; a Commitment resolves the session.
package session
