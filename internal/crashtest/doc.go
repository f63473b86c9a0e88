// Package crashtest holds the crash test of issue #4 item 8: macpd runs as a
// subprocess on a durable data directory under concurrent load
// (internal/bench/loadgen: unary Sends, and pipelined StreamSession calls
// whose envelopes are acknowledged by their echo on the stream, and a
// control workload that suspends, resumes and cancels sessions through
// SuspendSession, ResumeSession and CancelSession), is killed
// with SIGKILL at random moments and at fixed
// points (right after the N-th ack, during write bursts), restarted on the
// same directory, and its histories are then checked: nothing acknowledged
// is lost, duplicated or reordered, nothing that was not sent or was
// rejected appears, sequence numbers are gapless, every session's state
// agrees with its history, sessions left OPEN by a crash take more
// envelopes after recovery, and after a last SIGKILL the store read
// offline agrees with what the server served and passes what "macpctl
// verify" runs (internal/replay/verify: chain check and full replay).
//
// Profiles: the macpd incarnations alternate MACP_PROFILE on the one data
// directory (unset = 2026-04, latest, 2026-04, 2026-09, ...). Every
// SessionSuspend, SessionResume and SessionCancel record an ok Ack named
// is in history exactly once, in ack order with the session's other
// envelopes; a runtime record no ok Ack named must belong to a call that
// got no answer; the Ack's state and the session's state are what the
// history gives under the session's profile (a cancellation ends a
// 2026-04 session EXPIRED, a latest one CANCELLED), the profile being that
// of the incarnation that answered the SessionStart, also in the stored
// start record; ListOpen lists exactly the OPEN and SUSPENDED sessions;
// sessions left SUSPENDED by a crash resume after recovery. Before its
// kill can come, each incarnation leaves one session SUSPENDED and takes
// one through suspend, resume and cancel (the resumptions after recovery
// leave these alone), so both profiles have every control call and end
// state whatever the kill schedule. Every session
// is started by p1, a declared participant, so its Proposals are accepted
// under both profiles.
//
// The package has tests only. Run it repeatedly with scripts/crash-loop.sh;
// MACP_CRASH_SEED reproduces a run's kill schedule, MACP_CRASH_ROUNDS
// changes the number of kill/restart rounds, MACP_CRASH_KEEP=1 keeps the
// work directory (data, macpd logs, acked logs) of a passing run (a failing
// run always keeps it and logs where), MACP_CRASH_MACPD_ENV adds
// space-separated NAME=value settings to macpd's environment (for example
// MACP_MEMORY_ONLY=1, under which the test must fail: it shows that it
// catches lost acks).
package crashtest
