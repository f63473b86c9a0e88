// Command macpctl is the MACP command-line client: start sessions, send
// envelopes, inspect and watch a runtime. Run "macpctl help" for the
// subcommands. Exit status: 0 ok, 1 the runtime rejected the request (or
// could not be reached), 2 usage error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
