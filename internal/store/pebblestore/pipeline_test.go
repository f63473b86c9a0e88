package pebblestore_test

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// Pipelined appends (store.Pipeliner): appends started before the earlier
// ones are durable continue each session's history from the queued
// records; after the waits, everything is stored once, in order, chained,
// and survives a crash.
func TestAppendAsyncPipelined(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := mustOpen(t, "db", pebblestore.Options{FS: mem})
	var waits []func() error
	for i := uint64(0); i < 8; i++ {
		// Each append continues "a" from the previous, still in flight,
		// and starts a new session.
		recs := []session.Record{rec("a", 2*i+1, 0), rec("a", 2*i+2, 0), rec(string(rune('b'+i))+"-s", 1, 0)}
		w, err := s.AppendAsync(ctx, recs)
		if err != nil {
			t.Fatalf("AppendAsync %d: %v", i, err)
		}
		waits = append(waits, w)
	}
	// A validation error is immediate and writes nothing: "a" continues
	// from 16, not 3.
	if _, err := s.AppendAsync(ctx, []session.Record{rec("a", 3, 0)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("out-of-order AppendAsync = %v, want ErrConflict", err)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	check := func(s store.Store) {
		t.Helper()
		a, err := readAll(s, "a")
		if err != nil || len(a) != 16 {
			t.Fatalf("a: %d records, %v; want 16", len(a), err)
		}
		for i, r := range a {
			if r.Seq != uint64(i+1) {
				t.Fatalf("a record %d has seq %d", i, r.Seq)
			}
		}
		if n := len(listAll(t, s)); n != 9 {
			t.Fatalf("%d sessions listed, want 9", n)
		}
	}
	check(s)
	appendN(t, s, "a", 17, 17, 0) // Append continues after the pipelined ones
	_ = s.Close()
	s2 := mustOpen(t, "db", pebblestore.Options{FS: crashed})
	check(s2)
	_ = s2.Close()
}

// A failed WAL sync under pipelining: the wait of that append and of every
// later one fail with ErrFailed, and the store fails closed.
func TestAppendAsyncFailedSync(t *testing.T) {
	fault := &walFault{kinds: syncOps}
	s := mustOpen(t, "db", pebblestore.Options{FS: errorfs.Wrap(vfs.NewMem(), fault)})
	appendN(t, s, "a", 1, 2, 0)
	fault.armed.Store(true)
	w1, err1 := s.AppendAsync(ctx, []session.Record{rec("a", 3, 0)})
	w2, err2 := s.AppendAsync(ctx, []session.Record{rec("a", 4, 0), rec("b", 1, 0)})
	var errs []error
	for _, p := range []struct {
		w   func() error
		err error
	}{{w1, err1}, {w2, err2}} {
		if p.err != nil {
			errs = append(errs, p.err) // the store may already have failed
			continue
		}
		errs = append(errs, p.w())
	}
	fault.armed.Store(false)
	for i, err := range errs {
		if !errors.Is(err, store.ErrFailed) {
			t.Fatalf("append %d with a failing WAL sync = %v, want ErrFailed", i+1, err)
		}
	}
	if _, err := s.AppendAsync(ctx, []session.Record{rec("c", 1, 0)}); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("AppendAsync after the failure = %v, want ErrFailed", err)
	}
	_ = s.Close()
}
