// Package store defines the boundary to the append-only history of accepted
// records (RFC-MACP-0001 §8.4, RFC-MACP-0003 §4): the Store interface that
// every implementation satisfies, and the sentinel errors callers branch on.
//
// Implementations: memstore (in-memory twin, used for tests and
// MACP_MEMORY_ONLY=1). Every implementation passes the shared suite in
// storetest.
//
// Ordering contract: within one session, records are numbered 1..N without
// gaps. Append refuses a record whose Seq does not continue the stored
// history of its session (ErrConflict), so a caller that lost track of what
// is stored can never write a gap or a fork. An Append call is atomic: all
// of its records become durable together, or none do.
package store
