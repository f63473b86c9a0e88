// Package runtime is the imperative shell around the pure session core: it
// owns every live session, serializes acceptance per session, makes records
// durable before anything is acknowledged or published, fires TTL expiry on
// time, and fans accepted envelopes, signals and lifecycle events out to
// subscribers.
//
// Ordering contract for one accepted envelope (compare etcd-io/raft's
// Ready handling):
//  1. Under the session's lock, the core decides (session.Session.Step) and
//     the resulting records are submitted to the group committer. The lock
//     is then released, so the session's next envelope can be decided
//     while this one is being written (pipelining).
//  2. The committer (commit.go, whose contract is stated there as numbered
//     steps) appends the records of many sessions in one store append and,
//     once durable, runs each request's completion in queue order: the
//     session's durable sequence advances, subscribers and lifecycle
//     watchers are notified.
//  3. Only then is the caller's Ack returned. SendPipelined (pipeline.go)
//     returns after step 1 and hands the caller a wait for step 3, so one
//     caller (a StreamSession) can have many envelopes of a session in
//     flight; the Acks are Send's.
//
// If an append fails, the session's in-memory state is ahead of the store:
// the owner is marked failed, every waiter gets INTERNAL_ERROR, and the
// next access rebuilds the session from the store by replay (heal,
// owner.go), once the session's queued requests have been answered. An
// expiry that cannot be stored is retried by the timer.
//
// Where things are: send.go is the write path (Send, then each step it
// takes, top to bottom: admission, start, step, cancel, waiting for the
// commit); commit.go the group committer; owner.go the per-session owner and
// its rebuild; read.go the read path; timers.go the deadline heap and TTL
// expiry; load.go loading, recovery and housekeeping; follow.go followers;
// cluster.go the shared store (cluster feed, catch-up); forward.go the
// Forwarder (calls served on a session's owner node); streams.go and hubs.go
// the names re-exported from packages streambudget and hub. Every "now" and
// every timer a rule depends on (TTL expiry, overdue sessions at recovery,
// retention and eviction, the commit-wait bound, the stream stall limit, the
// instant a stream opened) comes from Options.Clock (package clock; the wall
// clock unless a test injects clocktest.Fake).
//
// What the runtime does not own: the registries of extension modes and
// policies (package registry; New takes only the lookups the core
// resolves a SessionStart against, session.Modes and policy.Lookup, and
// replays with the modes' ReplayModes when they offer it, ReplayModer),
// which must be loaded before Start recovers sessions; the fold of stored
// records through the core (package replay: recovery, heal, the cluster
// feed's adoption); the accounting of stream buffers (package
// streambudget; Runtime.StreamBudget is the runtime's one budget); and
// the fan-out hubs (package hub).
//
// Reads (GetSession, ListSessions) show only durable state: a read that
// finds records still in flight waits for them. So do answers that write
// nothing but were decided on that state (a duplicate, a rejection, an
// idempotent cancel): they wait for a barrier queued behind the session's
// in-flight records and fail with INTERNAL_ERROR if one of those was lost.
// Follow-ups of a commit (releasing an initiator's open-session slot,
// forgetting a session whose SessionStart was not stored) run on the
// commit's outcome, not on the caller's context.
//
// Metrics (Options.Metrics, metrics.go; nil = off) are counted per group
// by the completer once the group's outcome is known, with atomics only;
// the session and follower gauges are read at scrape time.
//
// Goroutines: the committer and its completer, one relay per followed
// session (it wakes the session's followers after each commit; it ends with
// the last follower), the TTL timer loop, one short-lived worker per
// fired deadline (Close waits for them), with a shared store one
// catch-up worker per session copy the cluster feed could not extend
// (cluster.go; tracked, paced by Options.Clock, Close waits for it), and
// one per subscriber stream
// (owned by the transport). Lock order: owner.mu before Runtime.mu (a new
// owner is locked before it is published in the map). Never hold an owner
// lock while waiting for durability, except heal, which waits under it for
// its own session's queued requests: the committer answers them without
// taking any owner lock.
package runtime
