package store

import (
	"context"
	"errors"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/session"
)

// Sentinel errors.
var (
	// ErrConflict: a record's Seq does not continue its session's history.
	ErrConflict = errors.New("store: sequence conflict")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrNotFound: no history for that session.
	ErrNotFound = errors.New("store: session not found")
	// ErrCorrupt marks every integrity failure: a stored record or index
	// entry that does not decode, whose self hash does not match, or that
	// does not chain to its predecessor. The error names the session (and
	// the record, when one is at fault); errors.Is(err, ErrCorrupt).
	// Corruption is confined to the session it is found in: other sessions
	// stay readable, and the session is reported as quarantined
	// (SessionInfo.Quarantined).
	ErrCorrupt = errors.New("store: corrupt history")
	// ErrNotTerminal: Purge of a session that has not ended.
	ErrNotTerminal = errors.New("store: session is not terminal")
	// ErrInvalid: an argument the store cannot represent (an empty session
	// id, or one with a NUL byte; an empty meta key).
	ErrInvalid = errors.New("store: invalid argument")
	// ErrFailed: an earlier write failed with an unknown outcome (for
	// example a failed fsync: the data may or may not be on disk). The
	// store fails closed: every later call but Close returns an error
	// wrapping ErrFailed, and the process must restart, so that recovery
	// decides from what is actually on disk. It is never retried in place.
	ErrFailed = errors.New("store: failed, restart required")
)

// ZeroHash is the PrevHash of every session's first record.
var ZeroHash = make([]byte, 32)

// SessionInfo summarizes one stored session without reading its history.
type SessionInfo struct {
	SessionID string
	// LastSeq is the Seq of the session's last record.
	LastSeq uint64
	// Status is the Status of the last record.
	Status session.Status
	// LastAcceptedMs is the AcceptedAtMs of the last record.
	LastAcceptedMs int64
	// LastHash is the Hash of the last record: for a terminal session, the
	// final session hash (RFC-MACP-0003 §6).
	LastHash []byte
	// Final is the Final metadata of the terminal record (nil while OPEN).
	Final *macpv1.SessionMetadata
	// Quarantined, when non-empty, says why the session's history failed
	// verification; the other fields are then what could still be read
	// (possibly zero).
	Quarantined string
}

// Pipeliner is implemented by stores that can overlap appends: a caller
// that starts the next append while the previous one syncs shares the
// disk's sync latency between them.
type Pipeliner interface {
	// AppendAsync is Append in two steps. It validates recs and queues
	// them after every earlier append (an error: nothing was written, as
	// with Append); the records may be readable at once. wait then blocks
	// until they are durable and returns what Append would have. An
	// append is durable only after every earlier one is, and once a wait
	// fails every later wait fails too (the store fails closed). wait must
	// be called exactly once, in the order the appends were started.
	AppendAsync(ctx context.Context, recs []session.Record) (wait func() error, err error)
}

// Fencer is implemented by stores that several writers share
// (natsstore). Once an append of a session has failed, the store refuses
// the session's later appends with ErrConflict, whatever their sequence
// numbers: they may have been decided on the records that were not stored
// (a pipelined caller learns of the failure only from a later wait). The
// refusal lasts until the caller, with nothing of the session in flight,
// calls Unfence and rebuilds its copy from what is stored.
type Fencer interface {
	Unfence(sessionID string)
}

