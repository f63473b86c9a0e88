// Package natsstore is the store.Store on NATS JetStream (MACP_STORE=nats):
// the history of every session in replicated streams (partitions by
// session id), shared by every macpd node connected to the same NATS
// cluster. It passes the shared suite in storetest, like pebblestore and
// memstore.
//
// # Layout
//
//	streams <name>_history_<p>, p = 0..P-1     subjects <name>.hist.<p>.>   (file storage, R<replicas>,
//	                                                                        atomic batch publish on, deletes denied)
//	subject <name>.hist.<p>.<base64url(session id)>     one session's history
//	bucket  <name>_meta      key k<hex(meta key)>     PutMeta/DeleteMeta/ListMeta
//	                         key layout               {"partitions":P}
//
// <name> is Options.Name (MACP_NATS_NAME, default "macp"). The session id
// is base64url-encoded without padding, so any id the store accepts (no
// NUL) is one subject token. A session's partition p is FNV-1a (32 bits)
// of its id modulo P: all of a session's messages are in one stream, and
// the streams' leaders (each stream its own Raft group) spread over the
// NATS servers, so appends to different sessions are ordered and
// replicated by different servers.
//
// P (Options.Partitions, MACP_NATS_PARTITIONS) is fixed when a deployment
// is created and recorded in the meta bucket (key layout); every later
// Open uses the recorded value, and one that asks for another fails with
// an error naming both. With P = 1 the names are those of the layout from
// before partitions: stream <name>_history, subjects <name>.hist.<base64url(id)>.
// A deployment from before partitions (that stream, no layout key) is
// recorded as P = 1 at its first Open and keeps its stream: its history
// stays readable and writable as it is; moving it to more streams would
// be a copy, which no macpd node does.
//
// A message on a session's subject holds the records of one or more
// Append calls for that session, in order (more messages only if they
// exceed the connection's max payload), each record in the binary format
// of package record (which carries its hash chain), each preceded by its
// length as a uvarint. Headers: Macp-Seq (Seq of its first record),
// Macp-Count (records in it), Macp-Append (the id of the publish: 16 hex
// digits naming the store value that wrote it, 16 random ones; Own).
//
// # Acceptance is established by the stream
//
// Append publishes each session's records as one message (several, as
// one JetStream atomic batch, only if they exceed the max payload: a
// session's records share their fate, sessions do not); the first message
// carries Nats-Expected-Last-Subject-Sequence: the stream sequence of the
// session's last message as this store last saw it (0 for a new session).
// The stream leader checks it, in its replicated log's order, against
// every other writer's messages: so at most one append can follow any
// given state of a session, whichever macpd node sent it. A refused
// expectation makes the store reload the session's last message: if the
// caller's records still continue it (the cached tip was merely stale) the
// append is retried, otherwise it is store.ErrConflict, exactly as for a
// single-node store. Append returns nil only after the stream acknowledged
// every session's message, that is after a quorum of the stream's
// replicas stored it (2 of 3 for R3): that is what "durable" means here.
// Each JetStream server's own fsync policy (sync_interval) decides whether
// a simultaneous power loss of a quorum can lose it (docs/cluster.md).
//
// An Append that mixes sessions is checked whole before anything is sent
// (each session's records against what the store knows of the session):
// a record that does not continue its session is ErrConflict and nothing
// is written, as the Store interface says. Only another node's append,
// landing between that check and the stream's, can refuse one session's
// message while the others' are stored: Append then returns ErrConflict
// and those others are in the store. A caller that decides again from the
// store (the runtime's retry on a shared store: rebuild by replay, then
// dedup by message_id) finds them stored.
//
// An append whose answer is lost (a timeout, a connection lost mid
// request) has an unknown outcome. The store resolves it before it
// returns, per session: it reads the first message stored on the
// session's subject after the expected sequence; the publish's id there
// means stored, another id means conflict, nothing means not stored yet,
// and the same message is published again with the same expectation (only
// one attempt can match it). If that is still undecided after
// Options.ResolveTimeout, the store fails closed with store.ErrFailed,
// like a failed fsync in pebblestore: the process must restart.
//
// # Pipelined appends
//
// Store implements store.Pipeliner. AppendAsync checks the records and
// queues each session's part; a session with nothing in flight is
// published at once (a request whose answer a goroutine waits for, many
// in flight on the connection), a session with a part in flight waits for
// that part's acknowledgement, whose stream sequence is the next
// expectation, and then goes out together with every part of the session
// queued behind it (one publish per round trip for a hot session). So a
// session's appends are stored in the order they were started and the
// fencing is the same as Append's. The wait returns when every part of the
// call was acknowledged (same durability as Append), or the first error;
// a part queued on one that failed is ErrConflict (it continued records
// that were not stored) and is not sent; once the store failed closed
// every later wait fails with ErrFailed.
//
// A caller that pipelines learns of a failed part only from its wait, and
// may meanwhile have started appends decided on the records that were not
// stored. A part queued behind the failed one fails with it; one started
// after it was settled would find the session's stored tip and could
// continue it by sequence number alone. So Store implements store.Fencer:
// once a part of a session failed, every later AppendAsync or Append
// holding records of the session is ErrConflict (nothing of that call is
// written) until Unfence(session), which the runtime calls when it
// rebuilds the session from the store with nothing of it in flight. A
// fence costs one map entry per session, kept until Unfence.
//
// # Reads
//
// Read first gets the session's last message. When that message holds the
// record before from (a copy catching up) or the session's first record,
// it reads that message only and checks the chain from its first record.
// Otherwise it walks the session's messages in its stream's order and
// checks the chain from record 1: a session of Options.ConsumerReadMin
// records or more (DefaultConsumerReadMin) through an ephemeral pull
// consumer (no acks, in memory, one replica) filtered on the session's
// subject, fetched in batches up to the last message seen and then
// deleted (three round trips
// whatever the length: 3.7-5.3 times faster than one request per message
// for 100 messages on an R3 cluster, 2.0-2.3 for 32, even at 16,
// BenchmarkReadLongSession); what the
// consumer did not deliver (it could not be made, or timed out) and
// anything appended since are read one request per message ("next
// message on subject"), from where it stopped. The records handed to fn
// are the same either way. Info is the session's last
// message (one request). List asks every partition's stream for its
// subjects and then reads each session's last message (16 requests in
// flight, summaries handed on in id order); ListOpen filters
// List, so unlike pebblestore its cost grows with all stored sessions,
// not only the OPEN ones. Purge purges the session's subject. A record
// that fails its self hash or the chain quarantines the session in this
// store value (Info reports it).
//
// The store caches each session's last stream sequence, Seq and hash after
// its own appends and reads; the cache is only a guess for the next
// expectation, never trusted for correctness.
//
// # Following the history
//
// LastPosition is every stream's last sequence (a Position, by
// partition); a consumer per stream started after it sees every later
// append (internal/cluster, internal/bus). Each session's messages are in
// one stream, so each session's records arrive in order; there is no
// order between sessions of different streams. Own tells a node's feed
// the messages its own store value wrote. PartitionOf and PartitionIDs
// name a session's partition and a partition's sessions: internal/cluster
// leases partitions to owner nodes (MACP_CLUSTER_OWNERSHIP=partitioned).
package natsstore
