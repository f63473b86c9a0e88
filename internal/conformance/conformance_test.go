package conformance_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/macpd/macpd/internal/conformance"
	"github.com/macpd/macpd/internal/conformance/inproc"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/testutil"
)

// fixtureDirs are our own fixtures and the spec's (testutil.ConformanceDir:
// the test fails when the spec's are missing).
func fixtureDirs(t *testing.T) []string {
	t.Helper()
	return []string{filepath.Join("..", "..", "testdata", "conformance"), testutil.ConformanceDir(t)}
}

// TestFixturesInProcess runs every fixture against the runtime in-process
// with mode-state and replay-equivalence checks (RFC-MACP-0003 §4;
// checklist §8, DET-7).
func TestFixturesInProcess(t *testing.T) {
	dirs := fixtureDirs(t)
	if len(dirs) == 0 {
		t.Fatal("no fixture directory found")
	}
	fixtures, err := conformance.LoadDirs(dirs...)
	if err != nil {
		t.Fatal(err)
	}
	rt := runtime.New(memstore.New(), builtin.Modes(), policy.DefaultOnly{}, runtime.Options{})
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	target := inproc.Target{RT: rt}
	for _, f := range fixtures {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			res := conformance.Run(context.Background(), f, target, uuid.NewString())
			for _, msg := range res.Failures {
				t.Error(msg)
			}
		})
	}
}
