package store

import (
	"context"
	"errors"

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
)

// Store is the durable history of all sessions.
type Store interface {
	// Append makes recs durable, atomically. recs may mix sessions; the
	// records of each session must be in Seq order and continue that
	// session's stored history (the first record of a new session has Seq
	// 1), else ErrConflict and nothing is written. When Append returns nil
	// every record survives a crash. The store keeps the records; callers
	// must not modify them afterwards.
	Append(ctx context.Context, recs []session.Record) error
	// Read calls fn for each record of the session with Seq >= from, in
	// order, until fn returns an error (which Read returns). Unknown
	// session: ErrNotFound. Records passed to fn must not be modified.
	Read(ctx context.Context, sessionID string, from uint64, fn func(session.Record) error) error
	// LastSeq returns the Seq of the session's last record, or ErrNotFound.
	LastSeq(ctx context.Context, sessionID string) (uint64, error)
	// Sessions calls fn for the id of every stored session, in id order,
	// until fn returns an error (which Sessions returns).
	Sessions(ctx context.Context, fn func(sessionID string) error) error
	// Close releases resources. Later calls return ErrClosed.
	Close() error
}
