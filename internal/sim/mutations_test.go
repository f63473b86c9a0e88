package sim

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Harness-only mutations: defects planted in the simulated world, not in
// product code, to show that the invariants catch them (-mutate NAME or
// SIM_MUTATE=NAME). TestSimFindsMutations requires each to be found.
const (
	// mutLyingSync: the disk acknowledges fsyncs of Pebble's write-ahead
	// log without making anything durable (a drive with a volatile write
	// cache that lies), so the runtime acks envelopes that a crash then
	// loses: "every acknowledged envelope is in history after any crash".
	mutLyingSync = "lyingsync"
	// mutEarlyRelease (the stream-budget simulation, budget_test.go): the
	// simulated consumer returns a record's charge as soon as its
	// transport accepted it (Sent), not once the client took it, so the
	// budget lets streams whose clients do not read hold more than the
	// bounds: "what is held never exceeds the budget and the shares".
	mutEarlyRelease = "earlyrelease"
)

// lyingFS wraps the disk: WAL files it opens for writing report every
// sync as done without syncing.
type lyingFS struct{ vfs.FS }

func (fs lyingFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return lyingFile{f}, nil
}

func (fs lyingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	return fs.wrap(name, f, err)
}

func (fs lyingFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, cat)
	return fs.wrap(newname, f, err)
}

func (fs lyingFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, cat, opts...)
	return fs.wrap(name, f, err)
}

type lyingFile struct{ vfs.File }

func (lyingFile) Sync() error                { return nil }
func (lyingFile) SyncData() error            { return nil }
func (lyingFile) SyncTo(int64) (bool, error) { return true, nil }

// TestSimFindsMutations runs the first seeds under each harness-only
// mutation and requires the invariants to catch it: a harness that lets
// a lying disk through proves nothing when it passes.
func TestSimFindsMutations(t *testing.T) {
	for _, m := range []string{mutLyingSync} {
		found := 0
		const tries = 3
		for seed := uint64(1); seed <= tries; seed++ {
			_, failed := run(config{seed: seed, steps: steps(), mutate: m})
			if failed != "" {
				found++
				t.Logf("mutation %s, seed %d: %s", m, seed, failed)
			}
		}
		if found == 0 {
			t.Errorf("mutation %s: not found by seeds 1..%d", m, tries)
		}
	}
	// The stream-budget simulation's mutation.
	found := 0
	const tries = 3
	for seed := uint64(1); seed <= tries; seed++ {
		if _, failed, _ := runBudget(config{seed: seed, steps: budgetSteps(), mutate: mutEarlyRelease}); failed != "" {
			found++
			t.Logf("mutation %s, budget seed %d: %s", mutEarlyRelease, seed, failed)
		}
	}
	if found == 0 {
		t.Errorf("mutation %s: not found by budget seeds 1..%d", mutEarlyRelease, tries)
	}
}
