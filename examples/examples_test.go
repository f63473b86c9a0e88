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

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/sdk"
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

// TestPolyglotCoordinator runs the polyglot example's Go coordinator
// (examples/polyglot/coordinator) against an in-process macpd on profile
// latest, with two Go agents standing in for the Python and TypeScript
// voters (examples/polyglot/run.sh runs the real ones when SDK checkouts
// are there): it must exit 0 when both approve, and non-zero when one
// rejects.
func TestPolyglotCoordinator(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", bin+string(os.PathSeparator), "./polyglot/coordinator")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/polyglot/coordinator: %v\n%s", err, out)
	}
	cfg := config.Default()
	cfg.MemoryOnly = true
	cfg.BindAddr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	cfg.Profile = "latest"
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })

	for _, tc := range []struct {
		name   string
		votes  map[string]string
		wantOK bool
	}{
		{"both approve", map[string]string{"py-voter": "APPROVE", "ts-voter": "APPROVE"}, true},
		{"one rejects", map[string]string{"py-voter": "APPROVE", "ts-voter": "REJECT"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sid := sdk.NewSessionID()
			errs := make(chan error, len(tc.votes))
			for id, vote := range tc.votes {
				go func() { errs <- standInVoter(ctx, a.Addr(), sid, id, vote) }()
			}
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "coordinator"), "-addr", a.Addr(), "-session", sid, "-timeout", "30s")
			out, err := cmd.CombinedOutput()
			t.Logf("coordinator:\n%s", out)
			if ok := err == nil; ok != tc.wantOK {
				t.Fatalf("coordinator exit error %v, want success %v", err, tc.wantOK)
			}
			for range tc.votes {
				if err := <-errs; err != nil {
					t.Errorf("stand-in voter: %v", err)
				}
			}
		})
	}
}

// standInVoter joins session sid as id once it exists, casts vote on every
// proposal and returns when the session ends.
func standInVoter(ctx context.Context, addr, sid, id, vote string) error {
	c, err := sdk.Dial(ctx, addr, sdk.WithInsecure(), sdk.WithBearer(id), sdk.WithRetry(5))
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		if _, err := c.Decision(sid).Metadata(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	ag := sdk.NewAgent(c, sid, sdk.WithSelf(id))
	ag.Handle(sdk.TypeProposal, func(ctx context.Context, m *sdk.Message) error {
		var p decisionv1.ProposalPayload
		if err := m.Decode(&p); err != nil {
			return err
		}
		_, err := m.Reply(ctx, sdk.TypeVote, &decisionv1.VotePayload{ProposalId: p.ProposalId, Vote: vote, Reason: id})
		return err
	})
	return ag.Run(ctx)
}
