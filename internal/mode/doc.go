// Package mode defines the coordination-mode contract (RFC-MACP-0002) and the
// explicit registry of modes a runtime offers.
//
// A Mode is pure: Start and State.Step/Commit take values and return errors;
// they never read the clock, do I/O, start goroutines or depend on map
// iteration order. That is what makes replay of an accepted history
// reproduce the same states and accept/reject decisions (RFC-MACP-0003).
//
// Division of labour with the session core (internal/session):
//   - the core handles everything mode-independent: envelope shape,
//     idempotency, lifecycle, TTL, the Commitment payload shape, its version
//     binding and commitment authority (policy commitment.authority);
//   - the mode handles its own message types: authority first (FORBIDDEN),
//     then payload and phase validation (INVALID_ENVELOPE), then applies;
//     and, for a Commitment, eligibility (INVALID_ENVELOPE) and the bound
//     policy's mode-specific rules (POLICY_DENIED).
//
// Every State method either returns nil and has applied the message, or
// returns an error and has changed nothing. Each mode lives in its own
// sub-package and passes the shared suite in internal/mode/modetest.
package mode
