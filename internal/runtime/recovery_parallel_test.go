package runtime

import (
	"context"
	"errors"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
)

// failingRead is a store whose Read of one session fails.
type failingRead struct {
	store.Store
	id string
}

var errReadFailed = errors.New("injected read failure")

func (f failingRead) Read(ctx context.Context, id string, from uint64, fn func(session.Record) error) error {
	if id == f.id {
		return errReadFailed
	}
	return f.Store.Read(ctx, id, from, fn)
}

// Boot replays the open sessions on several goroutines: every healthy
// session comes back with its whole history, exactly the unreadable one is
// quarantined, and StrictRecovery refuses to start naming it.
func TestRecoveryReplaysInParallel(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(4))
	mem := memstore.New()
	r1 := newRT(t, mem, Options{})
	var sids []string
	for i := range 40 {
		sid := openSession(t, r1, 0)
		for k := range i % 5 {
			mustOK(t, r1, initID, proposalEnv(sid, "p"+strconv.Itoa(k)))
		}
		sids = append(sids, sid)
	}
	r1.Close()
	bad := sids[17]
	st := failingRead{mem, bad}

	strict := New(st, testModes(), defaultPolicies, Options{StrictRecovery: true})
	if err := strict.Start(context.Background()); err == nil || !errors.Is(err, errReadFailed) || !strings.Contains(err.Error(), bad) {
		strict.Close()
		t.Fatalf("strict Start = %v, want the injected failure of %s", err, bad)
	}

	r2 := newRT(t, st, Options{})
	if q := r2.Quarantined(); len(q) != 1 || q[bad] == "" {
		t.Fatalf("quarantined %v, want only %s", q, bad)
	}
	for i, sid := range sids {
		if sid == bad {
			continue
		}
		o := r2.lookup(sid)
		if o == nil {
			t.Fatalf("session %d not resident after recovery", i)
		}
		if want := uint64(2 + i%5); o.sess.Seq != want || o.durable() != want { // start, m0's record, proposals
			t.Errorf("session %d: seq %d, durable %d; want %d", i, o.sess.Seq, o.durable(), want)
		}
	}
}
