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
	"regexp"
	"strings"
	"syscall"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/gctune"
	"github.com/macpd/macpd/internal/version"
)

// stdout receives --version (a variable for tests).
var stdout io.Writer = os.Stdout

// serveContext is the context macpd serves in: canceled by SIGINT or
// SIGTERM (a variable for tests, which cancel it themselves).
var serveContext = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

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
	// MACP_* variables macpd does not read are most likely misspelled
	// settings: an error for --check-config and beside any other error, a
	// warning otherwise (the environment may hold variables of other
	// programs of the same family).
	unknown := config.CheckEnv(os.Environ())
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w%s", err, unknownLines(unknown))
	}
	if *check {
		if len(unknown) > 0 {
			return fmt.Errorf("invalid configuration:%s", unknownLines(unknown))
		}
		fmt.Fprintln(stderr, "configuration ok")
		return nil
	}
	log := app.NewLogger(cfg, stderr)
	for _, u := range unknown {
		log.Warn("unknown setting in the environment: "+u.String(), "name", u.Name, "did_you_mean", u.Suggest)
	}
	gctune.Apply(cfg.GCPercent, cfg.MemoryLimit, cfg.GCMinHeap, gctune.OS, log)
	a, err := app.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := serveContext()
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

// unknownLines formats the unknown MACP_* variables for an error, one per
// line, "" when there are none.
func unknownLines(unknown []config.UnknownEnv) string {
	var b strings.Builder
	for _, u := range unknown {
		b.WriteString("\n" + u.String())
	}
	return b.String()
}

// envOnlyHelp describes the settings without a flag: inline secrets, which
// would show in the process list as flags. Which settings have no flag is
// derived (envOnly); a test checks each has a line here.
var envOnlyHelp = map[string]string{
	"MACP_AUTH_TOKENS_JSON":  "static bearer tokens as inline JSON (the file form is --auth-tokens-file)",
	"MACP_AUTH_JWKS_JSON":    "JWT verification keys as an inline JWKS document (the URL form is --auth-jwks-url)",
	"MACP_AUTH_HS256_SECRET": "HS256 JWT secret, with MACP_AUTH_ALLOW_HS256=1 (the file form is --auth-hs256-secret-file)",
	"MACP_NATS_USER":         "NATS user name, with MACP_NATS_PASSWORD (--store=nats)",
	"MACP_NATS_PASSWORD":     "NATS password (the file forms are --nats-creds-file and --nats-nkey-file)",
	"MACP_NATS_TOKEN":        "NATS authentication token",
}

var envName = regexp.MustCompile(`MACP_[A-Z0-9_]+`)

// envOnly returns the settings macpd reads (config.KnownEnv) that no flag
// of fs names in its usage, sorted.
func envOnly(fs *flag.FlagSet) []string {
	withFlag := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		for _, n := range envName.FindAllString(f.Usage, -1) {
			withFlag[n] = true
		}
	})
	var out []string
	for _, n := range config.KnownEnv() {
		if !withFlag[n] {
			out = append(out, n)
		}
	}
	return out
}

func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `usage: macpd [flags]

macpd is the MACP runtime. Every setting is a MACP_* environment variable
(named after each flag below) overridden by its flag. A MACP_* variable
macpd does not know is reported at start (a warning; an error for
--check-config) with the closest setting's name.

flags:
`)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nsettings only in the environment:")
	for _, n := range envOnly(fs) {
		help := envOnlyHelp[n]
		if help == "" {
			help = "(see internal/config)"
		}
		fmt.Fprintf(w, "  %s\n    \t%s\n", n, help)
	}
	fmt.Fprint(w, `
GOGC and GOMEMLIMIT, when set, override --gc-percent and --memory-limit.

listeners:
  gRPC   --addr (MACP_BIND_ADDR, default 127.0.0.1:50051): macp.v1.MACPRuntimeService
         and grpc.health.v1; macpctl connects here
  HTTP   --http-addr (MACP_HTTP_ADDR, off by default): HTTP/JSON under /macp/
         (POST /macp/envelope, POST /macp/session/start, GET /macp/sessions,
         GET /macp/session/{id}, GET /macp/session/{id}/events (SSE), GET /macp/ws
         (WebSocket, JSON-RPC), POST /macp/rpc, GET /.well-known/macp.json ...),
         and the operator console at /console/ (dev mode: /console/?agent=ID)
  admin  --admin-addr (MACP_ADMIN_ADDR, off by default): /metrics, /healthz,
         /debug/pprof/ with --admin-pprof; plaintext, bind it to loopback
The README's "HTTP and WebSocket bindings" and "Operator console" sections list
every route.
`)
}
