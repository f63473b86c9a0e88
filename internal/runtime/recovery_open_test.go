package runtime

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
)

// countingStore records which sessions are read or summarized and which
// listings are made.
type countingStore struct {
	store.Store

	mu              sync.Mutex
	read, info      []string
	lists, listOpen int
}

func (c *countingStore) Read(ctx context.Context, id string, from uint64, fn func(session.Record) error) error {
	c.mu.Lock()
	c.read = append(c.read, id)
	c.mu.Unlock()
	return c.Store.Read(ctx, id, from, fn)
}

func (c *countingStore) Info(ctx context.Context, id string) (store.SessionInfo, error) {
	c.mu.Lock()
	c.info = append(c.info, id)
	c.mu.Unlock()
	return c.Store.Info(ctx, id)
}

func (c *countingStore) List(ctx context.Context, fn func(store.SessionInfo) error) error {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Store.List(ctx, fn)
}

func (c *countingStore) ListOpen(ctx context.Context, fn func(store.SessionInfo) error) error {
	c.mu.Lock()
	c.listOpen++
	c.mu.Unlock()
	return c.Store.ListOpen(ctx, fn)
}

func (c *countingStore) calls() (read, info []string, lists, listOpen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.read)), slices.Clone(c.info), c.lists, c.listOpen
}

// Boot with many terminal sessions and a few OPEN ones lists the OPEN ones
// (ListOpen, never List), replays exactly those, and reads or summarizes
// no terminal session. A strict boot lists every stored session (List).
func TestRecoveryReadsOnlyOpenSessions(t *testing.T) {
	mem := memstore.New()
	r1 := newRT(t, mem, Options{})
	var open []string
	for i := range 60 {
		sid := openSession(t, r1, 0)
		if i%20 == 7 {
			open = append(open, sid)
			continue
		}
		mustOK(t, r1, initID, commitEnv(sid, "c", "c1"))
	}
	r1.Close()
	slices.Sort(open)

	c := &countingStore{Store: mem}
	r2 := newRT(t, c, Options{})
	read, info, lists, listOpen := c.calls()
	if lists != 0 || listOpen != 1 {
		t.Fatalf("boot: %d List and %d ListOpen calls, want 0 and 1", lists, listOpen)
	}
	if !slices.Equal(read, open) || len(info) != 0 {
		t.Fatalf("boot read %v and summarized %v; want to read exactly the OPEN sessions %v", read, info, open)
	}
	for _, sid := range open {
		if !resident(r2, sid) {
			t.Fatalf("OPEN session %s not recovered", sid)
		}
	}
	r2.mu.RLock()
	inMemory, openTotal := len(r2.sessions), r2.openTotal
	r2.mu.RUnlock()
	if inMemory != len(open) || openTotal != len(open) {
		t.Fatalf("after boot: %d resident, %d open counted; want %d", inMemory, openTotal, len(open))
	}
	r2.Close()

	c = &countingStore{Store: mem}
	r3 := newRT(t, c, Options{StrictRecovery: true})
	read, _, lists, listOpen = c.calls()
	if lists != 1 || listOpen != 0 || !slices.Equal(read, open) {
		t.Fatalf("strict boot: %d List, %d ListOpen, read %v; want 1 List, reading the OPEN sessions", lists, listOpen, read)
	}
	for _, sid := range open {
		if !resident(r3, sid) {
			t.Fatalf("strict: OPEN session %s not recovered", sid)
		}
	}
}
