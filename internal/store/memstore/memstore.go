// Package memstore is the in-memory Store: the twin of the durable stores,
// used by tests and by MACP_MEMORY_ONLY=1. Nothing survives the process.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// Store keeps every session's records in memory.
type Store struct {
	mu       sync.RWMutex
	sessions map[string][]session.Record
	closed   bool
}

// New returns an empty Store.
func New() *Store { return &Store{sessions: make(map[string][]session.Record)} }

var _ store.Store = (*Store)(nil)

// Append implements store.Store.
func (s *Store) Append(_ context.Context, recs []session.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	// Validate the whole batch before writing anything (atomicity).
	next := make(map[string]uint64)
	for _, r := range recs {
		want, ok := next[r.SessionID]
		if !ok {
			want = uint64(len(s.sessions[r.SessionID])) + 1
		}
		if r.Seq != want {
			return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, r.SessionID, r.Seq, want)
		}
		next[r.SessionID] = want + 1
	}
	for _, r := range recs {
		s.sessions[r.SessionID] = append(s.sessions[r.SessionID], r)
	}
	return nil
}

// Read implements store.Store.
func (s *Store) Read(_ context.Context, id string, from uint64, fn func(session.Record) error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	recs, ok := s.sessions[id]
	s.mu.RUnlock()
	if !ok {
		return store.ErrNotFound
	}
	if from < 1 {
		from = 1
	}
	// recs is append-only and never rewritten, so the slice header read
	// under the lock stays valid without it.
	for i := from - 1; i < uint64(len(recs)); i++ {
		if err := fn(recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(_ context.Context, id string) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	recs, ok := s.sessions[id]
	if !ok {
		return 0, store.ErrNotFound
	}
	return uint64(len(recs)), nil
}

// Sessions implements store.Store.
func (s *Store) Sessions(_ context.Context, fn func(string) error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	s.mu.RUnlock()
	slices.Sort(ids)
	for _, id := range ids {
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
