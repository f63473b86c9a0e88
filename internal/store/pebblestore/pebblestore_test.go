package pebblestore_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
	"github.com/macpd/macpd/internal/store/storetest"
)

func mustOpen(t testing.TB, dir string, o pebblestore.Options) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.Open(dir, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

// The shared suite on an in-memory filesystem, reopening on the same FS.
func TestStoreMemFS(t *testing.T) {
	fss := map[store.Store]vfs.FS{}
	storetest.Run(t,
		func(t *testing.T) store.Store {
			fs := vfs.NewMem()
			s := mustOpen(t, "db", pebblestore.Options{FS: fs})
			fss[s] = fs
			return s
		},
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			fs := fss[s]
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			n := mustOpen(t, "db", pebblestore.Options{FS: fs})
			fss[n] = fs
			return n
		}))
}

// The shared suite on a real directory, with reopen.
func TestStoreDisk(t *testing.T) {
	storetest.Run(t,
		func(t *testing.T) store.Store { return mustOpen(t, t.TempDir(), pebblestore.Options{}) },
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			dir := s.(*pebblestore.Store).Dir()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return mustOpen(t, dir, pebblestore.Options{})
		}))
}
