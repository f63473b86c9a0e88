package runtime

import (
	"context"
	"errors"
	"testing"

	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
)

// Two nodes sharing one store, in process and without timing: the memory
// store refuses an append that does not continue its session's history
// (store.ErrConflict), as the JetStream store does, and the tests play
// the cluster feed (internal/cluster) by hand with ApplyStored, so they
// decide exactly what each node's copy of a session has seen.

// newSharedRT builds and starts a node over the shared store st.
func newSharedRT(t *testing.T, st store.Store) *Runtime {
	t.Helper()
	r := New(st, testModes(), policy.DefaultOnly{}, Options{})
	r.EnableSharedStore()
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// feed hands r the stored records of sid with Seq in [from, to], one
// record per call, as the cluster feed does for other nodes' appends.
func feed(t *testing.T, r *Runtime, st store.Store, sid string, from, to uint64) {
	t.Helper()
	for _, rec := range stored(t, st, sid) {
		if rec.Seq >= from && rec.Seq <= to {
			r.ApplyStored([]session.Record{rec})
		}
	}
}

// follower runs Follow on r from after and reports the effective start
// (OnStartAfter) and every record's Seq.
type follower struct {
	start chan uint64
	seqs  chan uint64
	done  chan error
}

func follow(r *Runtime, sid string, after uint64) *follower {
	f := &follower{start: make(chan uint64, 1), seqs: make(chan uint64, 1024), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		f.done <- r.Follow(ctx, aliceID, sid, after, FollowOptions{OnStartAfter: func(_, a uint64) { f.start <- a }},
			func(rec session.Record) error {
				f.seqs <- rec.Seq
				return nil
			})
	}()
	return f
}

// expect receives the next records and fails unless they are want.
func (f *follower) expect(t *testing.T, want ...uint64) {
	t.Helper()
	for _, w := range want {
		if got := recv(t, f.seqs, "followed record"); got != w {
			t.Fatalf("follower: got record %d, want %d", got, w)
		}
	}
}

// A client following a session on node A moves to node B (A failed) and
// resumes after the last record it received, 26. B's copy of the session
// is behind (its feed has not delivered records 13..26 yet: a feed lagging
// after a NATS server restart, or a catch-up that failed). The follower
// must get 27 next, never 13..26 again (RFC-MACP-0006 §3.2: resume after
// a sequence number; docs/cluster.md "Known defects", now fixed).
func TestSharedFollowResumesOnStaleCopy(t *testing.T) {
	st := memstore.New()
	a, b := newSharedRT(t, st), newSharedRT(t, st)
	sid := openSession(t, a, 0) // records 1, 2
	for i := 3; i <= 12; i++ {
		mustOK(t, a, aliceID, proposalEnv(sid, msgID("p", i)))
	}
	feed(t, b, st, sid, 1, 12)
	if got := inspect(t, b, sid).seq; got != 12 {
		t.Fatalf("node B's copy at %d, want 12", got)
	}
	for i := 13; i <= 26; i++ {
		mustOK(t, a, aliceID, proposalEnv(sid, msgID("p", i)))
	}
	f := follow(b, sid, 26)
	if got := recv(t, f.start, "follow start"); got != 26 {
		t.Fatalf("follower on node B resumes after %d, want 26 (it has received 1..26)", got)
	}
	mustOK(t, a, aliceID, proposalEnv(sid, msgID("p", 27)))
	feed(t, b, st, sid, 13, 27)
	f.expect(t, 27)
	mustOK(t, b, aliceID, proposalEnv(sid, msgID("p", 28)))
	f.expect(t, 28)
	mustOK(t, b, initID, commitEnv(sid, "c", "c"))
	f.expect(t, 29)
	if err := recv(t, f.done, "follow end"); !errors.Is(err, ErrFollowEnded) {
		t.Fatalf("Follow: %v, want ErrFollowEnded", err)
	}
}

// A follower is live on node B at record 12. Node A stores 13..26; B's
// feed has not delivered them, so B decides an envelope on its stale copy
// (as record 13), loses the append race (ErrConflict), rebuilds the copy
// from the store and decides the envelope again (record 27). The follower
// receives 13..27 once each, in order, whichever way the records reach it
// (the rebuild, the feed arriving late).
func TestSharedFollowAcrossRebuild(t *testing.T) {
	st := memstore.New()
	a, b := newSharedRT(t, st), newSharedRT(t, st)
	sid := openSession(t, a, 0)
	for i := 3; i <= 12; i++ {
		mustOK(t, a, aliceID, proposalEnv(sid, msgID("p", i)))
	}
	feed(t, b, st, sid, 1, 12)
	f := follow(b, sid, 0)
	if got := recv(t, f.start, "follow start"); got != 0 {
		t.Fatalf("follower starts after %d, want 0", got)
	}
	for s := uint64(1); s <= 12; s++ {
		f.expect(t, s)
	}
	for i := 13; i <= 26; i++ {
		mustOK(t, a, aliceID, proposalEnv(sid, msgID("p", i)))
	}
	mustOK(t, b, bobID, proposalEnv(sid, "late"))
	if ids := storedIDs(t, st, sid); len(ids) != 27 || ids[26] != "late" {
		t.Fatalf("history %v: want the envelope decided again on node B as record 27", ids)
	}
	for s := uint64(13); s <= 27; s++ {
		f.expect(t, s)
	}
	// The feed now delivers what B already has: nothing is handed twice.
	feed(t, b, st, sid, 13, 27)
	mustOK(t, a, aliceID, proposalEnv(sid, msgID("p", 28)))
	feed(t, b, st, sid, 28, 28)
	f.expect(t, 28)
	mustOK(t, b, initID, commitEnv(sid, "c", "c"))
	f.expect(t, 29)
	if err := recv(t, f.done, "follow end"); !errors.Is(err, ErrFollowEnded) {
		t.Fatalf("Follow: %v, want ErrFollowEnded", err)
	}
}
