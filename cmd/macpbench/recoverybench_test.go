package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// recovery gen writes a directory that verify accepts and replay
// reads; bad command lines are usage errors.
func TestBenchRecoveryGenReplay(t *testing.T) {
	r := newRunner(t, map[string]string{})
	dir := filepath.Join(t.TempDir(), "data")
	res := r.Ok("recovery", "gen", "--data-dir", dir, "--sessions", "40", "--mix", "open=0.5,resolved=0.5", "--json")
	if !strings.Contains(res.Out, "40 sessions (open 20, resolved 20), 400 envelopes, 400 records") {
		t.Fatalf("gen output:\n%s", res.Out)
	}
	// What macpctl verify runs.
	st, err := pebblestore.Open(dir, pebblestore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ok, failed, err := verify.Verify(context.Background(), st, builtin.Modes(), session.DefaultLimits(), func(verify.SessionResult) {})
	st.Close()
	if err != nil || ok != 40 || failed != 0 {
		t.Fatalf("verify: %d ok, %d failed, %v", ok, failed, err)
	}
	res = r.Ok("recovery", "replay", "--data-dir", dir, "--runs", "1")
	if !strings.Contains(res.Out, "replay_envelopes_per_s") || !strings.Contains(res.Out, "      40        400") {
		t.Fatalf("replay output:\n%s", res.Out)
	}
	for _, args := range [][]string{
		{"recovery"},
		{"recovery", "frobnicate", "--data-dir", dir},
		{"recovery", "gen"},
		{"recovery", "gen", "--data-dir", dir + "2", "--mix", "open=2"},
		{"recovery", "gen", "--data-dir", dir + "2", "--mix", "closed=1"},
		{"recovery", "measure", "--data-dir", dir, "--runs", "0"},
	} {
		if res := r.Run(args...); res.Code == 0 {
			t.Errorf("macpbench %s: exit 0\n%s", strings.Join(args, " "), res.Out)
		}
	}
}
