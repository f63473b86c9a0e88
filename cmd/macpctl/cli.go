package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/wire"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/protobuf/proto"
)

// commands are macpctl's subcommands; other files' init functions add
// theirs.
var commands []clikit.Command

// cli is one invocation: the shared plumbing (internal/clikit) and
// macpctl's printing.
type cli struct{ *clikit.CLI }

// cmd adapts a method of cli to a clikit command.
func cmd(name, args, summary string, run func(c *cli, args []string) error) clikit.Command {
	return clikit.Command{Name: name, Args: args, Summary: summary, Run: func(c *clikit.CLI, args []string) error { return run(&cli{c}, args) }}
}

func init() {
	commands = append([]clikit.Command{
		cmd("init", "", "negotiate the protocol version (Initialize) and print the runtime's answer", (*cli).initialize),
		cmd("start", "[flags]", "start a session (SessionStart); prints the session id, then the ack (a refusal prints nothing on stdout)", (*cli).start),
		cmd("send", "--session ID --type TYPE [--payload-json JSON | --payload-b64 B64] [flags]", "send one envelope and print its ack", (*cli).send),
		cmd("get", "SESSION_ID", "print a session's metadata", (*cli).get),
		cmd("list", "[--page-size N [--page-token TOKEN]]", "list the sessions the caller may see (all at once, or one page and its next_page_token)", (*cli).list),
		cmd("cancel", "SESSION_ID [--reason TEXT]", "cancel an OPEN or SUSPENDED session (initiator only) and print the ack; its session_state is the state reached: CANCELLED under profile 2026-09, EXPIRED under 2026-04", (*cli).cancel),
		cmd("watch", "sessions|signals [--count N]", "print one JSON line per lifecycle event or signal until interrupted", (*cli).watch),
		cmd("modes", "", "list the runtime's modes", (*cli).modes),
		cmd("manifest", "[AGENT_ID]", "print the runtime's (or an agent's) manifest", (*cli).manifest),
	}, commands...) // other files' init functions may have registered commands already
}

// run executes macpctl with args (without the program name) and returns
// the exit status. env looks up environment variables.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	p := clikit.Program{Name: "macpctl", Commands: commands,
		Intro: "macpctl is a command-line client for MACP runtimes such as macpd.",
		Outro: `Output is canonical JSON (proto field names, every field present), one object
per line. Exit status: 0 ok, 1 rejected by the runtime (the MACP code is printed
to stderr as "error: CODE: message"), 2 usage error. The benchmark and load
tools are in macpbench.
`}
	return p.Run(ctx, args, env, stdout, stderr)
}

func (c *cli) print(m proto.Message) error {
	b, err := canonical(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.Stdout, "%s\n", b)
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
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	return c.Call(func(ctx context.Context, cl *sdk.Client) error {
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
	mode := c.FS.String("mode", sdk.DecisionMode, "mode of the session")
	participants := c.FS.String("participants", "", "comma-separated declared participants")
	ttl := c.FS.Duration("ttl", 60*time.Second, "session time to live")
	intent := c.FS.String("intent", "", "what the session is for")
	sid := c.FS.String("session", "", "session id (default: a new UUID v4)")
	modeVersion := c.FS.String("mode-version", "", "mode version to bind (default: the runtime's version of --mode)")
	configVersion := c.FS.String("config-version", sdk.DefaultConfigurationVersion, "configuration_version to bind")
	policyVersion := c.FS.String("policy-version", "", "policy_version to bind (default: policy.default)")
	contextID := c.FS.String("context-id", "", "opaque context reference")
	profile := c.FS.String("profile", "", "refuse to start unless the runtime binds new sessions to this profile: 2026-04, or latest (2026-09); the runtime's MACP_PROFILE decides, the client cannot choose")
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	if *ttl <= 0 {
		return clikit.Usagef("--ttl must be positive")
	}
	wantProfile, ok := sdk.ResolveProfile(*profile)
	if !ok {
		return clikit.Usagef("--profile %q: want 2026-04, 2026-09 or latest", *profile)
	}
	if *sid == "" {
		*sid = sdk.NewSessionID()
	}
	return c.Call(func(ctx context.Context, cl *sdk.Client) error {
		if *profile != "" {
			got, err := cl.Profile(ctx)
			if err != nil {
				return err
			}
			if got != wantProfile {
				return fmt.Errorf("the runtime binds new sessions to profile %s, not %s (its MACP_PROFILE); no session was started", got, wantProfile)
			}
		}
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
				return clikit.Usagef("the runtime does not list mode %q; pass --mode-version to try anyway", *mode)
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
					fmt.Fprintf(c.Stderr, "%s\n", b)
				}
			}
			return err
		}
		fmt.Fprintln(c.Stdout, *sid)
		return c.printAck(ack, nil)
	})
}

