package snapshotio

import (
	"context"
	"slices"
	"sync"

	"github.com/macpd/macpd/internal/snapshot"
)

// startIndex is the Service's in-memory index of SessionStarts by
// initiator, so that a cross_session_decay window reads one initiator's
// sessions instead of every stored session's first record. It is built
// by one full pass over the Source on first use, and kept current by
// NoteStart (the App feeds it the runtime's lifecycle CREATED events);
// Invalidate (a feed that fell behind) makes the next use rebuild it.
type startIndex struct {
	mu    sync.Mutex
	built bool
	known map[string]bool
	by    map[string][]snapshot.Start // initiator -> starts in startLess order
}

func newStartIndex() *startIndex {
	return &startIndex{known: map[string]bool{}, by: map[string][]snapshot.Start{}}
}

// add inserts st unless its session is indexed already (mu held).
func (x *startIndex) add(st snapshot.Start) {
	if x.known[st.SessionID] {
		return
	}
	x.known[st.SessionID] = true
	list := x.by[st.Initiator]
	i, _ := slices.BinarySearchFunc(list, st, snapshot.CompareStarts)
	x.by[st.Initiator] = slices.Insert(list, i, st)
}

func (x *startIndex) note(st snapshot.Start) {
	x.mu.Lock()
	x.add(st)
	x.mu.Unlock()
}

func (x *startIndex) invalidate() {
	x.mu.Lock()
	x.built = false
	x.known = map[string]bool{}
	x.by = map[string][]snapshot.Start{}
	x.mu.Unlock()
}

// subsequent is Subsequent over the index: me must be the session's own
// start (added if missing).
func (x *startIndex) subsequent(ctx context.Context, src Source, me snapshot.Start, n int, v snapshot.Viewer) ([]string, error) {
	x.mu.Lock()
	built := x.built
	x.mu.Unlock()
	if !built {
		starts, err := src.Starts(ctx) // the one full pass
		if err != nil {
			return nil, err
		}
		x.mu.Lock()
		for _, st := range starts {
			x.add(st)
		}
		x.built = true
		x.mu.Unlock()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.add(me)
	list := x.by[me.Initiator]
	i, _ := slices.BinarySearchFunc(list, me, snapshot.CompareStarts)
	out := []string{}
	for _, st := range list[i+1:] {
		if len(out) == n {
			break
		}
		if v.MayObserve(st) {
			out = append(out, st.SessionID)
		}
	}
	return out, nil
}
