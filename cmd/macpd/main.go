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
	"github.com/macpd/macpd/internal/version"
)

// stdout receives --version (a variable for tests).
var stdout io.Writer = os.Stdout

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
	showVersion := fs.Bool("version", false, "print the version (module version and VCS revision) and exit")
	cfg.RegisterFlags(fs)
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("macpd"))
		return nil
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

// envOnly are the settings without a flag: inline secrets, which would
// show in the process list as flags.
var envOnly = [][2]string{
	{"MACP_AUTH_TOKENS_JSON", "static bearer tokens as inline JSON (the file form is --auth-tokens-file)"},
	{"MACP_AUTH_JWKS_JSON", "JWT verification keys as an inline JWKS document (the URL form is --auth-jwks-url)"},
	{"MACP_NATS_USER", "NATS user name, with MACP_NATS_PASSWORD (--store=nats)"},
	{"MACP_NATS_PASSWORD", "NATS password (the file forms are --nats-creds-file and --nats-nkey-file)"},
	{"MACP_NATS_TOKEN", "NATS authentication token"},
}

func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `usage: macpd [flags]

macpd is the MACP runtime. Every setting is a MACP_* environment variable
(named after each flag below) overridden by its flag.

flags:
`)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nsettings only in the environment:")
	for _, e := range envOnly {
		fmt.Fprintf(w, "  %s\n    \t%s\n", e[0], e[1])
	}
	fmt.Fprintln(w, "\nGOGC and GOMEMLIMIT, when set, override --gc-percent and --memory-limit.")
}
