package clikit

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/macpd/macpd/internal/version"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc/status"
)

// Exit statuses.
const (
	ExitOK       = 0
	ExitRejected = 1 // the runtime rejected the request, or was unreachable
	ExitUsage    = 2
)

// UsageError is a mistake on the command line (exit 2).
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error { return UsageError{fmt.Sprintf(format, args...)} }

// Command is one subcommand.
type Command struct {
	Name, Args, Summary string
	Run                 func(c *CLI, args []string) error
}

// Program is a command-line program made of subcommands.
type Program struct {
	Name string // "macpctl"
	// Intro is the first paragraph of the usage text.
	Intro    string
	Commands []Command
	// Outro ends the usage text, after the connection flags.
	Outro string
}

// CLI is one invocation of a subcommand.
type CLI struct {
	Ctx            context.Context
	Env            func(string) string
	Stdout, Stderr io.Writer
	Program        string // the program's name
	Name           string // the subcommand
	FS             *flag.FlagSet
	Conn           ConnFlags
	// Anonymous dials without an identity (each call brings its own).
	Anonymous bool
}

// ConnFlags are the flags every subcommand takes.
type ConnFlags struct {
	Addr, Agent, Token, TLSCA string
	TLSCert, TLSKey, TLSName  string
	Insecure                  bool
	Timeout                   time.Duration
}

// Run executes the program with args (without the program name) and
// returns the exit status. env looks up environment variables.
func (p *Program) Run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	pre, name, rest, err := SplitGlobal(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
		return ExitUsage
	}
	if name == "" {
		p.printUsage(stderr)
		return ExitUsage
	}
	if name == "version" || name == "--version" || name == "-version" {
		fmt.Fprintln(stdout, version.Line(p.Name))
		fmt.Fprintf(stdout, "sdk %s, MACP protocol %s\n", sdk.Version, sdk.ProtocolVersion)
		return ExitOK
	}
	rest = append(pre, rest...) // connection flags may precede the command
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && name == "help" {
			return p.Run(ctx, []string{rest[0], "-h"}, env, stdout, stdout)
		}
		p.printUsage(stdout)
		return ExitOK
	}
	i := slices.IndexFunc(p.Commands, func(c Command) bool { return c.Name == name })
	if i < 0 {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", p.Name, name)
		p.printUsage(stderr)
		return ExitUsage
	}
	cmd := p.Commands[i]
	c := &CLI{Ctx: ctx, Env: env, Stdout: stdout, Stderr: stderr, Program: p.Name, Name: name}
	c.FS = flag.NewFlagSet(p.Name+" "+name, flag.ContinueOnError)
	c.FS.SetOutput(stderr)
	c.FS.Usage = func() {
		fmt.Fprintf(c.FS.Output(), "usage: %s %s %s\n\n%s\n\nflags:\n", p.Name, name, cmd.Args, cmd.Summary)
		c.FS.PrintDefaults()
	}
	c.registerConnFlags()
	err = cmd.Run(c, rest)
	var ue UsageError
	var se *sdk.Error
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s %s: %s\n", p.Name, name, ue.Msg)
		fmt.Fprintf(stderr, "usage: %s %s %s (see %s help %s)\n", p.Name, name, cmd.Args, p.Name, name)
		return ExitUsage
	case errors.As(err, &se):
		fmt.Fprintf(stderr, "error: %s: %s\n", se.Code, se.Message)
	default:
		if st, ok := status.FromError(err); ok {
			fmt.Fprintf(stderr, "error: %s: %s\n", grpcCodeName(st.Code().String()), st.Message())
		} else {
			fmt.Fprintf(stderr, "error: %v\n", err)
		}
	}
	if h := c.hint(err); h != "" {
		fmt.Fprintf(stderr, "hint: %s\n", h)
	}
	return ExitRejected
}

// grpcCodeName turns a gRPC code's Go name ("DeadlineExceeded") into its
// canonical form ("DEADLINE_EXCEEDED").
func grpcCodeName(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

func (p *Program) printUsage(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nusage: %s [connection flags] COMMAND [flags] [args]\n       %s --version\n\ncommands:\n", p.Intro, p.Name, p.Name)
	for _, c := range p.Commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, `  help      this list; "%s help COMMAND" shows a command's flags

Every command takes the connection flags, before or after its name:
  --addr HOST:PORT   runtime's gRPC address (default 127.0.0.1:50051, env MACP_ADDR;
                     a HOST without a port means port 50051)
  --agent ID         dev bearer identity (env MACP_AGENT)
  --token TOKEN      bearer token (env MACP_TOKEN)
  --insecure         plaintext connection (implied by env MACP_ALLOW_INSECURE=1)
  --tls-ca FILE      trust this CA instead of the system roots
  --tls-cert FILE, --tls-key FILE
                     client certificate and key (mTLS identities)
  --tls-server-name NAME
                     expect this name in the runtime's certificate
  --timeout D        per-call timeout (default 10s)

`, p.Name)
	fmt.Fprint(w, p.Outro)
}

