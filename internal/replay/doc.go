// Package replay is the one fold of stored records through the core
// (RFC-MACP-0003 §4): record 1 restores the session from its SessionStart
// record (session.Restore), every later record is re-applied with its
// recorded time (session.Apply). Recovery at boot and on demand, the
// rebuild of a broken copy, the cluster feed's adoption of sessions
// started elsewhere (internal/runtime), offline verification
// (replay/verify), snapshots (internal/snapshot), the conformance runner's
// replay-equivalence check (conformance/inproc) and the recovery
// benchmark (bench/benchrec) all fold through it; no other package calls
// session.Restore.
//
// Contract:
//  1. A fold reads nothing but its records and Options: the SessionStart
//     record carries everything the session needs (bound mode and
//     configuration versions, the resolved policy descriptor, the
//     deadline, the acceptance time and the profile the session was
//     started under, "2026-04" or "latest"), so replay never reads a live
//     registry, the configured profile or the clock. Every record kind
//     folds, the runtime's control records included (cancel, expire,
//     suspend, resume, implicit actions).
//  2. Options.Modes resolves the bound modes (with the runtime's
//     registry: retired extension modes too); Options.Limits are the
//     limits records are re-applied under; Options.Records sizes the dedup
//     set up front.
//  3. A record the core refuses is an *Error (its text the core's; Unwrap
//     reaches the *coord.Error), numbered in the fold (N) and by sequence
//     (Seq). Options.Check runs after each folded record with the session
//     as it stands (Step) and may end the fold with its own error, which is
//     returned unwrapped. A Reader's own errors (store.ErrNotFound, a
//     corrupt record, a cancelled context) are returned as they are; a
//     history with no record gives a nil session and no error.
//  4. Redecide (whatif.go) is the what-if twin: it re-decides every stored
//     envelope through the admission path under another bound policy,
//     mode version or protocol profile (Rebind.Profile: a 2026-04 session
//     under latest rules and back), and reports each envelope's fate and
//     the state it leaves; the first divergence is the first envelope
//     refused, or accepted into another state than the stored record's.
//
// The package is pure (internal/lint): no clock, no goroutines, no locks;
// its only I/O is the Reader it is given.
package replay
