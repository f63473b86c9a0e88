package pebblestore_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
	"github.com/macpd/macpd/internal/store/record"
)

// rawIndex returns a session's stored index entry, decoded.
func rawIndex(t *testing.T, fs vfs.FS, id string) store.SessionInfo {
	t.Helper()
	var info store.SessionInfo
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		var err error
		if info, err = record.DecodeIndex(rawGet(t, db, pebblestore.IndexKey(id)), id); err != nil {
			t.Fatal(err)
		}
	})
	return info
}

// The index entry is written by the batch that starts a session and by
// those that change its status, not by the others; Info, LastSeq, List and
// Read report the last record all the same, before and after a reopen
// (tips loaded from the store), and appends continue from it. A batch
// after the terminal record (the store does not refuse one) rewrites the
// index entry.
func TestIndexWrittenOnStatusChange(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", pebblestore.Options{FS: fs})
	const id = "sess"
	check := func(s store.Store, last session.Record, indexedAt uint64) {
		t.Helper()
		recs, err := readAll(s, id)
		if err != nil || len(recs) != int(last.Seq) {
			t.Fatalf("Read: %d records, %v; want %d", len(recs), err, last.Seq)
		}
		tip := recs[len(recs)-1]
		info, err := s.Info(ctx, id)
		want := record.InfoOf(tip)
		if err != nil || !reflect.DeepEqual(info, want) {
			t.Fatalf("Info = %+v, %v; want %+v", info, err, want)
		}
		if n, err := s.LastSeq(ctx, id); err != nil || n != last.Seq {
			t.Fatalf("LastSeq = %d, %v; want %d", n, err, last.Seq)
		}
		if l := listAll(t, s); len(l) != 1 || !reflect.DeepEqual(l[0], want) {
			t.Fatalf("List = %+v; want %+v", l, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := rawIndex(t, fs, id); got.LastSeq != indexedAt {
			t.Fatalf("index entry at record %d, want %d", got.LastSeq, indexedAt)
		}
	}
	reopen := func() *pebblestore.Store { return mustOpen(t, "db", pebblestore.Options{FS: fs}) }

	appendN(t, s, id, 1, 2, 0)
	check(s, rec(id, 2, 0), 2)
	s = reopen()
	appendN(t, s, id, 3, 3, 1) // tip loaded from the store
	appendN(t, s, id, 4, 6, 2) // tip cached
	check(s, rec(id, 6, 2), 2)
	s = reopen()
	appendN(t, s, id, 7, 7, 3)
	if err := s.Append(ctx, []session.Record{expired(id, 8, 4)}); err != nil {
		t.Fatal(err)
	}
	check(s, expired(id, 8, 4), 8)
	s = reopen()
	appendN(t, s, id, 9, 10, 5) // after the end: the store does not refuse it
	check(s, rec(id, 10, 5), 10)
	s = reopen()
	appendN(t, s, id, 11, 11, 6)
	check(s, rec(id, 11, 6), 10)
	s = reopen()
	if err := s.Append(ctx, []session.Record{rec(id, 12, 7), expired(id, 13, 7)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Info(ctx, id); err == nil {
		t.Fatal("Info after Purge found the session")
	}
	_ = s.Close()
}

// A store written with an index entry per batch (the format before the
// index entry was written only on changes of status) reads exactly as one
// written now, and takes appends: the same random workload written both
// ways, then the second half appended to both by this version.
func TestIndexPerBatchStoreReadsIdentically(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf("s%02d", i))
	}
	// Sessions end (an expiry) at random points; ended ones take no more.
	next := make(map[string]uint64)
	ended := make(map[string]bool)
	var batches [][]session.Record
	for i := 0; i < 120; i++ {
		var b []session.Record
		for _, j := range rng.Perm(len(ids))[:1+rng.IntN(4)] {
			id := ids[j]
			if ended[id] {
				continue
			}
			for k := 1 + rng.IntN(3); k > 0; k-- {
				next[id]++
				if next[id] > 3 && rng.IntN(12) == 0 {
					b = append(b, expired(id, next[id], int64(i)))
					ended[id] = true
					break
				}
				b = append(b, rec(id, next[id], int64(i)))
			}
		}
		if len(b) > 0 {
			batches = append(batches, b)
		}
	}
	half := len(batches) / 2
	write := func(o pebblestore.Options, bs [][]session.Record) {
		s := mustOpen(t, "db", o)
		defer s.Close()
		for _, b := range bs {
			if err := s.Append(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	oldFS, newFS := vfs.NewMem(), vfs.NewMem()
	write(pebblestore.WithIndexEveryBatch(pebblestore.Options{FS: oldFS}), batches[:half])
	write(pebblestore.Options{FS: newFS}, batches[:half])
	// The old store's index entries name the last record, the new
	// store's lag behind for OPEN sessions.
	lagging := 0
	for _, id := range ids {
		if rawIndex(t, oldFS, id).LastSeq != rawIndex(t, newFS, id).LastSeq {
			lagging++
		}
	}
	if lagging == 0 {
		t.Fatal("no index entry lags its history in the new store: the test tests nothing")
	}
	compare := func(stage string) {
		t.Helper()
		so := mustOpen(t, "db", pebblestore.Options{FS: oldFS})
		defer so.Close()
		sn := mustOpen(t, "db", pebblestore.Options{FS: newFS})
		defer sn.Close()
		lo, ln := listAll(t, so), listAll(t, sn)
		if !reflect.DeepEqual(lo, ln) || len(lo) != len(ids) {
			t.Fatalf("%s: List differs:\nold %+v\nnew %+v", stage, lo, ln)
		}
		for _, info := range lo {
			if info.Quarantined != "" {
				t.Fatalf("%s: %s quarantined: %s", stage, info.SessionID, info.Quarantined)
			}
		}
		for _, id := range ids {
			io, erro := so.Info(ctx, id)
			in, errn := sn.Info(ctx, id)
			if erro != nil || errn != nil || !reflect.DeepEqual(io, in) {
				t.Fatalf("%s: Info(%s) differs: %+v, %v; %+v, %v", stage, id, io, erro, in, errn)
			}
			no, erro := so.LastSeq(ctx, id)
			nn, errn := sn.LastSeq(ctx, id)
			if erro != nil || errn != nil || no != nn || no != io.LastSeq {
				t.Fatalf("%s: LastSeq(%s) = %d, %v; %d, %v; Info says %d", stage, id, no, erro, nn, errn, io.LastSeq)
			}
			ro, erro := readAll(so, id)
			rn, errn := readAll(sn, id)
			if erro != nil || errn != nil || len(ro) != len(rn) || !bytes.Equal(ro[len(ro)-1].Hash, rn[len(rn)-1].Hash) {
				t.Fatalf("%s: Read(%s) differs: %d records, %v; %d records, %v", stage, id, len(ro), erro, len(rn), errn)
			}
		}
	}
	compare("written")
	write(pebblestore.Options{FS: oldFS}, batches[half:])
	write(pebblestore.Options{FS: newFS}, batches[half:])
	compare("appended to")
	// Purge works on both for every ended session.
	for _, fs := range []vfs.FS{oldFS, newFS} {
		s := mustOpen(t, "db", pebblestore.Options{FS: fs})
		for id := range ended {
			if err := s.Purge(ctx, id); err != nil {
				t.Fatalf("Purge(%s): %v", id, err)
			}
		}
		if n := len(listAll(t, s)); n != len(ids)-len(ended) {
			t.Fatalf("%d sessions after purging %d of %d", n, len(ended), len(ids))
		}
		_ = s.Close()
	}
}
