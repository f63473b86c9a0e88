// Package clitest runs the command-line programs built on internal/clikit
// (macpctl, macpbench) in-process in tests, against an in-process macpd.
// It imports testing and internal/app: tests only.
package clitest

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/testutil"
	"github.com/macpd/macpd/internal/testutil/apptest"
)

// StartApp starts macpd as apptest.Start does, without rate limits (load
// runs), after applying mutate to the configuration.
func StartApp(t testing.TB, mutate ...func(*config.Config)) *app.App {
	t.Helper()
	noRates := func(c *config.Config) { c.Limits.SessionStartsPerMinute, c.Limits.MessagesPerMinute = 0, 0 }
	return apptest.Start(t, append([]func(*config.Config){noRates}, mutate...)...)
}

// Main is a program's run function: args without the program name, env
// looks up environment variables; it returns the exit status.
type Main func(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int

// Result is one run's exit status and output.
type Result struct {
	Code        int
	Out, ErrOut string
}

// Lines returns the stdout lines.
func (r Result) Lines() []string { return strings.Split(strings.TrimRight(r.Out, "\n"), "\n") }

// Run runs main with args and env (nil: empty).
func Run(ctx context.Context, main Main, env map[string]string, args ...string) Result {
	var out, errOut testutil.SyncBuffer
	code := main(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
	return Result{code, out.String(), errOut.String()}
}

// Runner runs one program in a test.
type Runner struct {
	T    testing.TB
	Name string // the program's name, for failure messages
	Main Main
	Env  map[string]string
}

// Run runs args.
func (r Runner) Run(args ...string) Result { return Run(context.Background(), r.Main, r.Env, args...) }

// Ok runs args and fails the test unless the exit status is 0.
func (r Runner) Ok(args ...string) Result {
	r.T.Helper()
	res := r.Run(args...)
	if res.Code != 0 {
		r.T.Fatalf("%s %s: exit %d\nstdout: %s\nstderr: %s", r.Name, strings.Join(args, " "), res.Code, res.Out, res.ErrOut)
	}
	return res
}
