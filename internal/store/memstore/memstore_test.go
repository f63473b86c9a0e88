package memstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/store/storetest"
)

// TestStore runs the shared suite (store package doc: "Every
// implementation passes the shared suite in storetest").
func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memstore.New() })
}

// TestStoreReopenHarness exercises the suite's reopen checks with a
// simulated durable store: handles over one shared memstore, where Close
// only closes the handle. It keeps the reopen code paths of storetest
// honest until a durable store runs them for real.
func TestStoreReopenHarness(t *testing.T) {
	storetest.Run(t,
		func(t *testing.T) store.Store { return &handle{inner: memstore.New()} },
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			h := s.(*handle)
			if err := h.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return &handle{inner: h.inner}
		}))
}

// handle is a closable view of a memstore.
type handle struct {
	inner  *memstore.Store
	mu     sync.RWMutex
	closed bool
}

func (h *handle) ok() error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return store.ErrClosed
	}
	return nil
}

func (h *handle) Append(ctx context.Context, recs []session.Record) error {
	if err := h.ok(); err != nil {
		return err
	}
	return h.inner.Append(ctx, recs)
}

func (h *handle) Read(ctx context.Context, id string, from uint64, fn func(session.Record) error) error {
	if err := h.ok(); err != nil {
		return err
	}
	return h.inner.Read(ctx, id, from, fn)
}

func (h *handle) LastSeq(ctx context.Context, id string) (uint64, error) {
	if err := h.ok(); err != nil {
		return 0, err
	}
	return h.inner.LastSeq(ctx, id)
}

func (h *handle) Info(ctx context.Context, id string) (store.SessionInfo, error) {
	if err := h.ok(); err != nil {
		return store.SessionInfo{}, err
	}
	return h.inner.Info(ctx, id)
}

func (h *handle) List(ctx context.Context, fn func(store.SessionInfo) error) error {
	if err := h.ok(); err != nil {
		return err
	}
	return h.inner.List(ctx, fn)
}

func (h *handle) ListOpen(ctx context.Context, fn func(store.SessionInfo) error) error {
	if err := h.ok(); err != nil {
		return err
	}
	return h.inner.ListOpen(ctx, fn)
}

func (h *handle) Purge(ctx context.Context, id string) error {
	if err := h.ok(); err != nil {
		return err
	}
	return h.inner.Purge(ctx, id)
}

func (h *handle) PutMeta(ctx context.Context, key string, val []byte) error {
	if err := h.ok(); err != nil {
		return err
	}
	return h.inner.PutMeta(ctx, key, val)
}

func (h *handle) DeleteMeta(ctx context.Context, key string) error {
	if err := h.ok(); err != nil {
		return err
	}
	return h.inner.DeleteMeta(ctx, key)
}

func (h *handle) ListMeta(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	if err := h.ok(); err != nil {
		return err
	}
	return h.inner.ListMeta(ctx, prefix, fn)
}

func (h *handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return nil
}

// A Read callback may call back into the store (the runtime's recovery
// reads while holding no lock): no deadlock.
func TestReadCallbackReentry(t *testing.T) {
	s := memstore.New()
	ctx := context.Background()
	recs := []session.Record{{SessionID: "s", Seq: 1, Kind: session.KindStart}, {SessionID: "s", Seq: 2, Kind: session.KindExpire}}
	if err := s.Append(ctx, recs[:1]); err != nil {
		t.Fatal(err)
	}
	err := s.Read(ctx, "s", 1, func(r session.Record) error {
		if _, err := s.LastSeq(ctx, "s"); err != nil {
			return err
		}
		return s.Append(ctx, recs[1:])
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s.LastSeq(ctx, "s"); n != 2 {
		t.Fatalf("LastSeq %d", n)
	}
}
