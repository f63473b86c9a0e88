package pebblestore_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/store/pebblestore"
)

// freshStore writes a new store in dir whose first (and only) WAL holds
// the format marker and sessions records over more than one 32 KiB block,
// and returns that WAL's path.
func freshStore(t testing.TB, dir string) string {
	t.Helper()
	s := mustOpen(t, dir, pebblestore.Options{})
	for i := range 150 {
		appendN(t, s, fmt.Sprintf("fresh-%03d-xxxxxxxxxxxxxxxxxxxxxxxx", i), 1, 3, 0)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(logs)
	if len(logs) == 0 {
		t.Fatal("no WAL")
	}
	return logs[0]
}

// README "Damaged data", issue 26 item 5: macpctl repair panicked in
// scanWAL on the first WAL of a fresh store, whose first batch holds the
// 1-byte format key "f" (sliced as if it began with "h/"). Repair reads
// every WAL of a store that does not open, so every WAL must scan: the
// first one intact (its sessions named) and with one flipped bit at each
// of several positions (no panic; what was read before the damage is
// named).
func TestRepairScansFirstWALOfFreshStore(t *testing.T) {
	for _, k := range [][]byte{[]byte("f"), []byte("h"), []byte("h/"), []byte("h/x"), []byte("i"), nil} {
		if id, _, ok := pebblestore.ParseHistKey(k); ok || id != "" && !strings.HasPrefix(string(k), "h/") {
			t.Errorf("ParseHistKey(%q) = %q, ok %v", k, id, ok)
		}
	}
	dir := filepath.Join(t.TempDir(), "data")
	wal := freshStore(t, dir)
	ids, bad, err := pebblestore.ScanWAL(wal)
	if err != nil || bad {
		t.Fatalf("intact first WAL: bad %v, err %v", bad, err)
	}
	if len(ids) != 150 || !ids["fresh-000-xxxxxxxxxxxxxxxxxxxxxxxx"] {
		t.Fatalf("intact first WAL names %d sessions", len(ids))
	}
	orig, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{7, 300, 5000, 40000, 100000} {
		b := bytes.Clone(orig)
		b[at] ^= 0x10
		p := filepath.Join(t.TempDir(), filepath.Base(wal))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		ids, bad, err := pebblestore.ScanWAL(p)
		if err != nil {
			t.Fatalf("byte %d: %v", at, err)
		}
		if !bad {
			t.Errorf("byte %d flipped: the damage was not seen", at)
		}
		if at > 32<<10 && len(ids) == 0 {
			t.Errorf("byte %d flipped: no session named from the intact first block", at)
		}
	}
	// And Repair of the store with that WAL damaged does not panic
	// either (here Pebble opens it: a damaged only log reads as torn).
	b := bytes.Clone(orig)
	b[300] ^= 0x10
	if err := os.WriteFile(wal, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pebblestore.Repair(dir, nil); err != nil {
		t.Fatalf("Repair: %v", err)
	}
}

// copyDir copies the regular files of src into a new dst.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Issue 26 item 5: Repair never panics, whatever the damage to a WAL
// (flipped bytes anywhere, a cut): it repairs the store or returns an
// error.
func FuzzRepairDamagedWAL(f *testing.F) {
	tmpl := filepath.Join(f.TempDir(), "tmpl")
	wal := freshStore(f, tmpl)
	walName, _ := filepath.Rel(tmpl, wal)
	for _, seed := range []struct {
		at   uint32
		xor  byte
		cut  uint32
		more []byte
	}{{7, 0x10, 0, nil}, {300, 0xff, 0, nil}, {33000, 0x01, 0, nil}, {0, 0, 40000, nil}, {12, 0x80, 0, []byte{0, 0, 0, 0, 1}}} {
		f.Add(seed.at, seed.xor, seed.cut, seed.more)
	}
	f.Fuzz(func(t *testing.T, at uint32, xor byte, cut uint32, more []byte) {
		dir := filepath.Join(t.TempDir(), "data")
		copyDir(t, tmpl, dir)
		p := filepath.Join(dir, walName)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[int(at)%len(b)] ^= xor
		// more overwrites the bytes after at (a damaged run).
		for i, x := range more {
			b[(int(at)+1+i)%len(b)] = x
		}
		if cut > 0 {
			b = b[:int(cut)%len(b)]
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := pebblestore.Repair(dir, nil); err != nil {
			t.Logf("Repair: %v", err) // an error is an answer; a panic is not
		}
		// Repair scans every log of a store Pebble refuses; scan this one
		// whatever Pebble made of it.
		if _, _, err := pebblestore.ScanWAL(p); err != nil {
			t.Logf("ScanWAL: %v", err)
		}
	})
}
