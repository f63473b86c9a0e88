// Package runtime is the imperative shell around the pure session core: it
// owns every live session, serializes acceptance per session, makes records
// durable before anything is acknowledged or published, fires TTL expiry on
// time, and fans accepted envelopes, signals and lifecycle events out to
// subscribers.
//
// Ordering contract for one accepted envelope (compare etcd-io/raft's
// Ready handling):
//  1. Under the session's lock, the core decides (session.Session.Step) and
//     the resulting records are queued to the committer. The lock is then
//     released, so the session's next envelope can be decided while this
//     one is being written (pipelining).
//  2. The committer appends queued records of many sessions in one
//     store.Append (group commit) and, once durable, runs each request's
//     completion in queue order: the session's durable sequence advances,
//     subscribers and lifecycle watchers are notified.
//  3. Only then is the caller's Ack returned.
//
// If an append fails, the session's in-memory state is ahead of the store:
// the owner is marked failed, every waiter gets INTERNAL_ERROR, and the
// next access rebuilds the session from the store by replay. Later records
// of that session that were already queued are refused by the store's
// sequence check, so no gap or fork can be written.
//
// Reads (GetSession, ListSessions) show only durable state: a read that
// finds records still in flight waits for them.
//
// Goroutines: the committer, the TTL timer loop, and one per subscriber
// stream (owned by the transport). Lock order: owner.mu before Runtime.mu (a
// new owner is locked before it is published in the map); never hold an
// owner lock while waiting for durability.
package runtime
