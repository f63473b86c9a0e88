package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/wire"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Exit statuses.
const (
	exitOK       = 0
	exitRejected = 1 // the runtime rejected the request, or was unreachable
	exitUsage    = 2
)

// usageError is a mistake on the command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// command is one subcommand.
type command struct {
	name, args, summary string
	run                 func(c *cli, args []string) error
}

var commands []command

func init() {
	commands = append([]command{
		{"init", "", "negotiate the protocol version (Initialize) and print the runtime's answer", (*cli).initialize},
		{"start", "[flags]", "start a session (SessionStart); prints the session id, then the ack (a refusal prints nothing on stdout)", (*cli).start},
		{"send", "--session ID --type TYPE [--payload-json JSON | --payload-b64 B64] [flags]", "send one envelope and print its ack", (*cli).send},
		{"get", "SESSION_ID", "print a session's metadata", (*cli).get},
		{"list", "", "list the sessions the caller may see", (*cli).list},
		{"cancel", "SESSION_ID [--reason TEXT]", "cancel a session (initiator only) and print the ack", (*cli).cancel},
		{"watch", "sessions|signals [--count N]", "print one JSON line per lifecycle event or signal until interrupted", (*cli).watch},
		{"modes", "", "list the runtime's modes", (*cli).modes},
		{"manifest", "[AGENT_ID]", "print the runtime's (or an agent's) manifest", (*cli).manifest},
	}, commands...) // other files' init functions may have registered commands already
}

// cli is one invocation.
type cli struct {
	ctx            context.Context
	env            func(string) string
	stdout, stderr io.Writer
	name           string // the subcommand
	fs             *flag.FlagSet
	conn           connFlags
	// anonymous dials without an identity (each call brings its own).
	anonymous bool
}

// connFlags are the flags every subcommand takes.
type connFlags struct {
	addr, agent, token, tlsCA string
	tlsCert, tlsKey, tlsName  string
	insecure                  bool
	timeout                   time.Duration
}

// run executes macpctl with args (without the program name) and returns
// the exit status. env looks up environment variables.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	pre, name, rest, err := splitGlobal(args)
	if err != nil {
		fmt.Fprintf(stderr, "macpctl: %v\n", err)
		return exitUsage
	}
	if name == "" {
		printUsage(stderr)
		return exitUsage
	}
	if isVersionArg(name) {
		printVersion(stdout)
		return exitOK
	}
	rest = append(pre, rest...) // connection flags may precede the command
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && name == "help" {
			return run(ctx, []string{rest[0], "-h"}, env, stdout, stdout)
		}
		printUsage(stdout)
		return exitOK
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		fmt.Fprintf(stderr, "macpctl: unknown command %q\n\n", name)
		printUsage(stderr)
		return exitUsage
	}
	cmd := commands[i]
	c := &cli{ctx: ctx, env: env, stdout: stdout, stderr: stderr, name: name}
	c.fs = flag.NewFlagSet("macpctl "+name, flag.ContinueOnError)
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "usage: macpctl %s %s\n\n%s\n\nflags:\n", name, cmd.args, cmd.summary)
		c.fs.PrintDefaults()
	}
	c.registerConnFlags()
	err = cmd.run(c, rest)
	var ue usageError
	var se *sdk.Error
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "macpctl %s: %s\n", name, ue.msg)
		fmt.Fprintf(stderr, "usage: macpctl %s %s (see macpctl help %s)\n", name, cmd.args, name)
		return exitUsage
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
	return exitRejected
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

