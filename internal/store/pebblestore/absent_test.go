package pebblestore_test

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// Package doc: absent sessions. Info's "absent" answer is used once by the
// append that starts the session, and the session then exists for every
// reader.
func TestAbsentUsedOnce(t *testing.T) {
	s := mustOpen(t, "db", pebblestore.Options{FS: vfs.NewMem()})
	defer s.Close()
	if _, err := s.Info(ctx, "new"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Info(new) = %v", err)
	}
	if n := pebblestore.AbsentLen(s); n != 1 {
		t.Fatalf("absent set has %d entries after Info, want 1", n)
	}
	appendN(t, s, "new", 1, 3, 0)
	if n := pebblestore.AbsentLen(s); n != 0 {
		t.Fatalf("absent set has %d entries after the append, want 0", n)
	}
	if info, err := s.Info(ctx, "new"); err != nil || info.LastSeq != 3 {
		t.Fatalf("Info(new) = %+v, %v", info, err)
	}
	// A second start of the same session is a conflict, as before.
	if err := s.Append(ctx, []session.Record{rec("new", 1, 1)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second start: %v, want ErrConflict", err)
	}
}

// The race the counter closes: a batch that writes the session (and
// ends it, so no tip is cached) after Info's snapshot and before Info
// records the session as absent. Without the counter Info would record
// it, and the next start of that id would overwrite the ended session's
// first record and index entry; with it, the start is a conflict.
func TestAbsentRaceWithAppend(t *testing.T) {
	s := mustOpen(t, "db", pebblestore.Options{FS: vfs.NewMem()})
	defer s.Close()
	defer pebblestore.SetInfoAbsentHook(nil)
	pebblestore.SetInfoAbsentHook(func(id string) {
		pebblestore.SetInfoAbsentHook(nil) // once
		if err := s.Append(ctx, []session.Record{rec(id, 1, 0), expired(id, 2, 0)}); err != nil {
			t.Errorf("append in the window: %v", err)
		}
	})
	if _, err := s.Info(ctx, "raced"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Info(raced) = %v, want ErrNotFound (its snapshot came first)", err)
	}
	if n := pebblestore.AbsentLen(s); n != 0 {
		t.Fatalf("absent set has %d entries: Info recorded a session written after its snapshot", n)
	}
	if err := s.Append(ctx, []session.Record{rec("raced", 1, 5)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("start of a stored session: %v, want ErrConflict", err)
	}
	recs, err := readAll(s, "raced")
	if err != nil || len(recs) != 2 || recs[0].AcceptedAtMs != 0 {
		t.Fatalf("stored session changed: %d records, %v", len(recs), err)
	}
}

// A read-only store keeps no absent set, and the set is bounded.
func TestAbsentBounded(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", pebblestore.Options{FS: fs})
	for i := 0; i < 5000; i++ {
		_, _ = s.Info(ctx, "gone-"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)))
	}
	if n := pebblestore.AbsentLen(s); n > 4096 {
		t.Fatalf("absent set grew to %d", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro := mustOpen(t, "db", pebblestore.Options{FS: fs, ReadOnly: true})
	defer ro.Close()
	if _, err := ro.Info(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if n := pebblestore.AbsentLen(ro); n != 0 {
		t.Fatalf("read-only store recorded %d absent sessions", n)
	}
}
