// Command macpbench holds macpd's benchmark and load tools, kept apart
// from macpctl (the MACP client): load drives a runtime (or the gRPC
// echo ceiling) and reports throughput and latency percentiles; fanout
// measures the server's CPU per envelope delivered to passive subscribers;
// check-acked proves a load run's acknowledged envelopes are in the
// history; recovery writes, measures and replays recovery benchmark data.
// docs/benchmarks.md describes each benchmark and how to reproduce it.
// Exit status: 0 ok, 1 the runtime rejected the request (or could not be
// reached) or a check failed, 2 usage error.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/macpd/macpd/internal/clikit"
)

var commands = []clikit.Command{
	{Name: "load", Args: "--sessions S --messages M --concurrency C [--senders N] [--stream --window W] [--acked-log FILE] [--json] [flags]",
		Summary: "drive sessions (Decision by default) and report throughput and latency percentiles",
		Run:     load},
	{Name: "fanout", Args: "--subscribers N --messages M --senders S [--conns C] [--pid PID] [--json]",
		Summary: "one busy session, N passive StreamSession subscribers: verify every delivery and report the server's CPU per delivered envelope",
		Run:     fanout},
	{Name: "check-acked", Args: "FILE [--idle D] [--show N]",
		Summary: "prove every (session_id, message_id) of a \"load --acked-log\" file is in its session's history once, in ack order",
		Run:     checkAcked},
	{Name: "recovery", Args: "gen|measure|replay --data-dir DIR [flags]  (\"recovery ACTION -h\" lists an action's flags)",
		Summary: "recovery benchmark (internal/bench/benchrec): gen writes a data directory of Decision sessions through the store; " +
			"measure times macpd's start on it (to serving) and reads its memory; replay replays it offline in-process",
		Run: benchRecovery},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes macpbench with args (without the program name) and returns
// the exit status. env looks up environment variables.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	p := clikit.Program{Name: "macpbench", Commands: commands,
		Intro: "macpbench holds macpd's benchmark and load tools (docs/benchmarks.md).",
		Outro: "Exit status: 0 ok, 1 rejected by the runtime, unreachable or a failed check, 2 usage error.\n"}
	return p.Run(ctx, args, env, stdout, stderr)
}
