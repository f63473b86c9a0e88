package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// fenceStore is a faultStore with the store.Fencer contract of a shared
// store (natsstore): once an append of a session failed, the session's
// later appends are ErrConflict until Unfence.
type fenceStore struct {
	*faultStore
	mu       sync.Mutex
	fenced   map[string]bool
	unfenced []string
}

func (s *fenceStore) Append(ctx context.Context, recs []session.Record) error {
	s.mu.Lock()
	for _, r := range recs {
		if s.fenced[r.SessionID] {
			s.mu.Unlock()
			return fmt.Errorf("%w: session %s is fenced", store.ErrConflict, r.SessionID)
		}
	}
	s.mu.Unlock()
	err := s.faultStore.Append(ctx, recs)
	if err != nil {
		s.mu.Lock()
		for _, r := range recs {
			s.fenced[r.SessionID] = true
		}
		s.mu.Unlock()
	}
	return err
}

func (s *fenceStore) Unfence(id string) {
	s.mu.Lock()
	delete(s.fenced, id)
	s.unfenced = append(s.unfenced, id)
	s.mu.Unlock()
}

// A shared store fences a session whose append failed (store.Fencer):
// the runtime unfences it when it rebuilds the session from the store,
// with nothing of it in flight, so the resend is stored; a runtime that
// never unfenced would have the session refused for good.
func TestHealUnfencesTheSession(t *testing.T) {
	st := &fenceStore{faultStore: newFaultStore(), fenced: make(map[string]bool)}
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)

	st.failNext(sid, 1)
	wantCode(t, r.Send(context.Background(), aliceID, proposalEnv(sid, "m2")), coord.CodeInternalError)
	st.mu.Lock()
	fenced := st.fenced[sid]
	st.mu.Unlock()
	if !fenced {
		t.Fatal("the failed append did not fence the session")
	}

	mustOK(t, r, aliceID, proposalEnv(sid, "m2"))
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{"m0", "m1", "m2"}) {
		t.Fatalf("store holds %v", ids)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !slices.Equal(st.unfenced, []string{sid}) {
		t.Fatalf("Unfence calls %v, want one for %s", st.unfenced, sid)
	}
}

// A SessionStart whose append failed leaves its id fenced in a shared
// store; the runtime forgets the session and unfences the id, so the
// client's retry of the start is stored.
func TestFailedStartUnfencesTheID(t *testing.T) {
	st := &fenceStore{faultStore: newFaultStore(), fenced: make(map[string]bool)}
	r := newRT(t, st, Options{})
	sid := newSID()
	st.failNext(sid, 1)
	wantCode(t, r.Send(context.Background(), initID, startEnv(sid, "m0", 60_000)), coord.CodeInternalError)
	mustOK(t, r, initID, startEnv(sid, "m0", 60_000))
	mustOK(t, r, initID, proposalEnv(sid, "m1"))
	if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{"m0", "m1"}) {
		t.Fatalf("store holds %v", ids)
	}
}
