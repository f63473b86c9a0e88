package pebblestore_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

func listOpenAll(t testing.TB, s store.Store) []store.SessionInfo {
	t.Helper()
	var out []store.SessionInfo
	if err := s.ListOpen(ctx, func(i store.SessionInfo) error { out = append(out, i); return nil }); err != nil {
		t.Fatalf("ListOpen: %v", err)
	}
	return out
}

// wantOpenList checks that ListOpen lists exactly open (OPEN, not
// quarantined) and quarantined (Quarantined set), in id order, and agrees
// with List: List's OPEN or quarantined sessions, with the same
// summaries. listFirst runs List before ListOpen (List may quarantine what
// ListOpen would otherwise find itself).
func wantOpenList(t *testing.T, s store.Store, listFirst bool, open, quarantined []string) {
	t.Helper()
	var all, got []store.SessionInfo
	if listFirst {
		all, got = listAll(t, s), listOpenAll(t, s)
	} else {
		got, all = listOpenAll(t, s), listAll(t, s)
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(open), quarantined...)))
	var ids []string
	for _, info := range got {
		ids = append(ids, info.SessionID)
		switch q := slices.Contains(quarantined, info.SessionID); {
		case q && info.Quarantined == "":
			t.Fatalf("ListOpen: %s not quarantined", info.SessionID)
		case !q && (info.Quarantined != "" || info.Status != session.Open):
			t.Fatalf("ListOpen: %s is %v, quarantined %q; want OPEN", info.SessionID, info.Status, info.Quarantined)
		}
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("ListOpen = %v, want %v", ids, want)
	}
	var ref []store.SessionInfo
	for _, info := range all {
		if info.Status == session.Open || info.Quarantined != "" {
			ref = append(ref, info)
		}
	}
	if len(ref) != len(got) {
		t.Fatalf("ListOpen gave %d sessions, List %d OPEN or quarantined ones: %+v", len(got), len(ref), ref)
	}
	for i := range ref {
		a, b := ref[i], got[i]
		if a.SessionID != b.SessionID || a.LastSeq != b.LastSeq || a.Status != b.Status || a.LastAcceptedMs != b.LastAcceptedMs ||
			!bytes.Equal(a.LastHash, b.LastHash) || (a.Quarantined == "") != (b.Quarantined == "") {
			t.Fatalf("ListOpen[%d] = %+v, List has %+v", i, b, a)
		}
	}
}