// Truthy reads a boolean environment value ("1", "true", "yes", "on").
func Truthy(v string) bool {
	b, err := strconv.ParseBool(v)
	if err != nil {
		v = strings.ToLower(v)
		return v == "yes" || v == "on"
	}
	return b
}

func (c *CLI) registerConnFlags() {
	addr := c.Env("MACP_ADDR")
	if addr == "" {
		addr = "127.0.0.1:50051"
	}
	c.FS.StringVar(&c.Conn.Addr, "addr", addr, "runtime's gRPC address; without a port, port 50051 (env MACP_ADDR)")
	c.FS.StringVar(&c.Conn.Agent, "agent", "", "dev bearer identity: the token is the agent id (env MACP_AGENT)")
	c.FS.StringVar(&c.Conn.Token, "token", "", "bearer token (env MACP_TOKEN)")
	c.FS.BoolVar(&c.Conn.Insecure, "insecure", Truthy(c.Env("MACP_ALLOW_INSECURE")), "plaintext connection (env MACP_ALLOW_INSECURE=1)")
	c.FS.StringVar(&c.Conn.TLSCA, "tls-ca", "", "PEM file of the CA to trust instead of the system roots")
	c.FS.DurationVar(&c.Conn.Timeout, "timeout", 10*time.Second, "per-call timeout")
	c.FS.StringVar(&c.Conn.TLSCert, "tls-cert", "", "PEM client certificate (mTLS identity); needs --tls-key")
	c.FS.StringVar(&c.Conn.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	c.FS.StringVar(&c.Conn.TLSName, "tls-server-name", "", "name to verify in the runtime's certificate (default: the host of --addr)")
}

// Parse parses flags and returns the positional arguments; flags may come
// before, between or after them. want is the number of positional
// arguments required (-1: any).
func (c *CLI) Parse(args []string, want int) ([]string, error) {
	var pos []string
	for {
		if err := c.FS.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, UsageError{err.Error()}
		}
		args = c.FS.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if want >= 0 && len(pos) != want {
		return nil, Usagef("want %d argument(s), got %d", want, len(pos))
	}
	return pos, nil
}

// Set reports whether the flag was given on the command line.
func (c *CLI) Set(name string) bool {
	found := false
	c.FS.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// Dial connects with the connection flags, after they are parsed.
func (c *CLI) Dial() (*sdk.Client, error) {
	f := c.Conn
	var bearer string
	switch {
	case c.Set("agent") && c.Set("token"):
		return nil, Usagef("--agent and --token are both set; pick one")
	case c.Set("token"):
		bearer = f.Token
	case c.Set("agent"):
		bearer = f.Agent
	case c.Env("MACP_TOKEN") != "" && c.Env("MACP_AGENT") != "":
		return nil, Usagef("MACP_TOKEN and MACP_AGENT are both set; pick one (or pass --token or --agent)")
	default:
		bearer = cmp.Or(c.Env("MACP_TOKEN"), c.Env("MACP_AGENT"))
	}
	if c.Anonymous {
		bearer = ""
	}
	var opts []sdk.Option
	if bearer != "" {
		opts = append(opts, sdk.WithBearer(bearer))
	}
	insecure := f.Insecure
	cert, err := c.clientCertificate()
	if err != nil {
		return nil, err
	}
	if f.TLSCA != "" || cert != nil || f.TLSName != "" {
		if c.Set("insecure") && f.Insecure {
			return nil, Usagef("--insecure contradicts the TLS flags (--tls-ca, --tls-cert, --tls-server-name)")
		}
		insecure = false
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.TLSName}
		if f.TLSCA != "" {
			pem, err := os.ReadFile(f.TLSCA)
			if err != nil {
				return nil, Usagef("--tls-ca: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, Usagef("--tls-ca: %s holds no PEM certificate", f.TLSCA)
			}
			cfg.RootCAs = pool
		}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		opts = append(opts, sdk.WithTLSConfig(cfg))
	}
	if insecure {
		opts = append(opts, sdk.WithInsecure())
	}
	c.Conn.Addr = DialAddr(f.Addr) // hints name the address dialed
	return sdk.Dial(c.Ctx, c.Conn.Addr, opts...)
}

// Call runs fn with a client and the per-call timeout.
func (c *CLI) Call(fn func(ctx context.Context, cl *sdk.Client) error) error {
	cl, err := c.Dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(c.Ctx, c.Conn.Timeout)
	defer cancel()
	return fn(ctx, cl)
}
