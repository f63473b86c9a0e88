// Package pebblestore is the embedded durable Store, the default: session
// history in a Pebble key-value store (github.com/cockroachdb/pebble/v2)
// under one directory (MACP_DATA_DIR), records in the binary format of
// package record.
//
// # Key layout
//
//	f                          format marker: "macpd.store.v2" ("macpd.store.v1": written before the open set)
//	f/open-set                 "1": the store keeps the open set (o/; see below)
//	h/<session id> 0x00 <seq>  one record (record.Encode), seq as 8 bytes big-endian
//	i/<session id>             the session's index entry (record.EncodeIndex; see below)
//	o/<session id>             empty: the session is in the open set (its index entry is not terminal)
//	q/<session id>             quarantine mark: why the session failed verification (UTF-8)
//	m/<key>                    meta value (PutMeta)
//
// Session ids never contain NUL (store.ValidSessionID), so a session's
// records are exactly the keys in [h/<id>\x00, h/<id>\x01), apart from the
// records of any other session, including ids that extend it; keys sort in
// session id order, then seq order.
//
// # Durability: one sync per Append
//
// Append validates the whole batch first (sequence continuity for every
// session in it, against an in-memory cache of each session's last seq and
// hash, loaded lazily from the index entry and the last record, checked
// against each other), then writes every record and the index entries it
// changes (below) in ONE pebble.Batch committed with pebble.Sync: the
// batch goes to the write-ahead log, which is fsynced before Commit
// returns. Pebble applies a batch atomically, in the WAL and on recovery,
// so a batch is present after a crash entirely or not at all. Append calls
// are serialized; group commit across sessions is the caller's batching
// (the runtime's committer sends one Append per group), so concurrent
// sessions share one sync.
//
// # Index entry
//
// A session's index entry (record.InfoOf of a record: its seq, status,
// accepted time, hash and final metadata) is written by the batch that
// starts the session, by any batch that changes its status, which is the
// one that ends it (and by one appended after that, which the store does
// not refuse), and deleted by Purge; the other batches write records only.
// Every append writing its session's index entry too made two random
// skiplist inserts per record; writing it on changes of status only took
// about 15% less CPU per record in BenchmarkHotPath (50-record sessions,
// one record per batch; medians of 9 alternating runs, 13.8 and 11.7 us). So the index entry of a terminal session names its last
// record, while an OPEN session's names the last record of its first batch
// (or of its last change of status) and lags its history. Stores written
// before, with an index entry per batch, read the same: their index
// entries name the last record.
//
// Readers (Info, List and ListOpen, LastSeq, Append's tips, Purge,
// Read) take a session's summary from its last record, found by a reverse
// seek on its records and self-hash checked, and check the index entry
// against the records: a terminal index entry, or one that names the last
// record, must match it exactly (seq, hash, status, accepted time, final
// metadata), as before; an OPEN index entry that lags must name a record
// that exists and matches it exactly, and the last record must be later
// and have the index entry's status (a terminal record after an OPEN index
// entry is corruption: the batch that ended the session would have
// written it). Records missing before the last one are found by Read's
// chain check, as before.
//
// What this gives up: the records of an OPEN session after the one its
// index entry names are pinned by nothing but their own hashes and the
// chain. Deleting such records from the end of the history (not past the
// named record), or chaining well-formed records on, leaves a history
// that checks out: the session reads as ending at its new last record,
// and Info, List and recovery report that. With an index entry per batch
// both were found (the index entry named the last record and its hash).
// A terminal session is covered as before, its index entry naming its
// last record; a torn write cannot cause either, as a batch is applied
// whole or not at all.
//
// A session without an index entry is looked up with two point reads (the
// index entry, then record 1), which Pebble's bloom filters answer without
// reading tables (in every level: Pebble's Get skips the last level's
// filters, so these are prefix seeks with IterOptions.UseL6Filters),
// before any seek on its records: every SessionStart asks
// whether its session exists, and a reverse seek costs a search in every
// level (at 64 concurrent sessions it was 4.7% of the server's CPU). Records
// without an index entry are damage (the first batch writes both), found
// as before when record 1 is among them. What this gives up: if damage
// removed both the index entry and record 1, the session reads as absent
// to Info and Append (a new SessionStart with that id would be accepted);
// List, ListOpen with strict recovery and macpctl verify, which walk the
// records themselves, still report it.
//
// # Absent sessions
//
// Every SessionStart costs the runtime an Info (does the session exist?)
// and then its append a tip lookup (the same question, under wmu): each
// two point reads, which with many tables are not cheap (about 19 us each
// at 64 concurrent sessions). So Info remembers the sessions it found
// absent, and the next append's tip for such a session takes the answer
// instead of reading again (the entry is used once). The race to close is
// an append that writes the session after Info's snapshot but before Info
// records it: Info reads a counter of applied batches before taking its
// snapshot and records the session only if no batch was applied since,
// and each applied batch advances that counter and deletes its sessions'
// entries in the same critical section, so an entry never outlives a
// batch that wrote its session. The set is bounded (maxAbsent); a store
// opened read-only keeps none.
//
// # Open set
//
// ListOpen, which the runtime's recovery calls at every start, must not
// read every stored session: most are terminal, and reading each one's
// summary (a point lookup and a reverse seek) made boot grow with all
// history, about 20 us per stored session (docs/benchmarks.md, Recovery).
// So the store keeps the set of sessions whose index entry is not
// terminal, one empty key o/<id> each: the batch that writes a session's
// index entry sets it when the entry is not terminal (the session's first
// batch) and deletes it when it is (the batch that ends the session);
// Purge deletes it too. The open set is thus exactly as durable and as
// atomic as the index entries. ListOpen iterates it, merged in id order
// with the quarantine marks, and summarizes each of those sessions as
// List does (same checks, same quarantine), passing on the OPEN and the
// quarantined ones: its cost grows with them, not with all sessions.
//
// A store written before the open set existed has no o/ keys, no
// f/open-set marker and the format marker macpd.store.v1. The first
// writable Open builds the set once: one pass over the index entries (no
// record is read), an o/ key for each entry that is not terminal or does
// not decode (ListOpen then reports the damage), the marker and the
// format marker macpd.store.v2, in one batch with one sync; it logs how
// long that took. A read-only Open of such a store leaves it as it is, and
// its ListOpen reads every session like List, filtered. The format
// ratchet keeps a build that reads only v1 from running on the store
// without maintaining the set: it refuses to open it, naming the format.
//
// What this gives up: ListOpen checks only the sessions it lists. Damage
// to a terminal session (or to an OPEN session's o/ key, which Pebble's
// checksums guard as everything else) is found when the session is read,
// or by List, which checks them all (the runtime's strict recovery lists
// every session). Builds that read only the v1 format refuse a v2 store;
// should one run on it anyway (its marker edited back to v1), the sessions
// it starts get no o/ key (ListOpen misses them, so recovery loads them
// only when they are asked for) and the o/ keys of sessions it ends or
// purges stay (harmless: ListOpen skips a terminal or missing session):
// deleting the f/open-set key makes the next Open rebuild the set.
//
// # Recovery
//
// On Open, Pebble replays the WAL. A crash in the middle of writing a batch
// leaves a torn tail in the last WAL file: a truncated chunk, or a chunk
// with a bad checksum or zeroes (preallocated or recycled space) after
// which no valid chunk follows. Pebble's WAL reader reads ahead to tell
// such a tail from damage in the middle, reports the tail as
// record.ErrUnexpectedEOF and, for the most recent WAL, treats it as the
// end of the log: the partial batch is dropped and every earlier batch,
// each fsynced before its Append returned, is recovered. Nothing else is
// needed here: the torn tail is recovered, not reported. Damage that is not
// a tail (a bad chunk followed by valid ones, an older WAL that does not
// end cleanly, a damaged MANIFEST) makes Open fail with an error marked
// store.ErrCorrupt, because Pebble cannot tell which keys it lost: the
// data directory needs an operator.
//
// # Corruption
//
// Everything read is verified: each record's self hash, the chain from
// record to record, the index entry against the records (above: an OPEN
// session's only against the record it names and the last record's
// status), and Pebble's own block checksums. A failure is confined to its session: Read returns
// store.ErrCorrupt naming the session and record; Info, List and ListOpen
// report the session with SessionInfo.Quarantined set instead of failing; Append and
// Purge refuse it. The store also writes the quarantine mark q/<id> (unless
// opened read-only), so the session stays listed as quarantined even when
// nothing reads its history again; nothing is ever deleted or repaired
// silently. The marks are also kept in memory (all read at Open, added to
// as they are written; they are expected to be few), so that Append, Info
// and Purge check for one without a Pebble read. Sessions whose records exist without an index entry, or whose
// index entry has no records, are listed as quarantined too.
//
// # Failed writes: fail closed
//
// A write or fsync error on the WAL leaves the outcome of the batch unknown:
// after a failed fsync the data may or may not be on stable storage (the
// kernel may have dropped the dirty pages, or written some of them), so no
// store can promise that the failed batch is absent after a restart. Pebble
// itself treats it as fatal: the commit pipeline calls Logger.Fatalf
// ("pebble: fatal commit error") - whose default implementation exits the
// process - and then returns nil to the committer, and its WAL writer stays
// broken, so the next commit would panic. This store installs its own
// Logger: Fatalf records the failure instead of exiting, and Append checks
// for it after Commit, so the failed Append returns an error wrapping
// store.ErrFailed. From then on the store fails closed: every call except
// Close returns store.ErrFailed without touching Pebble again (no further
// commit, so no panic), and the process must restart. A failed Append was
// never acknowledged; after the restart its batch is either wholly present
// (it reached the disk) or wholly absent, never partial, because the WAL is
// replayed batch by batch. The same applies to every other Fatalf from
// Pebble (for example a failed MANIFEST sync). Pebble's data-corruption
// event, fatal by default, is logged instead and surfaces as ErrCorrupt on
// the read that found it.
//
// With batches queued ahead of their syncs (AppendAsync), a WAL write that
// fails in Pebble's background flush can reach a later batch before the
// store has seen it: Pebble hands the flush error to the next WAL write,
// and panics there, holding its commit pipeline's lock. Every commit goes
// through guard, which turns that panic into the store's failure as above;
// Close then returns an error without calling Pebble's Close (which would
// wait for that lock forever), and the restart recovers what was synced
// (TestWALWriteErrorReachesTheNextBatch).
//
// # Tuning
//
// The WAL is always on and synced on every commit (no WALMinSyncInterval:
// batching is the caller's). Memtables are 32 MiB (fewer flushes for a
// stream of small appends, a bounded WAL replay at start), the block cache
// 64 MiB (Pebble's cache is created larger by the memtables' worst case,
// 96 MiB, as Pebble reserves memtable memory from it: without that the
// memtables left no room for blocks), and every level has a 10-bit bloom
// filter, since Append, Info and
// LastSeq do point lookups of index keys, many of them misses for new
// sessions. Range deletions (Purge) schedule a flush within 10 s so that
// the space of purged sessions is reclaimed by compaction. L0 is compacted
// from 8 sublevels rather than Pebble's 4 (writes stall at 24, not 12):
// session ids are random, so every flushed table spans the whole key space
// and each L0 compaction rewrites most of the level below; compacting
// twice as many flushes at once took less CPU per appended record in
// BenchmarkHotPath, at the price of up to twice as many L0 tables for a
// point lookup to check (each behind its bloom filter).
//
// # Metrics
//
// Store.Collector exports Pebble's metrics for Prometheus (macpd_store_*,
// metrics.go): it reads db.Metrics() at each scrape (Pebble's locks, held
// briefly; fine at a scrape every few seconds) and exports nothing once
// the store is closed or failed. The WAL fsync histogram is Pebble's own,
// observed in nanoseconds, re-exported in seconds on a subset of its
// bounds (FsyncBuckets); write stalls and slow-disk events are counted by
// the store's EventListener.
package pebblestore