var ambientTypes = map[string]bool{sdk.TypeSignal: true}

func (c *cli) send(args []string) error {
	sid := c.FS.String("session", "", "session id (empty for Signal)")
	typ := c.FS.String("type", "", "message type, e.g. Proposal, Vote, Commitment, Signal")
	payloadJSON := c.FS.String("payload-json", "", "payload as JSON with proto field names; encoded as the payload message of --type in --mode")
	payloadB64 := c.FS.String("payload-b64", "", "raw payload bytes, base64")
	mode := c.FS.String("mode", "", "mode (default: the session's, from GetSession)")
	id := c.FS.String("id", "", "message id (default: a new UUID v4); resend with the same id to retry safely")
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	ambient := ambientTypes[*typ] || (*typ == sdk.TypeProgress && *sid == "")
	switch {
	case *typ == "":
		return clikit.Usagef("--type is required")
	case *payloadJSON != "" && *payloadB64 != "":
		return clikit.Usagef("--payload-json and --payload-b64 are exclusive")
	case ambient && (*sid != "" || *mode != ""):
		return clikit.Usagef("%s envelopes have no --session or --mode", *typ)
	case !ambient && *sid == "":
		return clikit.Usagef("--session is required for %s", *typ)
	case *typ == sdk.TypeSessionStart && *mode == "":
		return clikit.Usagef("--mode is required for SessionStart (or use macpctl start)")
	}
	var raw []byte
	if *payloadB64 != "" {
		var err error
		if raw, err = base64.StdEncoding.DecodeString(*payloadB64); err != nil {
			return clikit.Usagef("--payload-b64: %v", err)
		}
	}
	if core := wire.IsCore(*typ); *payloadJSON != "" && (core || *mode != "") {
		// Check the JSON before any round trip when its schema is known.
		if _, err := encodePayload(*mode, *typ, *payloadJSON); err != nil {
			return clikit.UsageError{Msg: err.Error()}
		}
	}
	return c.Call(func(ctx context.Context, cl *sdk.Client) error {
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
				return clikit.UsageError{Msg: err.Error()}
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
	pos, err := c.Parse(args, 1)
	if err != nil {
		return err
	}
	return c.Call(func(ctx context.Context, cl *sdk.Client) error {
		md, err := cl.GetSession(ctx, pos[0])
		if err != nil {
			return err
		}
		return c.print(md)
	})
}

func (c *cli) list(args []string) error {
	pageSize := c.FS.Int("page-size", 0, "list at most N sessions and print the next page's token as next_page_token (0: every session, one page)")
	pageToken := c.FS.String("page-token", "", "continue after the page whose next_page_token this is")
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	if *pageSize < 0 || *pageSize > math.MaxInt32 {
		return clikit.Usagef("--page-size must be between 0 and %d", math.MaxInt32)
	}
	return c.Call(func(ctx context.Context, cl *sdk.Client) error {
		ss, next, err := cl.ListSessionsPage(ctx, int32(*pageSize), *pageToken)
		if err != nil {
			return err
		}
		return c.print(&macpv1.ListSessionsResponse{Sessions: ss, NextPageToken: next})
	})
}

func (c *cli) cancel(args []string) error {
	return c.control(args, "why the session is cancelled", (*sdk.Client).CancelSession)
}

func (c *cli) modes(args []string) error {
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	return c.Call(func(ctx context.Context, cl *sdk.Client) error {
		ms, err := cl.ListModes(ctx)
		if err != nil {
			return err
		}
		return c.print(&macpv1.ListModesResponse{Modes: ms})
	})
}

func (c *cli) manifest(args []string) error {
	pos, err := c.Parse(args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return clikit.Usagef("at most one AGENT_ID")
	}
	return c.Call(func(ctx context.Context, cl *sdk.Client) error {
		m, err := cl.GetManifest(ctx, strings.Join(pos, ""))
		if err != nil {
			return err
		}
		return c.print(m)
	})
}

func (c *cli) watch(args []string) error {
	count := c.FS.Int("count", 0, "stop after N events (0: until interrupted)")
	pos, err := c.Parse(args, 1)
	if err != nil {
		return err
	}
	if *count < 0 {
		return clikit.Usagef("--count must not be negative")
	}
	if pos[0] != "sessions" && pos[0] != "signals" {
		return clikit.Usagef("watch sessions or watch signals, not %q", pos[0])
	}
	cl, err := c.Dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(c.Ctx)
	defer cancel()
	n := 0
	emit := func(b []byte, err error) (bool, error) {
		if err != nil {
			return false, err
		}
		if _, err := fmt.Fprintf(c.Stdout, "%s\n", b); err != nil {
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
