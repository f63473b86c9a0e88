package conformance_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/conformance"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/memstore"
)

// specFixtures is the spec's fixture directory beside the checkout
// (../shared/conformance); present in CI and on developer machines.
func fixtureDirs(t *testing.T) []string {
	t.Helper()
	dirs := []string{filepath.Join("..", "..", "testdata", "conformance")}
	spec := filepath.Join("..", "..", "..", "shared", "conformance")
	if _, err := os.Stat(spec); err == nil {
		dirs = append(dirs, spec)
	} else {
		t.Logf("spec fixtures not found at %s; running our own fixtures only", spec)
	}
	var out []string
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
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
	rt := runtime.New(memstore.New(), app.BuiltinModes(), policy.DefaultOnly{}, runtime.Options{})
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	target := conformance.Local{RT: rt}
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