// rawKeys returns the keys of the raw Pebble that start with prefix.
func rawKeys(t *testing.T, db *pebble.DB, prefix string) []string {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: []byte(prefix[:len(prefix)-1] + "0")})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, string(it.Key()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func rawHas(t *testing.T, db *pebble.DB, key []byte) bool {
	t.Helper()
	_, closer, err := db.Get(key)
	if err == nil {
		closer.Close()
		return true
	}
	if err != pebble.ErrNotFound {
		t.Fatal(err)
	}
	return false
}

// A store written before the open set existed (simulated: its o/ keys and
// marker deleted) answers ListOpen correctly when opened read-only (by
// reading every session, writing nothing) and writable (the first Open
// builds the open set once: o/ keys for the sessions whose index entry is
// not terminal or does not decode, and the marker); later opens use it.
func TestListOpenOnStoreWithoutOpenSet(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", pebblestore.Options{FS: fs})
	appendN(t, s, "o1", 1, 2, 0)
	appendN(t, s, "o1", 3, 5, 1) // index entry lags
	appendN(t, s, "o2", 1, 1, 0)
	appendN(t, s, "t1", 1, 3, 0)
	if err := s.Append(ctx, []session.Record{expired("t1", 4, 1)}); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "t2", 1, 2, 0)
	if err := s.Append(ctx, []session.Record{expired("t2", 3, 1), rec("o3", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "bad", 1, 2, 0) // OPEN; its index entry is damaged below
	appendN(t, s, "t3", 1, 3, 0)
	if err := s.Append(ctx, []session.Record{expired("t3", 4, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	open := []string{"o1", "o2", "o3"}
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		var want []string
		for _, id := range []string{"bad", "o1", "o2", "o3"} {
			want = append(want, string(pebblestore.OpenKey(id)))
		}
		if got := rawKeys(t, db, "o/"); !slices.Equal(got, want) || !rawHas(t, db, pebblestore.OpenSetKey()) {
			t.Fatalf("open set %q (marker %v), want %q and the marker", got, rawHas(t, db, pebblestore.OpenSetKey()), want)
		}
		// The damage: t3 (terminal) is marked quarantined, bad's index
		// entry does not decode.
		rawSet(t, db, []byte("q/t3"), []byte("session t3: damaged (test)"))
		rawSet(t, db, pebblestore.IndexKey("bad"), []byte{0xff, 0xff, 0xff})
		// As written before the open set existed.
		for _, k := range append(want, string(pebblestore.OpenSetKey())) {
			if err := db.Delete([]byte(k), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if got := string(rawGet(t, db, []byte("f"))); got != "macpd.store.v2" {
			t.Fatalf("format marker %q, want macpd.store.v2", got)
		}
		rawSet(t, db, []byte("f"), []byte("macpd.store.v1"))
	})
	quarantined := []string{"bad", "t3"}

	ro := mustOpen(t, "db", pebblestore.Options{FS: fs, ReadOnly: true})
	wantOpenList(t, ro, false, open, quarantined)
	_ = ro.Close()
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		if got := rawKeys(t, db, "o/"); len(got) != 0 || rawHas(t, db, pebblestore.OpenSetKey()) || rawHas(t, db, []byte("q/bad")) || string(rawGet(t, db, []byte("f"))) != "macpd.store.v1" {
			t.Fatalf("a read-only open wrote: open set %q, marker %v, mark of bad %v, format %q", got, rawHas(t, db, pebblestore.OpenSetKey()), rawHas(t, db, []byte("q/bad")), rawGet(t, db, []byte("f")))
		}
	})

	var logged bytes.Buffer
	w := mustOpen(t, "db", pebblestore.Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if !strings.Contains(logged.String(), "built the open-session set") || !strings.Contains(logged.String(), "open=4") {
		t.Fatalf("no log of the open set being built: %s", logged.String())
	}
	wantOpenList(t, w, false, open, quarantined)
	_ = w.Close()
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		var want []string
		for _, id := range []string{"bad", "o1", "o2", "o3"} {
			want = append(want, string(pebblestore.OpenKey(id)))
		}
		if got := rawKeys(t, db, "o/"); !slices.Equal(got, want) || !rawHas(t, db, pebblestore.OpenSetKey()) {
			t.Fatalf("built open set %q (marker %v), want %q and the marker", got, rawHas(t, db, pebblestore.OpenSetKey()), want)
		}
		if !rawHas(t, db, []byte("q/bad")) {
			t.Fatal("ListOpen found bad's damage but did not mark it")
		}
		if got := string(rawGet(t, db, []byte("f"))); got != "macpd.store.v2" {
			t.Fatalf("format marker %q after building the open set, want macpd.store.v2", got)
		}
	})

	// Later opens use the set, writable and read-only; appends keep it.
	logged.Reset()
	w = mustOpen(t, "db", pebblestore.Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if strings.Contains(logged.String(), "built the open-session set") {
		t.Fatalf("open set built again: %s", logged.String())
	}
	wantOpenList(t, w, false, open, quarantined)
	if err := w.Append(ctx, []session.Record{expired("o2", 2, 5), rec("o4", 1, 5)}); err != nil {
		t.Fatal(err)
	}
	open = []string{"o1", "o3", "o4"}
	wantOpenList(t, w, false, open, quarantined)
	_ = w.Close()
	ro = mustOpen(t, "db", pebblestore.Options{FS: fs, ReadOnly: true})
	wantOpenList(t, ro, false, open, quarantined)
	_ = ro.Close()
}

// ListOpen summarizes the sessions it lists as List does: damage in an
// OPEN session's summary, found by nothing before, is listed as
// quarantined (and marked, unless read-only), the other sessions are
// unaffected.
func TestListOpenFindsDamage(t *testing.T) {
	for _, tc := range []struct {
		name, why string
		damage    func(t *testing.T, db *pebble.DB)
	}{
		{"flipped index byte", "index", func(t *testing.T, db *pebble.DB) {
			k := pebblestore.IndexKey(victim)
			v := rawGet(t, db, k)
			v[len(v)-3] ^= 0x01
			rawSet(t, db, k, v)
		}},
		{"missing index entry", "without an index entry", func(t *testing.T, db *pebble.DB) {
			if err := db.Delete(pebblestore.IndexKey(victim), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}},
		{"flipped last record byte", "record 6", func(t *testing.T, db *pebble.DB) {
			k := pebblestore.RecordKey(victim, 6)
			v := rawGet(t, db, k)
			v[len(v)/2] ^= 0x10
			rawSet(t, db, k, v)
		}},
	} {
		for _, ro := range []bool{false, true} {
			name := tc.name
			if ro {
				name += "/read-only"
			}
			t.Run(name, func(t *testing.T) {
				s, fs := damaged(t, func(db *pebble.DB) { tc.damage(t, db) })
				if ro {
					_ = s.Close()
					s = mustOpen(t, "db", pebblestore.Options{FS: fs, ReadOnly: true})
					defer s.Close()
				}
				infos := listOpenAll(t, s)
				if len(infos) != 2 || infos[0].SessionID != victim || infos[1].SessionID != bystander {
					t.Fatalf("ListOpen = %+v", infos)
				}
				if !strings.Contains(infos[0].Quarantined, tc.why) || infos[1].Quarantined != "" || infos[1].LastSeq != 4 {
					t.Fatalf("ListOpen = %+v; want the victim quarantined (%q), the bystander intact", infos, tc.why)
				}
				_ = s.Close()
				rawEdit(t, fs, "db", func(db *pebble.DB) {
					if marked := rawHas(t, db, []byte("q/"+victim)); marked == ro {
						t.Fatalf("read-only %v, marked %v", ro, marked)
					}
				})
			})
		}
	}
}

// Open-set keys left by a build that does not keep the set (it ended or
// purged a session this build started): ListOpen skips them.
func TestListOpenSkipsStaleEntries(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", pebblestore.Options{FS: fs})
	appendN(t, s, "ended", 1, 2, 0)
	if err := s.Append(ctx, []session.Record{expired("ended", 3, 1)}); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "open", 1, 2, 0)
	_ = s.Close()
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		rawSet(t, db, pebblestore.OpenKey("ended"), nil)
		rawSet(t, db, pebblestore.OpenKey("gone"), nil)
	})
	s = mustOpen(t, "db", pebblestore.Options{FS: fs})
	defer s.Close()
	wantOpenList(t, s, false, []string{"open"}, nil)
	// Purge drops the stale key.
	if err := s.Purge(ctx, "ended"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		if rawHas(t, db, pebblestore.OpenKey("ended")) {
			t.Fatal("Purge left the session's open-set key")
		}
	})
}

