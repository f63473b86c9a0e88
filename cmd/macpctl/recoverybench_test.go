package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// bench-recovery gen writes a directory that verify accepts and replay
// reads; bad command lines are usage errors.
func TestBenchRecoveryGenReplay(t *testing.T) {
	r := runner{t, map[string]string{}}
	dir := filepath.Join(t.TempDir(), "data")
	res := r.ok("bench-recovery", "gen", "--data-dir", dir, "--sessions", "40", "--mix", "open=0.5,resolved=0.5", "--json")
	if !strings.Contains(res.out, "40 sessions (open 20, resolved 20), 400 envelopes, 400 records") {
		t.Fatalf("gen output:\n%s", res.out)
	}
	if res := r.ok("verify", "--data-dir", dir); !strings.HasSuffix(res.out, "40 sessions verified, 0 failed\n") {
		t.Fatalf("verify output:\n%s", res.out)
	}
	res = r.ok("bench-recovery", "replay", "--data-dir", dir, "--runs", "1")
	if !strings.Contains(res.out, "replay_envelopes_per_s") || !strings.Contains(res.out, "      40        400") {
		t.Fatalf("replay output:\n%s", res.out)
	}
	for _, args := range [][]string{
		{"bench-recovery"},
		{"bench-recovery", "frobnicate", "--data-dir", dir},
		{"bench-recovery", "gen"},
		{"bench-recovery", "gen", "--data-dir", dir + "2", "--mix", "open=2"},
		{"bench-recovery", "gen", "--data-dir", dir + "2", "--mix", "closed=1"},
		{"bench-recovery", "measure", "--data-dir", dir, "--runs", "0"},
	} {
		if res := r.run(args...); res.code == 0 {
			t.Errorf("macpctl %s: exit 0\n%s", strings.Join(args, " "), res.out)
		}
	}
}
