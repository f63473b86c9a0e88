// Package memstore is the in-memory Store: the twin of the durable stores,
// used by tests and by MACP_MEMORY_ONLY=1. Nothing survives the process.
//
// Records are kept in their stored form (package record), so Read decodes
// and chain-checks exactly as a durable store does, and callers never share
// a record value with the store.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/record"
	"google.golang.org/protobuf/proto"
)

// Store keeps every session's records in memory.
type Store struct {
	mu       sync.RWMutex
	sessions map[string]*history
	meta     map[string][]byte
	closed   bool
}

// history is one session: its encoded records (never rewritten, only
// appended) and the summary after the last one.
type history struct {
	values [][]byte
	info   store.SessionInfo
}

// New returns an empty Store.
func New() *Store {
	return &Store{sessions: make(map[string]*history), meta: make(map[string][]byte)}
}

var _ store.Store = (*Store)(nil)

// Append implements store.Store.
func (s *Store) Append(_ context.Context, recs []session.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	// Validate and encode the whole batch before writing anything
	// (atomicity).
	type tip struct {
		seq  uint64
		hash []byte
	}
	tips := make(map[string]tip)
	values := make([][]byte, len(recs))
	infos := make(map[string]store.SessionInfo)
	for i, r := range recs {
		if !store.ValidSessionID(r.SessionID) {
			return fmt.Errorf("%w: session id %q", store.ErrInvalid, r.SessionID)
		}
		t, ok := tips[r.SessionID]
		if !ok {
			t = tip{hash: store.ZeroHash}
			if h := s.sessions[r.SessionID]; h != nil {
				t = tip{h.info.LastSeq, h.info.LastHash}
			}
		}
		if r.Seq != t.seq+1 {
			return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, r.SessionID, r.Seq, t.seq+1)
		}
		v, hash, err := record.Encode(r, t.hash)
		if err != nil {
			return err
		}
		values[i] = v
		tips[r.SessionID] = tip{r.Seq, hash}
		r.PrevHash, r.Hash = t.hash, hash
		infos[r.SessionID] = record.InfoOf(r)
	}
	for i, r := range recs {
		h := s.sessions[r.SessionID]
		if h == nil {
			h = &history{}
			s.sessions[r.SessionID] = h
		}
		h.values = append(h.values, values[i])
	}
	for id, info := range infos {
		s.sessions[id].info = info
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
	h, ok := s.sessions[id]
	var values [][]byte
	if ok {
		values = h.values
	}
	s.mu.RUnlock()
	if !ok {
		return store.ErrNotFound
	}
	from = max(from, 1)
	if from > uint64(len(values)) {
		return nil
	}
	// values is append-only and never rewritten, so the slice header read
	// under the lock stays valid without it. The chain check starts at
	// the record before from.
	chain := record.NewChain(id)
	if from > 1 {
		prev, err := record.Decode(values[from-2], id, from-1)
		if err != nil {
			return err
		}
		chain.Seq, chain.Hash = prev.Seq, prev.Hash
	}
	for i := from - 1; i < uint64(len(values)); i++ {
		r, err := record.Decode(values[i], id, i+1)
		if err != nil {
			return err
		}
		if err := chain.Next(r); err != nil {
			return err
		}
		if err := fn(r); err != nil {
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
	h, ok := s.sessions[id]
	if !ok {
		return 0, store.ErrNotFound
	}
	return h.info.LastSeq, nil
}

// Info implements store.Store.
func (s *Store) Info(_ context.Context, id string) (store.SessionInfo, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.SessionInfo{}, store.ErrClosed
	}
	h, ok := s.sessions[id]
	if !ok {
		return store.SessionInfo{}, store.ErrNotFound
	}
	return cloneInfo(h.info), nil
}

func cloneInfo(info store.SessionInfo) store.SessionInfo {
	info.LastHash = bytes.Clone(info.LastHash)
	if info.Final != nil {
		info.Final = proto.Clone(info.Final).(*macpv1.SessionMetadata)
	}
	return info
}

// List implements store.Store.
func (s *Store) List(_ context.Context, fn func(store.SessionInfo) error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	infos := make([]store.SessionInfo, 0, len(s.sessions))
	for _, h := range s.sessions {
		infos = append(infos, cloneInfo(h.info))
	}
	s.mu.RUnlock()
	slices.SortFunc(infos, func(a, b store.SessionInfo) int { return strings.Compare(a.SessionID, b.SessionID) })
	for _, info := range infos {
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// ListOpen implements store.Store: List's OPEN sessions (a memstore
// quarantines nothing). It visits every session, which is fine in memory.
func (s *Store) ListOpen(ctx context.Context, fn func(store.SessionInfo) error) error {
	return s.List(ctx, store.OpenOnly(fn))
}

// Purge implements store.Store.
func (s *Store) Purge(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	h, ok := s.sessions[id]
	if !ok {
		return store.ErrNotFound
	}
	if !h.info.Status.Terminal() {
		return fmt.Errorf("%w: session %s is %s", store.ErrNotTerminal, id, h.info.Status)
	}
	delete(s.sessions, id)
	return nil
}

// PutMeta implements store.Store.
func (s *Store) PutMeta(_ context.Context, key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	if key == "" {
		return fmt.Errorf("%w: empty meta key", store.ErrInvalid)
	}
	s.meta[key] = bytes.Clone(val)
	return nil
}

// DeleteMeta implements store.Store.
func (s *Store) DeleteMeta(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	delete(s.meta, key)
	return nil
}

// ListMeta implements store.Store.
func (s *Store) ListMeta(_ context.Context, prefix string, fn func(string, []byte) error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	type kv struct {
		k string
		v []byte
	}
	var kvs []kv
	for k, v := range s.meta {
		if strings.HasPrefix(k, prefix) {
			kvs = append(kvs, kv{k, bytes.Clone(v)})
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(kvs, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	for _, e := range kvs {
		if err := fn(e.k, e.v); err != nil {
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
