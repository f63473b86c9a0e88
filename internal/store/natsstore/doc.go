// Package natsstore is the store.Store on NATS JetStream (MACP_STORE=nats):
// the history of every session in one replicated stream, shared by every
// macpd node connected to the same NATS cluster. It passes the shared
// suite in storetest, like pebblestore and memstore.
//
// # Layout
//
//	stream  <name>_history   subjects <name>.hist.>   (file storage, R<replicas>,
//	                                                   atomic batch publish on, deletes denied)
//	subject <name>.hist.<base64url(session id)>       one session's history
//	bucket  <name>_meta      key k<hex(meta key)>      PutMeta/DeleteMeta/ListMeta
//
// <name> is Options.Name (MACP_NATS_NAME, default "macp"). The session id
// is base64url-encoded without padding, so any id the store accepts (no
// NUL) is one subject token.
//
// A message on a session's subject holds the records of one Append call
// for that session (more messages only if they exceed the connection's
// max payload), each record in the binary format of package record (which
// carries its hash chain), each preceded by its length as a uvarint.
// Headers: Macp-Seq (Seq of its first record), Macp-Count (records in it),
// Macp-Append (a random id of the Append call).
//
// # Acceptance is established by the stream
//
// Append publishes all of its messages as one JetStream atomic batch (a
// single message is a plain publish); the first message of each session
// carries Nats-Expected-Last-Subject-Sequence: the stream sequence of the
// session's last message as this store last saw it (0 for a new session).
// The stream leader checks it, in its replicated log's order, against
// every other writer's messages: so at most one append can follow any
// given state of a session, whichever macpd node sent it, and a batch is
// stored whole or not at all. A refused expectation makes the store reload
// the session's last message: if the caller's records still continue it
// (the cached tip was merely stale) the append is retried, otherwise it is
// store.ErrConflict, exactly as for a single-node store. Append returns nil
// only after the stream acknowledged the batch, that is after a quorum of
// the stream's replicas stored it (2 of 3 for R3): that is what "durable"
// means here. Each JetStream server's own fsync policy (sync_interval)
// decides whether a simultaneous power loss of a quorum can lose it
// (docs/cluster.md).
//
// An append whose answer is lost (a timeout, a connection lost mid
// request) has an unknown outcome. The store resolves it before it
// returns: it reads the first message stored on the first session's
// subject after the expected sequence; the Append's id there means stored,
// another id means conflict, nothing means not stored yet, and the same
// batch is published again with the same expectations (only one attempt
// can match them). If that is still undecided after Options.ResolveTimeout,
// the store fails closed with store.ErrFailed, like a failed fsync in
// pebblestore: the process must restart.
//
// # Reads
//
// Read walks the session's messages in stream order (a direct request to
// the stream leader per message, "next message on subject") and checks the
// chain from record 1. Info is the session's last message (one request).
// List asks the stream for its subjects and then reads each session's last
// message; ListOpen filters List, so unlike pebblestore its cost grows
// with all stored sessions, not only the OPEN ones. Purge purges the
// session's subject. A record that fails its self hash or the chain
// quarantines the session in this store value (Info reports it).
//
// The store caches each session's last stream sequence, Seq and hash after
// its own appends and reads; the cache is only a guess for the next
// expectation, never trusted for correctness.
package natsstore
