package pebblestore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// Damaged write-ahead log (README "Damaged data"): one flipped
// byte early in a long WAL makes Pebble refuse the store (macpd does not
// start). Repair moves the damaged log aside (kept, never deleted),
// quarantines every session it touched and every OPEN session, and the
// store opens again: sessions whose records are in the tables are served
// intact, the suspect ones are refused (quarantined), none is served with
// missing records.
func TestRepairDamagedWAL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := mustOpen(t, dir, pebblestore.Options{MemTableSize: 256 << 10})
	// Intact: terminal sessions written first, then enough volume that
	// their memtable is flushed to tables and their WAL retired.
	var intact []string
	for i := range 20 {
		id := fmt.Sprintf("intact-%02d-xxxxxxxxxxxxxxxxxxxx", i)
		intact = append(intact, id)
		appendN(t, s, id, 1, 3, 0)
		if err := s.Append(ctx, []session.Record{expired(id, 4, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2000 {
		id := fmt.Sprintf("filler-%04d-xxxxxxxxxxxxxxxxxx", i)
		appendN(t, s, id, 1, 1, 0)
		if err := s.Append(ctx, []session.Record{expired(id, 2, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	logsBefore, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	// Victims: OPEN sessions in the newest WAL.
	var victims []string
	for i := range 300 {
		id := fmt.Sprintf("victim-%03d-xxxxxxxxxxxxxxxxxxx", i)
		victims = append(victims, id)
		appendN(t, s, id, 1, 2, 0)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(logs)
	newest := logs[len(logs)-1]
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 3*32<<10 {
		t.Fatalf("newest WAL %s is %d bytes (logs before the victims: %v): too short to damage early", newest, len(b), logsBefore)
	}
	b[1000] ^= 0x40 // one flipped bit in the first block
	if err := os.WriteFile(newest, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pebblestore.Open(dir, pebblestore.Options{}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("open with a damaged WAL: %v, want a corruption error (the premise of repair)", err)
	}

	rep, err := pebblestore.Repair(dir, nil)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if rep.Opened || len(rep.Moved) == 0 {
		t.Fatalf("report %+v: the damaged log was not moved", rep)
	}
	for _, p := range rep.Moved {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("moved log %s: %v (repair never deletes)", p, err)
		}
	}
	s2 := mustOpen(t, dir, pebblestore.Options{})
	defer s2.Close()
	infos := map[string]string{}
	for _, info := range listAll(t, s2) {
		infos[info.SessionID] = info.Quarantined
	}
	for _, id := range intact {
		if q := infos[id]; q != "" {
			t.Fatalf("intact session %s quarantined: %s", id, q)
		}
		recs, err := readAll(s2, id)
		if err != nil || len(recs) != 4 {
			t.Fatalf("intact session %s: %d records, %v", id, len(recs), err)
		}
	}
	for _, id := range victims {
		q, present := infos[id]
		if !present {
			continue // created entirely in the lost part: unknown to the store
		}
		if q == "" || !strings.Contains(q, "repair") {
			t.Fatalf("session %s from the damaged log is served (quarantine %q)", id, q)
		}
		if info, err := s2.Info(ctx, id); err != nil || info.Quarantined == "" {
			t.Fatalf("Info(%s) = %+v, %v: the runtime would serve it", id, info, err)
		}
	}
	if !slices.IsSorted(rep.Quarantined) || len(rep.Quarantined) == 0 {
		t.Fatalf("report quarantined %d sessions", len(rep.Quarantined))
	}
	// A second repair finds nothing to do.
	s2.Close()
	if rep2, err := pebblestore.Repair(dir, nil); err != nil || !rep2.Opened {
		t.Fatalf("second repair: %+v %v", rep2, err)
	}
	t.Logf("moved %v; %d sessions quarantined; %d intact sessions served", rep.Moved, len(rep.Quarantined), len(intact))
}
