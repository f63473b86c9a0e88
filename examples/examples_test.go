// Package examples_test runs every example program under examples/ against
// a real macpd (in process, on 127.0.0.1:0) and requires each to exit 0:
// each example asserts its own outcome and exits non-zero otherwise.
package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
)

func TestExamplesRun(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(e.Name(), "main.go")); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	if len(names) < 3 {
		t.Fatalf("found only %v under examples/", names)
	}
	bin := t.TempDir()
	build := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", bin+string(os.PathSeparator), "./...")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/...: %v\n%s", err, out)
	}

	cfg := config.Default()
	cfg.MemoryOnly = true
	cfg.BindAddr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, name), "-addr", a.Addr())
			out, err := cmd.CombinedOutput()
			t.Logf("%s:\n%s", name, out)
			if err != nil {
				t.Fatalf("example %s failed: %v", name, err)
			}
		})
	}
}
