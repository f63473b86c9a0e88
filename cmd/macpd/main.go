// Command macpd is the MACP runtime. Configuration: defaults, then MACP_*
// environment variables, then flags (see internal/config and the README).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/gctune"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "macpd:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	cfg := config.Default()
	if err := cfg.FromEnv(nil); err != nil {
		return err
	}
	fs := flag.NewFlagSet("macpd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check-config", false, "validate the configuration and exit")
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		// Most likely "--insecure false": boolean flags take no separate
		// value, so the flag was set and its intended value left over.
		return fmt.Errorf("unexpected argument %q (boolean flags are written --flag=false)", fs.Arg(0))
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	if *check {
		fmt.Fprintln(stderr, "configuration ok")
		return nil
	}
	log := app.NewLogger(cfg, stderr)
	gctune.Apply(cfg.GCPercent, cfg.MemoryLimit, cfg.GCMinHeap, gctune.OS, log)
	a, err := app.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		// Restore default signal handling: a second signal ends macpd at
		// once instead of waiting out the shutdown grace.
		stop()
		log.Info("shutting down", "reason", "signal", "grace", cfg.ShutdownGrace.String())
	case err := <-a.Served():
		if err != nil {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	return a.Shutdown(sctx)
}
