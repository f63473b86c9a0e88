// Package store defines the boundary to the append-only history of accepted
// records (RFC-MACP-0001 §8.4, RFC-MACP-0003 §4): the Store interface that
// every implementation satisfies, and the sentinel errors callers branch on.
//
// Implementations: pebblestore (the embedded durable default, data under
// MACP_DATA_DIR), natsstore (NATS JetStream, shared by several macpd nodes,
// MACP_STORE=nats) and memstore (in-memory twin, used for tests and
// MACP_MEMORY_ONLY=1). Both store records in the binary format of package
// record, which also computes the integrity chain; package replay/verify
// checks a store offline (macpctl verify). The meta space (PutMeta,
// ListMeta) holds what package registry stores: extension-mode and policy
// registrations, in the formats package registry defines. Every implementation passes the shared
// suite in storetest.
//
// Ordering contract: within one session, records are numbered 1..N without
// gaps. Append refuses a record whose Seq does not continue the stored
// history of its session (ErrConflict), so a caller that lost track of what
// is stored can never write a gap or a fork. An Append call is atomic: all
// of its records become durable together, or none do, with one sync for
// the whole call whatever sessions it mixes (group commit is the caller
// batching records into one call).
//
// Integrity (RFC-MACP-0003 §6): each record carries Hash = SHA-256(PrevHash
// || canonical bytes of the record) chained to the previous record of its
// session (PrevHash of record 1 = ZeroHash); the last record's Hash of a
// terminal session is its final session hash. Reads check the chain.
//
// Errors: ErrNotFound, ErrConflict, ErrInvalid, ErrNotTerminal for the
// caller's mistakes; ErrCorrupt (wrapped, naming the session and record)
// for stored data that fails verification, confined to its session, which
// is then reported quarantined (SessionInfo.Quarantined); ErrFailed once a
// write's outcome is unknown (a failed fsync): the store then refuses
// everything until the process restarts; ErrClosed after Close.
package store
