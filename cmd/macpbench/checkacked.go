package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/sdk"
)

// checkFailed makes macpbench exit 1 after printing its summary.
type checkFailed struct{ r *loadgen.Report }

func (e checkFailed) Error() string { return "check failed: " + e.r.Summary() }

// checkAcked reads each logged session's history with a StreamSession
// passive subscription from sequence 0 and checks the log against it
// (loadgen.CheckHistory): each acked message_id exactly once, and the acked
// order of each sender stream a subsequence of the history order. Each
// session must also exist (GetSession). The identity must be able to read
// the sessions: by default the load generator's initiator.
func checkAcked(c *clikit.CLI, args []string) error {
	idle := c.FS.Duration("idle", 500*time.Millisecond, "end a history read when no envelope arrived for this long")
	parallel := c.FS.Int("parallel", 8, "sessions read at once")
	show := c.FS.Int("show", 20, "print at most N problems (0: all)")
	pos, err := c.Parse(args, 1)
	if err != nil {
		return err
	}
	if *idle <= 0 || *parallel < 1 || *show < 0 {
		return clikit.Usagef("--idle must be positive, --parallel at least 1, --show not negative")
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return clikit.Usagef("%v", err)
	}
	acked, err := loadgen.ReadAckedLog(f)
	f.Close()
	if err != nil {
		return clikit.Usagef("%s: %v", pos[0], err)
	}
	if !c.Set("agent") && !c.Set("token") && c.Env("MACP_AGENT") == "" && c.Env("MACP_TOKEN") == "" {
		_ = c.FS.Set("agent", loadgen.DefaultInitiator)
	}
	cl, err := c.Dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	checker := loadgen.Checker{
		History:  loadgen.StreamHistory{Client: cl.RPC(), Idle: *idle, FirstWait: c.Conn.Timeout},
		Parallel: *parallel,
		Exists: func(ctx context.Context, sid string) error {
			ctx, cancel := context.WithTimeout(ctx, c.Conn.Timeout)
			defer cancel()
			_, err := cl.GetSession(ctx, sid)
			if errors.Is(err, &sdk.Error{Code: sdk.CodeSessionNotFound}) {
				return fmt.Errorf("%w: %v", loadgen.ErrNoSession, err)
			}
			return err
		},
	}
	rep := checker.Check(c.Ctx, acked)
	for i, p := range rep.Problems {
		if *show > 0 && i == *show {
			fmt.Fprintf(c.Stdout, "... and %d more problem(s)\n", len(rep.Problems)-i)
			break
		}
		fmt.Fprintln(c.Stdout, p)
	}
	fmt.Fprintf(c.Stdout, "%d session(s) in the log\n%s\n", rep.Sessions, rep.Summary())
	if !rep.OK() {
		return checkFailed{rep}
	}
	return nil
}
