package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
)

// --version prints the module version and, for a binary built in a git
// checkout, the VCS revision (runtime/debug.ReadBuildInfo).
func TestVersion(t *testing.T) {
	var out, stderr bytes.Buffer
	stdout = &out
	t.Cleanup(func() { stdout = os.Stdout })
	if err := run([]string{"--version"}, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "macpd ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("--version: %q", out.String())
	}

	// A real build inside the checkout carries the revision.
	if testing.Short() {
		t.Skip("builds macpd with -buildvcs=true: make test-all")
	}
	// Go stamps VCS information only when the repository root has a .git
	// directory: a git worktree (.git is a file) gets none. CI runs in a
	// clone, where this must hold.
	if fi, err := os.Stat("../../.git"); err != nil || !fi.IsDir() {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI without a .git directory: %v", err)
		}
		t.Skip("not a git clone (a worktree or an export): go build stamps no revision here")
	}
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "macpd")
	if out, err := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "revision "+strings.TrimSpace(string(rev))) {
		t.Fatalf("%s --version = %q, want revision %s", bin, got, rev)
	}
}
