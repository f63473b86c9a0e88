// Package snapshotio is the I/O around the pure package snapshot: it reads
// a session's durable history (Source; StoreSource over a store.Store,
// bounded to what a running server made durable), computes and caches
// sealed payloads and reports (Service), serves them over HTTP
// (Service.Handler: GET /macp/session/{id}/state-window and GET
// /macp/snapshots/{ref}, each request authorized by the binding's
// Authorize callback), writes snapshot files after terminal transitions
// (Writer, WriteFiles) and builds a snapshot Input from a remote runtime
// over gRPC (FromRuntime, ReadHistory; the session's protocol profile,
// which SessionMetadata does not carry, from macpd's GetSession response
// header coord.HeaderSessionProfile, else by snapshot.WireProfile with
// the runtime's manifest profile). Files are written when a session ends
// (RESOLVED, EXPIRED, CANCELLED), never for a SUSPENDED one.
//
// Contract: Service's methods return *coord.Error (SESSION_NOT_FOUND,
// INVALID_ENVELOPE for a bad query, INTERNAL_ERROR otherwise) and are
// safe for concurrent use; its HTTP error bodies carry the MACP code with
// the code's HTTP status. Writer runs on its own goroutine (the caller
// starts Run) with a bounded queue: Enqueue never blocks, and a full queue
// drops the session (counted by Stats); files are synced and renamed into
// place. Nothing here is on the acceptance path.
package snapshotio
