package conformance_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/macpd/macpd/internal/conformance"
	"github.com/macpd/macpd/internal/conformance/inproc"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/testutil"
)

// Fixture counts of the spec's sets (../shared/README.md): a missing file
// fails the test instead of shrinking the run.
const (
	aprilSpecFixtures  = 12
	latestSpecFixtures = 33
)

// load reads the fixtures of dirs, all in the given format.
func load(t *testing.T, format string, min int, dirs ...string) []*conformance.Fixture {
	t.Helper()
	fixtures, err := conformance.LoadDirs(dirs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(fixtures) < min {
		t.Fatalf("%d fixtures in %q, expected at least %d", len(fixtures), dirs, min)
	}
	for _, f := range fixtures {
		if f.Format != format {
			t.Errorf("%s: format %s, expected %s", f.Name, f.Format, format)
		}
	}
	return fixtures
}

// runInProcess runs fixtures against a fresh in-process runtime whose new
// sessions are bound to profile, with mode-state and replay-equivalence
// checks (RFC-MACP-0003 §4; checklist §8, DET-7). Each failure names the
// fixture (the subtest), the message (1-based index, sender, type) and the
// expected and got outcome and code.
func runInProcess(t *testing.T, profile string, fixtures []*conformance.Fixture) {
	t.Helper()
	limits := session.DefaultLimits()
	limits.Profile = profile
	st := memstore.New()
	reg := registry.New(st, builtin.Modes(), policy.DefaultOnly{}, registry.Options{})
	rt := runtime.New(st, reg, reg, runtime.Options{Limits: limits})
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	target := inproc.Target{RT: rt, Reg: reg}
	for _, f := range fixtures {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			res := conformance.Run(context.Background(), f, target, uuid.NewString())
			for _, msg := range res.Failures {
				t.Error(msg)
			}
			if len(res.Unchecked) > 0 {
				t.Errorf("in-process run left expectations unchecked: %q", res.Unchecked)
			}
		})
	}
}

// TestFixturesInProcess runs macpd's own fixtures (testdata/conformance)
// and the spec's twelve April fixtures (testutil.ConformanceDir) against a
// runtime with the default profile (coord.ProfileApril).
func TestFixturesInProcess(t *testing.T) {
	spec := load(t, conformance.FormatApril, aprilSpecFixtures, testutil.ConformanceDir(t))
	own := load(t, conformance.FormatApril, 1, filepath.Join("..", "..", "testdata", "conformance"))
	runInProcess(t, "", append(own, spec...))
}

// TestLatestFixturesInProcess runs the spec's newest fixtures
// (testutil.ConformanceLatestDir: fully-qualified payload types, inline
// policies) against a runtime whose sessions are bound to
// coord.ProfileLatest.
func TestLatestFixturesInProcess(t *testing.T) {
	fixtures := load(t, conformance.FormatLatest, latestSpecFixtures, testutil.ConformanceLatestDir(t))
	runInProcess(t, coord.ProfileLatest, fixtures)
}