// ListOpen does not read terminal sessions: with every terminal session's
// index entry and last record damaged, List finds them all, ListOpen none
// (and marks none).
func TestListOpenReadsNoTerminalSession(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", pebblestore.Options{FS: fs})
	var ended []string
	for i := range 30 {
		id := "ended-" + string(rune('a'+i%26)) + string(rune('0'+i/26))
		ended = append(ended, id)
		appendN(t, s, id, 1, 2, 0)
		if err := s.Append(ctx, []session.Record{expired(id, 3, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	appendN(t, s, "open-1", 1, 3, 0)
	appendN(t, s, "open-2", 1, 1, 0)
	_ = s.Close()
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		for _, id := range ended {
			rawSet(t, db, pebblestore.IndexKey(id), []byte{0xff})
			rawSet(t, db, pebblestore.RecordKey(id, 3), []byte{0xff})
		}
	})
	s = mustOpen(t, "db", pebblestore.Options{FS: fs})
	defer s.Close()
	infos := listOpenAll(t, s)
	if len(infos) != 2 || infos[0].SessionID != "open-1" || infos[1].SessionID != "open-2" || infos[0].Quarantined != "" || infos[1].Quarantined != "" {
		t.Fatalf("ListOpen = %+v, want the two OPEN sessions only", infos)
	}
	for _, info := range listAll(t, s) { // List reads (and marks) them all
		if strings.HasPrefix(info.SessionID, "ended-") && info.Quarantined == "" {
			t.Fatalf("List: %s not quarantined", info.SessionID)
		}
	}
	// Once marked, they are quarantined sessions: ListOpen lists them.
	if n := len(listOpenAll(t, s)); n != 32 {
		t.Fatalf("ListOpen after List marked the damage: %d sessions, want 32", n)
	}
}

// The format marker ratchets: a store whose open set exists but whose
// marker still says v1 (built by a build that did not ratchet) is
// upgraded to v2 by a writable Open without rebuilding the set, a
// read-only Open leaves it; a format this build does not know is refused,
// named, and nothing is written.
func TestFormatMarker(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", pebblestore.Options{FS: fs})
	appendN(t, s, "o1", 1, 2, 0)
	_ = s.Close()
	rawEdit(t, fs, "db", func(db *pebble.DB) { rawSet(t, db, []byte("f"), []byte("macpd.store.v1")) })

	ro := mustOpen(t, "db", pebblestore.Options{FS: fs, ReadOnly: true})
	wantOpenList(t, ro, false, []string{"o1"}, nil)
	_ = ro.Close()
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		if got := string(rawGet(t, db, []byte("f"))); got != "macpd.store.v1" {
			t.Fatalf("read-only open wrote the format marker: %q", got)
		}
	})
	var logged bytes.Buffer
	w := mustOpen(t, "db", pebblestore.Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if strings.Contains(logged.String(), "built the open-session set") {
		t.Fatalf("open set rebuilt though its marker was there: %s", logged.String())
	}
	wantOpenList(t, w, false, []string{"o1"}, nil)
	_ = w.Close()
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		if got := string(rawGet(t, db, []byte("f"))); got != "macpd.store.v2" {
			t.Fatalf("format marker %q after a writable open, want macpd.store.v2", got)
		}
		rawSet(t, db, []byte("f"), []byte("macpd.store.v9"))
	})
	for _, ro := range []bool{false, true} {
		if st, err := pebblestore.Open("db", pebblestore.Options{FS: fs, ReadOnly: ro}); err == nil {
			_ = st.Close()
			t.Fatalf("a store of format v9 opened (read-only %v)", ro)
		} else if !strings.Contains(err.Error(), `"macpd.store.v9"`) {
			t.Fatalf("refusal does not name the format: %v", err)
		}
	}
	rawEdit(t, fs, "db", func(db *pebble.DB) {
		if got := string(rawGet(t, db, []byte("f"))); got != "macpd.store.v9" {
			t.Fatalf("a refused open wrote the format marker: %q", got)
		}
	})
}