func printUsage(w io.Writer) {
	fmt.Fprint(w, `macpctl is a command-line client for MACP runtimes such as macpd.

usage: macpctl [connection flags] COMMAND [flags] [args]
       macpctl --version

commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `  help      this list; "macpctl help COMMAND" shows a command's flags

Every command takes the connection flags, before or after its name:
  --addr HOST:PORT   runtime address (default 127.0.0.1:50051, env MACP_ADDR)
  --agent ID         dev bearer identity (env MACP_AGENT)
  --token TOKEN      bearer token (env MACP_TOKEN)
  --insecure         plaintext connection (implied by env MACP_ALLOW_INSECURE=1)
  --tls-ca FILE      trust this CA instead of the system roots
  --tls-cert FILE, --tls-key FILE
                     client certificate and key (mTLS identities)
  --tls-server-name NAME
                     expect this name in the runtime's certificate
  --timeout D        per-call timeout (default 10s)

Output is canonical JSON (proto field names, every field present), one object
per line. Exit status: 0 ok, 1 rejected by the runtime (the MACP code is printed
to stderr as "error: CODE: message"), 2 usage error.
`)
}

func truthy(v string) bool {
	b, err := strconv.ParseBool(v)
	if err != nil {
		v = strings.ToLower(v)
		return v == "yes" || v == "on"
	}
	return b
}

func (c *cli) registerConnFlags() {
	addr := c.env("MACP_ADDR")
	if addr == "" {
		addr = "127.0.0.1:50051"
	}
	c.fs.StringVar(&c.conn.addr, "addr", addr, "runtime address (env MACP_ADDR)")
	c.fs.StringVar(&c.conn.agent, "agent", "", "dev bearer identity: the token is the agent id (env MACP_AGENT)")
	c.fs.StringVar(&c.conn.token, "token", "", "bearer token (env MACP_TOKEN)")
	c.fs.BoolVar(&c.conn.insecure, "insecure", truthy(c.env("MACP_ALLOW_INSECURE")), "plaintext connection (env MACP_ALLOW_INSECURE=1)")
	c.fs.StringVar(&c.conn.tlsCA, "tls-ca", "", "PEM file of the CA to trust instead of the system roots")
	c.fs.DurationVar(&c.conn.timeout, "timeout", 10*time.Second, "per-call timeout")
	c.fs.StringVar(&c.conn.tlsCert, "tls-cert", "", "PEM client certificate (mTLS identity); needs --tls-key")
	c.fs.StringVar(&c.conn.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	c.fs.StringVar(&c.conn.tlsName, "tls-server-name", "", "name to verify in the runtime's certificate (default: the host of --addr)")
}

// parse parses flags and returns the positional arguments; flags may come
// before, between or after them. want is the number of positional
// arguments required (-1: any).
func (c *cli) parse(args []string, want int) ([]string, error) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if want >= 0 && len(pos) != want {
		return nil, usagef("want %d argument(s), got %d", want, len(pos))
	}
	return pos, nil
}

func (c *cli) set(name string) bool {
	found := false
	c.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// dial connects with the connection flags, after they are parsed.
func (c *cli) dial() (*sdk.Client, error) {
	f := c.conn
	var bearer string
	switch {
	case c.set("agent") && c.set("token"):
		return nil, usagef("--agent and --token are both set; pick one")
	case c.set("token"):
		bearer = f.token
	case c.set("agent"):
		bearer = f.agent
	case c.env("MACP_TOKEN") != "" && c.env("MACP_AGENT") != "":
		return nil, usagef("MACP_TOKEN and MACP_AGENT are both set; pick one (or pass --token or --agent)")
	default:
		bearer = cmp.Or(c.env("MACP_TOKEN"), c.env("MACP_AGENT"))
	}
	if c.anonymous {
		bearer = ""
	}
	var opts []sdk.Option
	if bearer != "" {
		opts = append(opts, sdk.WithBearer(bearer))
	}
	insecure := f.insecure
	cert, err := c.clientCertificate()
	if err != nil {
		return nil, err
	}
	if f.tlsCA != "" || cert != nil || f.tlsName != "" {
		if c.set("insecure") && f.insecure {
			return nil, usagef("--insecure contradicts the TLS flags (--tls-ca, --tls-cert, --tls-server-name)")
		}
		insecure = false
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.tlsName}
		if f.tlsCA != "" {
			pem, err := os.ReadFile(f.tlsCA)
			if err != nil {
				return nil, usagef("--tls-ca: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, usagef("--tls-ca: %s holds no PEM certificate", f.tlsCA)
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
	return sdk.Dial(c.ctx, f.addr, opts...)
}

// call runs fn with a client and the per-call timeout.
func (c *cli) call(fn func(ctx context.Context, cl *sdk.Client) error) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(c.ctx, c.conn.timeout)
	defer cancel()
	return fn(ctx, cl)
}

func (c *cli) print(m proto.Message) error {
	b, err := canonical(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

// printAck prints the ack, even a rejected one, and returns err.
func (c *cli) printAck(ack *macpv1.Ack, err error) error {
	if ack != nil {
		if perr := c.print(ack); perr != nil {
			return perr
		}
	}
	return err
}

func (c *cli) initialize(args []string) error {
	if _, err := c.parse(args, 0); err != nil {
		return err
	}
	return c.call(func(ctx context.Context, cl *sdk.Client) error {
		resp, err := cl.Initialize(ctx)
		if err != nil {
			return err
		}
		return c.print(resp)
	})
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *cli) start(args []string) error {
	mode := c.fs.String("mode", sdk.DecisionMode, "mode of the session")
	participants := c.fs.String("participants", "", "comma-separated declared participants")
	ttl := c.fs.Duration("ttl", 60*time.Second, "session time to live")
	intent := c.fs.String("intent", "", "what the session is for")
	sid := c.fs.String("session", "", "session id (default: a new UUID v4)")
	modeVersion := c.fs.String("mode-version", "", "mode version to bind (default: the runtime's version of --mode)")
	configVersion := c.fs.String("config-version", sdk.DefaultConfigurationVersion, "configuration_version to bind")
	policyVersion := c.fs.String("policy-version", "", "policy_version to bind (default: policy.default)")
	contextID := c.fs.String("context-id", "", "opaque context reference")
	if _, err := c.parse(args, 0); err != nil {
		return err
	}
	if *ttl <= 0 {
		return usagef("--ttl must be positive")
	}
	if *sid == "" {
		*sid = sdk.NewSessionID()
	}
	return c.call(func(ctx context.Context, cl *sdk.Client) error {
		if *modeVersion == "" {
			modes, err := cl.ListModes(ctx)
			if err != nil {
				return err
			}
			for _, m := range modes {
				if m.Mode == *mode {
					*modeVersion = m.ModeVersion
				}
			}
			if *modeVersion == "" {
				return usagef("the runtime does not list mode %q; pass --mode-version to try anyway", *mode)
			}
		}
		env, err := sdk.NewSessionStart(*sid, *mode, sdk.StartPayload{
			Intent: *intent, Participants: splitList(*participants), TTL: *ttl,
			ModeVersion: *modeVersion, ConfigurationVersion: *configVersion, PolicyVersion: *policyVersion, ContextID: *contextID,
		})
		if err != nil {
			return err
		}
		ack, err := cl.Send(ctx, env)
		if err != nil {
			// Refused: no session id on stdout (scripts capture the first
			// line); the rejected ack goes to stderr.
			if ack != nil {
				if b, perr := canonical(ack); perr == nil {
					fmt.Fprintf(c.stderr, "%s\n", b)
				}
			}
			return err
		}
		fmt.Fprintln(c.stdout, *sid)
		return c.printAck(ack, nil)
	})
}

var ambientTypes = map[string]bool{sdk.TypeSignal: true}

func (c *cli) send(args []string) error {
	sid := c.fs.String("session", "", "session id (empty for Signal)")
	typ := c.fs.String("type", "", "message type, e.g. Proposal, Vote, Commitment, Signal")
	payloadJSON := c.fs.String("payload-json", "", "payload as JSON with proto field names; encoded as the payload message of --type in --mode")
	payloadB64 := c.fs.String("payload-b64", "", "raw payload bytes, base64")
	mode := c.fs.String("mode", "", "mode (default: the session's, from GetSession)")
	id := c.fs.String("id", "", "message id (default: a new UUID v4); resend with the same id to retry safely")
	if _, err := c.parse(args, 0); err != nil {
		return err
	}
	ambient := ambientTypes[*typ] || (*typ == sdk.TypeProgress && *sid == "")
	switch {
	case *typ == "":
		return usagef("--type is required")
	case *payloadJSON != "" && *payloadB64 != "":
		return usagef("--payload-json and --payload-b64 are exclusive")
	case ambient && (*sid != "" || *mode != ""):
		return usagef("%s envelopes have no --session or --mode", *typ)
	case !ambient && *sid == "":
		return usagef("--session is required for %s", *typ)
	case *typ == sdk.TypeSessionStart && *mode == "":
		return usagef("--mode is required for SessionStart (or use macpctl start)")
	}
	var raw []byte
	if *payloadB64 != "" {
		var err error
		if raw, err = base64.StdEncoding.DecodeString(*payloadB64); err != nil {
			return usagef("--payload-b64: %v", err)
		}
	}
	if core := wire.IsCore(*typ); *payloadJSON != "" && (core || *mode != "") {
		// Check the JSON before any round trip when its schema is known.
		if _, err := encodePayload(*mode, *typ, *payloadJSON); err != nil {
			return usageError{err.Error()}
		}
	}
	return c.call(func(ctx context.Context, cl *sdk.Client) error {
		var md *macpv1.SessionMetadata
		if !ambient && *typ != sdk.TypeSessionStart && (*mode == "" || (*typ == sdk.TypeCommitment && *payloadJSON != "")) {
			var err error
			if md, err = cl.GetSession(ctx, *sid); err != nil {
				return err
			}
			if *mode == "" {
				*mode = md.Mode
			}
		}
		if *payloadJSON != "" {
			m, err := encodePayload(*mode, *typ, *payloadJSON)
			if err != nil {
				return usageError{err.Error()}
			}
			if cp, ok := m.(*macpv1.CommitmentPayload); ok && md != nil {
				fillCommitment(cp, md)
			}
			if raw, err = (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
				return err
			}
		}
		env := &macpv1.Envelope{
			MacpVersion: sdk.ProtocolVersion, Mode: *mode, MessageType: *typ, MessageId: *id,
			SessionId: *sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: raw,
		}
		if env.MessageId == "" {
			env.MessageId = sdk.NewMessageID()
		}
		return c.printAck(cl.Send(ctx, env))
	})
}

// fillCommitment completes a Commitment typed on the command line: a new
// commitment_id and the session's bound versions where they were left out.
func fillCommitment(cp *macpv1.CommitmentPayload, md *macpv1.SessionMetadata) {
	if cp.CommitmentId == "" {
		cp.CommitmentId = sdk.NewMessageID()
	}
	if cp.ModeVersion == "" {
		cp.ModeVersion = md.ModeVersion
	}
	if cp.ConfigurationVersion == "" {
		cp.ConfigurationVersion = md.ConfigurationVersion
	}
	if cp.PolicyVersion == "" {
		cp.PolicyVersion = md.PolicyVersion
	}
}

func (c *cli) get(args []string) error {
	pos, err := c.parse(args, 1)
	if err != nil {
		return err
	}
	return c.call(func(ctx context.Context, cl *sdk.Client) error {
		md, err := cl.GetSession(ctx, pos[0])
		if err != nil {
			return err
		}
		return c.print(md)
	})
}

func (c *cli) list(args []string) error {
	if _, err := c.parse(args, 0); err != nil {
		return err
	}
	return c.call(func(ctx context.Context, cl *sdk.Client) error {
		ss, err := cl.ListSessions(ctx)
		if err != nil {
			return err
		}
		return c.print(&macpv1.ListSessionsResponse{Sessions: ss})
	})
}

func (c *cli) cancel(args []string) error {
	reason := c.fs.String("reason", "", "why the session is cancelled")
	pos, err := c.parse(args, 1)
	if err != nil {
		return err
	}
	return c.call(func(ctx context.Context, cl *sdk.Client) error {
		return c.printAck(cl.CancelSession(ctx, pos[0], *reason))
	})
}

func (c *cli) modes(args []string) error {
	if _, err := c.parse(args, 0); err != nil {
		return err
	}
	return c.call(func(ctx context.Context, cl *sdk.Client) error {
		ms, err := cl.ListModes(ctx)
		if err != nil {
			return err
		}
		return c.print(&macpv1.ListModesResponse{Modes: ms})
	})
}

func (c *cli) manifest(args []string) error {
	pos, err := c.parse(args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("at most one AGENT_ID")
	}
	return c.call(func(ctx context.Context, cl *sdk.Client) error {
		m, err := cl.GetManifest(ctx, strings.Join(pos, ""))
		if err != nil {
			return err
		}
		return c.print(m)
	})
}

func (c *cli) watch(args []string) error {
	count := c.fs.Int("count", 0, "stop after N events (0: until interrupted)")
	pos, err := c.parse(args, 1)
	if err != nil {
		return err
	}
	if *count < 0 {
		return usagef("--count must not be negative")
	}
	if pos[0] != "sessions" && pos[0] != "signals" {
		return usagef("watch sessions or watch signals, not %q", pos[0])
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	n := 0
	emit := func(b []byte, err error) (bool, error) {
		if err != nil {
			return false, err
		}
		if _, err := fmt.Fprintf(c.stdout, "%s\n", b); err != nil {
			return false, err
		}
		n++
		return *count == 0 || n < *count, nil
	}
	if pos[0] == "sessions" {
		for ev, err := range cl.WatchSessions(ctx) {
			if err != nil {
				return err
			}
			if more, err := emit(canonical(ev)); !more {
				return err
			}
		}
	} else {
		for env, err := range cl.WatchSignals(ctx) {
			if err != nil {
				return err
			}
			if more, err := emit(canonicalEnvelope(env)); !more {
				return err
			}
		}
	}
	return nil // interrupted
}