// Store is the durable history of all sessions.
//
// Integrity chain (RFC-MACP-0003 §6): Append sets each record's PrevHash
// to the Hash of the session's previous record (ZeroHash for Seq 1) and
// its Hash to SHA-256(PrevHash || canonical bytes of the record without
// Hash and PrevHash), computed by package record; the caller's Hash and
// PrevHash are ignored. Read returns records with both set and checks the
// chain as it goes.
type Store interface {
	// Append makes recs durable, atomically, with one sync. recs may mix
	// sessions; the records of each session must be in Seq order and
	// continue that session's stored history (the first record of a new
	// session has Seq 1), else ErrConflict and nothing is written. An
	// invalid session id is ErrInvalid; a quarantined session ErrCorrupt.
	// When Append returns nil every record survives a crash; when it
	// returns an error the records were not acknowledged (after ErrFailed
	// they may still turn up after a restart). The store keeps the records;
	// callers must not modify them afterwards.
	Append(ctx context.Context, recs []session.Record) error
	// Read calls fn for each record of the session with Seq >= from, in
	// order, until fn returns an error (which Read returns). Records come
	// with Hash and PrevHash set and chain-checked: a record that fails the
	// check is ErrCorrupt (naming the session and seq) after fn has seen
	// the records before it. Unknown session: ErrNotFound. Records passed
	// to fn must not be modified.
	Read(ctx context.Context, sessionID string, from uint64, fn func(session.Record) error) error
	// LastSeq returns the Seq of the session's last record, or ErrNotFound.
	LastSeq(ctx context.Context, sessionID string) (uint64, error)
	// Info summarizes a session, or ErrNotFound. A session whose summary
	// or last record fails the integrity check, or whose history failed it
	// earlier (a Read that returned ErrCorrupt), comes back with
	// Quarantined set and a nil error: it is queryable as quarantined.
	Info(ctx context.Context, sessionID string) (SessionInfo, error)
	// List calls fn for every stored session in id order, until fn returns
	// an error (which List returns). A session whose summary fails the
	// integrity check is listed with Quarantined set rather than failing
	// the listing.
	List(ctx context.Context, fn func(SessionInfo) error) error
	// ListOpen calls fn, in id order, for every session whose status is
	// OPEN and for every quarantined session (Quarantined set, whatever
	// its status: damage found earlier, or found now in an OPEN session's
	// summary), and for no terminal one, until fn returns an error (which
	// ListOpen returns); each summary is the one List gives. It is what
	// recovery needs at start, and its cost grows with those sessions,
	// not with all stored history: a store keeps the set of OPEN sessions
	// as they start and end instead of reading every session's summary.
	// So it checks only the summaries it lists: damage to a terminal
	// session that nothing found yet is found when the session is read
	// (Info, Read), or by List, which checks every session.
	ListOpen(ctx context.Context, fn func(SessionInfo) error) error
	// Purge deletes a whole session, records and summary, atomically and
	// durably. Only terminal sessions: an OPEN session is ErrNotTerminal, a
	// quarantined one ErrCorrupt (its evidence is kept), an unknown one
	// ErrNotFound.
	Purge(ctx context.Context, sessionID string) error
	// PutMeta durably stores val under key (for example the extension-mode
	// and policy registrations of package registry). key must not be empty (ErrInvalid). The store
	// keeps val; callers must not modify it afterwards.
	PutMeta(ctx context.Context, key string, val []byte) error
	// DeleteMeta durably removes key; a missing key is not an error.
	DeleteMeta(ctx context.Context, key string) error
	// ListMeta calls fn for every meta key starting with prefix, in key
	// order, until fn returns an error (which ListMeta returns). fn must
	// not keep or modify val.
	ListMeta(ctx context.Context, prefix string, fn func(key string, val []byte) error) error
	// Close releases resources. Later calls return ErrClosed.
	Close() error
}

// ValidSessionID reports whether a store can hold a session with this id:
// non-empty and without NUL bytes (ordered stores use NUL as a key
// separator).
func ValidSessionID(id string) bool {
	if id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] == 0 {
			return false
		}
	}
	return true
}

// OpenOnly wraps a ListOpen callback for stores that implement ListOpen by
// filtering List: fn sees the OPEN and the quarantined sessions only.
func OpenOnly(fn func(SessionInfo) error) func(SessionInfo) error {
	return func(info SessionInfo) error {
		if info.Status.Terminal() && info.Quarantined == "" {
			return nil
		}
		return fn(info)
	}
}
