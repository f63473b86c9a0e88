package main

import (
	"context"
	"encoding/json"
	"os"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/sdk"
)

func init() {
	commands = append(commands, cmd(
		"policy",
		"register|list|get|unregister|watch [flags] [POLICY_ID]",
		"manage the policy registry (RFC-MACP-0012): register --id ID --mode MODE --rules JSON|--rules-file FILE, "+
			"list [--mode MODE], get ID, unregister ID, watch [--count N]",
		(*cli).policy,
	))
}

// policy runs the policy registry subcommands. Registration and removal
// need an identity with can_manage_mode_registry (every dev identity has
// it).
func (c *cli) policy(args []string) error {
	id := c.FS.String("id", "", "register: the policy id (e.g. policy.team.majority)")
	mode := c.FS.String("mode", "", `register: the target mode id, or "*" for every mode (default "*"); list: keep this mode's policies and the mode-agnostic ones`)
	description := c.FS.String("description", "", "register: a human-readable description")
	rules := c.FS.String("rules", "", "register: the rules as JSON text (default {})")
	rulesFile := c.FS.String("rules-file", "", "register: a file holding the rules JSON")
	schemaVersion := c.FS.Uint("schema-version", 1, "register: the rule schema version of the rules (1, 2 or 3; docs/policies.md)")
	count := c.FS.Int("count", 0, "watch: stop after N lists (0: until interrupted)")
	pos, err := c.Parse(args, -1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return clikit.Usagef("policy needs a subcommand: register, list, get, unregister or watch")
	}
	sub, pos := pos[0], pos[1:]
	only := func(allowed ...string) error {
		ok := map[string]bool{}
		for _, a := range allowed {
			ok[a] = true
		}
		for _, f := range []string{"id", "mode", "description", "rules", "rules-file", "schema-version", "count"} {
			if c.Set(f) && !ok[f] {
				return clikit.Usagef("policy %s does not take --%s", sub, f)
			}
		}
		return nil
	}
	oneID := func() (string, error) {
		if len(pos) != 1 {
			return "", clikit.Usagef("policy %s needs one POLICY_ID", sub)
		}
		return pos[0], nil
	}
	switch sub {
	case "register":
		if err := only("id", "mode", "description", "rules", "rules-file", "schema-version"); err != nil {
			return err
		}
		if len(pos) > 0 {
			return clikit.Usagef("policy register takes flags only (--id, --mode, --rules ...)")
		}
		if *id == "" {
			return clikit.Usagef("policy register needs --id")
		}
		text := *rules
		switch {
		case *rules != "" && *rulesFile != "":
			return clikit.Usagef("--rules and --rules-file are exclusive")
		case *rulesFile != "":
			b, err := os.ReadFile(*rulesFile)
			if err != nil {
				return clikit.Usagef("--rules-file: %v", err)
			}
			text = string(b)
		case text == "":
			text = "{}"
		}
		if !json.Valid([]byte(text)) {
			return clikit.Usagef("the rules are not valid JSON")
		}
		m := *mode
		if m == "" {
			m = "*"
		}
		d, err := sdk.NewPolicy(*id, m, *description, json.RawMessage(text))
		if err != nil {
			return err
		}
		if *schemaVersion > 1<<32-1 {
			return clikit.Usagef("--schema-version %d is out of range", *schemaVersion)
		}
		d.SchemaVersion = uint32(*schemaVersion)
		return c.Call(func(ctx context.Context, cl *sdk.Client) error {
			if err := cl.RegisterPolicy(ctx, d); err != nil {
				return err
			}
			got, err := cl.GetPolicy(ctx, *id)
			if err != nil {
				return err
			}
			return c.print(got)
		})
	case "list":
		if err := only("mode"); err != nil {
			return err
		}
		if len(pos) > 0 {
			return clikit.Usagef("policy list takes no arguments")
		}
		return c.Call(func(ctx context.Context, cl *sdk.Client) error {
			ds, err := cl.ListPolicies(ctx, *mode)
			if err != nil {
				return err
			}
			return c.print(&macpv1.ListPoliciesResponse{Descriptors: ds})
		})
	case "get", "unregister":
		if err := only(); err != nil {
			return err
		}
		pid, err := oneID()
		if err != nil {
			return err
		}
		return c.Call(func(ctx context.Context, cl *sdk.Client) error {
			if sub == "get" {
				d, err := cl.GetPolicy(ctx, pid)
				if err != nil {
					return err
				}
				return c.print(d)
			}
			if err := cl.UnregisterPolicy(ctx, pid); err != nil {
				return err
			}
			return c.print(&macpv1.UnregisterPolicyResponse{Ok: true})
		})
	case "watch":
		if err := only("count"); err != nil {
			return err
		}
		if len(pos) > 0 || *count < 0 {
			return clikit.Usagef("policy watch takes no arguments and a --count >= 0")
		}
		cl, err := c.Dial()
		if err != nil {
			return err
		}
		defer cl.Close()
		n := 0
		for ds, err := range cl.WatchPolicies(c.Ctx) {
			if err != nil {
				return err
			}
			if err := c.print(&macpv1.WatchPoliciesResponse{Descriptors: ds}); err != nil {
				return err
			}
			if n++; *count > 0 && n >= *count {
				return nil
			}
		}
		return nil // interrupted
	}
	return clikit.Usagef("unknown policy subcommand %q: register, list, get, unregister or watch", sub)
}
