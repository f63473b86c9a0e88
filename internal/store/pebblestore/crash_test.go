package pebblestore_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// plan builds n batches over the given sessions: each batch takes 1..3
// sessions and 1..max records of each; AcceptedAtMs is the batch number.
func plan(rng *rand.Rand, ids []string, n, maxPer int) [][]session.Record {
	next := make(map[string]uint64)
	var out [][]session.Record
	for i := 0; i < n; i++ {
		var b []session.Record
		for _, j := range rng.Perm(len(ids))[:1+rng.IntN(3)] {
			id := ids[j]
			for k := 1 + rng.IntN(maxPer); k > 0; k-- {
				next[id]++
				r := rec(id, next[id], int64(i))
				r.Envelope.Payload = bytes.Repeat([]byte{byte(i)}, rng.IntN(600))
				b = append(b, r)
			}
		}
		out = append(out, b)
	}
	return out
}

// snapshotOf is a crash clone and what was known when it was taken:
// batches [0, acked) had returned nil, batches [started, ...) had not been
// handed to Append yet.
type snapshotOf struct {
	fs              *vfs.MemFS
	acked, started  int
	unsyncedPercent int
}

// checkClone opens a crash clone and checks the durability contract: every
// acknowledged batch is present, every batch not yet started is absent,
// and the present batches are whole and form a prefix (the WAL is
// replayed in order, batch by batch).
func checkClone(t *testing.T, c snapshotOf, ids []string, batches [][]session.Record) {
	t.Helper()
	s, err := pebblestore.Open("db", pebblestore.Options{FS: c.fs})
	if err != nil {
		t.Fatalf("open crash clone (acked %d, unsynced %d%%): %v", c.acked, c.unsyncedPercent, err)
	}
	defer s.Close()
	present := make([]int, len(batches))
	for _, id := range ids {
		recs, err := readAll(s, id)
		if err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatalf("clone: Read(%s): %v", id, err)
		}
		for _, r := range recs {
			present[r.AcceptedAtMs]++
		}
	}
	for _, info := range listAll(t, s) {
		if info.Quarantined != "" {
			t.Fatalf("clone: session %s quarantined: %s", info.SessionID, info.Quarantined)
		}
	}
	gap := -1
	for i, b := range batches {
		switch {
		case present[i] != 0 && present[i] != len(b):
			t.Fatalf("batch %d: %d of %d records survived (partial batch)", i, present[i], len(b))
		case i < c.acked && present[i] == 0:
			t.Fatalf("batch %d was acknowledged before the crash but is missing (acked %d)", i, c.acked)
		case i >= c.started && present[i] != 0:
			t.Fatalf("batch %d was written before Append was called", i)
		case present[i] == 0 && gap < 0:
			gap = i
		case present[i] != 0 && gap >= 0:
			t.Fatalf("batch %d present after missing batch %d", i, gap)
		}
	}
}

// TestCrashSafety appends batches while taking crash clones of the
// filesystem at random moments (with none, half or all of the unsynced
// data surviving, which also produces torn WAL tails), and checks every
// clone with checkClone.
func TestCrashSafety(t *testing.T) {
	for _, unsynced := range []int{0, 50, 100} {
		t.Run(fmt.Sprintf("unsynced=%d%%", unsynced), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(unsynced), 7))
			ids := []string{"s-a", "s-a0", "s-b", "s-c", "s-d", "s-e"}
			batches := plan(rng, ids, 200, 16)
			fs := vfs.NewCrashableMem()
			s := mustOpen(t, "db", pebblestore.Options{FS: noReuseFS{fs}, MemTableSize: 256 << 10}) // small: flushes happen too
			var acked, started atomic.Int64
			done := make(chan error, 1)
			go func() {
				for i, b := range batches {
					started.Store(int64(i + 1))
					if err := s.Append(ctx, b); err != nil {
						done <- fmt.Errorf("batch %d: %w", i, err)
						return
					}
					acked.Store(int64(i + 1))
				}
				done <- nil
			}()
			// Crash points: 25 moments spread over the run, each taken as
			// soon as a chosen number of batches is acknowledged, while
			// the next ones are in flight.
			targets := make([]int, 25)
			for i := range targets {
				targets[i] = rng.IntN(len(batches))
			}
			slices.Sort(targets)
			var clones []snapshotOf
			for _, target := range targets {
				for int(acked.Load()) < target {
					time.Sleep(50 * time.Microsecond)
				}
				a := int(acked.Load())
				c := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rand.New(rand.NewPCG(uint64(a), 1))})
				clones = append(clones, snapshotOf{fs: c, acked: a, started: int(started.Load()), unsyncedPercent: unsynced})
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// And one after the last acknowledgement, before Close.
			clones = append(clones, snapshotOf{fs: fs.CrashClone(vfs.CrashCloneCfg{}), acked: len(batches), started: len(batches)})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for _, c := range clones {
				checkClone(t, c, ids, batches)
			}
		})
	}
}

// noReuseFS turns WAL recycling into remove + create. MemFS.ReuseForWrite
// takes its clone lock for reading and calls Rename, which takes it again;
// with a CrashClone waiting for the lock in between, the two deadlock (a
// recursive RLock, a bug in Pebble's test filesystem, not in the store).
type noReuseFS struct{ vfs.FS }

func (fs noReuseFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.Remove(oldname); err != nil {
		return nil, err
	}
	return fs.Create(newname, category)
}

// TestTornWALTail cuts the last WAL file inside its last batch (a crash in
// the middle of writing it): the store opens, every earlier batch is there
// and the torn batch is wholly absent.
func TestTornWALTail(t *testing.T) {
	for _, cut := range []int{1, 7, 100} {
		t.Run(fmt.Sprintf("cut=%d", cut), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			s := mustOpen(t, "db", pebblestore.Options{FS: fs})
			for i := 0; i < 10; i++ {
				appendN(t, s, "sess", uint64(i*5+1), uint64(i*5+5), int64(i))
			}
			last := []session.Record{rec("sess", 51, 10), rec("other", 1, 10), rec("other", 2, 10)}
			last[0].Envelope.Payload = bytes.Repeat([]byte{'x'}, 300)
			if err := s.Append(ctx, last); err != nil {
				t.Fatal(err)
			}
			c := fs.CrashClone(vfs.CrashCloneCfg{})
			_ = s.Close()
			wal := lastWAL(t, c, "db")
			data := readFile(t, c, wal)
			writeFile(t, c, wal, data[:len(data)-cut])

			s2 := mustOpen(t, "db", pebblestore.Options{FS: c})
			defer s2.Close()
			recs, err := readAll(s2, "sess")
			if err != nil || len(recs) != 50 {
				t.Fatalf("after a torn tail: %d records, %v; want the 50 before the torn batch", len(recs), err)
			}
			if n, err := s2.LastSeq(ctx, "other"); err == nil {
				t.Fatalf("torn batch partly visible: other has %d records", n)
			}
			// The store goes on from there.
			if err := s2.Append(ctx, last); err != nil {
				t.Fatalf("append after recovery: %v", err)
			}
		})
	}
}

func lastWAL(t *testing.T, fs vfs.FS, dir string) string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wal string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") && n > wal {
			wal = n
		}
	}
	if wal == "" {
		t.Fatalf("no WAL in %v", names)
	}
	return fs.PathJoin(dir, wal)
}

func readFile(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, fs vfs.FS, name string, data []byte) {
	t.Helper()
	if err := fs.Remove(name); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
