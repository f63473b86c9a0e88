package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
	"github.com/macpd/macpd/sdk"
)

func init() {
	commands = append(commands, cmd(
		"snapshot", "SESSION_ID [--payload] [--profile strict] [--decay-runs N] [--data-dir DIR [--as IDENTITY | --observer]]",
		"print a session's session_state_window_v1 report (or with --payload its snapshot payload): "+
			"from a running runtime (GetSession + a passive StreamSession), or offline from --data-dir",
		(*cli).snapshot,
	))
}

// snapshotFlags are the key flags snapshot and replay share.
type snapshotFlags struct {
	eventSource, serverID *string
}

func (c *cli) registerSnapshotKeyFlags() snapshotFlags {
	def := config.DefaultSnapshots()
	return snapshotFlags{
		eventSource: c.FS.String("event-source", cmp.Or(c.Env("MACP_EVENT_SOURCE"), def.EventSource),
			"event_source of the session key; must equal the server's for equal ids (env MACP_EVENT_SOURCE)"),
		serverID: c.FS.String("server-id", cmp.Or(c.Env("MACP_SERVER_ID"), def.ServerID),
			"server_id of the session key; must equal the server's for equal ids (env MACP_SERVER_ID)"),
	}
}

// openDataDir opens a data directory read-only (macpd must be stopped)
// and returns the store and the modes replay needs (this build's plus the
// extension modes registered in the store).
func (c *cli) openDataDir(dir string) (store.Store, session.Modes, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, nil, clikit.Usagef("no data directory at %s", dir)
	}
	st, err := pebblestore.Open(dir, pebblestore.Options{ReadOnly: true})
	if err != nil {
		return nil, nil, fmt.Errorf("%w (is macpd still running on it? stop it first)", err)
	}
	modes, err := verify.StoredModes(c.Ctx, st, builtin.Modes())
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, modes, nil
}

// snapshot prints the report (default) or the payload of one session.
// Online it reads only what a client may read: the session's metadata
// (GetSession) and its accepted envelopes (passive StreamSession from
// sequence 0, half-closed so the runtime ends the stream after the
// durable history); offline it replays the stored records through the
// core. Both give the same id (docs/snapshots.md).
func (c *cli) snapshot(args []string) error {
	keys := c.registerSnapshotKeyFlags()
	payload := c.FS.Bool("payload", false, "print the snapshot payload (RFC 8785 JSON) instead of the report")
	profile := c.FS.String("profile", "default", "privacy profile: default (payload hashes) or strict (none)")
	decay := c.FS.Int("decay-runs", 0, "a cross_session_decay window over this many subsequent sessions (0: session window)")
	dataDir := c.FS.String("data-dir", "", "read this data directory offline instead of a running runtime (stop macpd first)")
	as := c.FS.String("as", "", "offline --decay-runs: the identity the window is for (its candidates are the sessions it may observe, as online)")
	observer := c.FS.Bool("observer", false, "offline --decay-runs: compute the window for an observer identity (every session is a candidate)")
	pos, err := c.Parse(args, 1)
	if err != nil {
		return err
	}
	prof, err := snapshot.ParseProfile(*profile)
	if err != nil {
		return clikit.Usagef("%v", err)
	}
	if *decay < 0 {
		return clikit.Usagef("--decay-runs must not be negative")
	}
	if *dataDir != "" && *decay > 0 && (*as == "") == !*observer {
		return clikit.Usagef("offline --decay-runs needs exactly one of --as IDENTITY and --observer: the window lists the sessions that identity may observe")
	}
	o := snapshot.Options{EventSource: *keys.eventSource, ServerID: *keys.serverID, Profile: prof, DecayRuns: *decay}
	var in snapshot.Input
	if *dataDir != "" {
		in, o.Subsequent, err = c.offlineInput(*dataDir, pos[0], *decay, snapshot.Viewer{Sender: *as, Observer: *observer})
	} else {
		err = c.Call(func(ctx context.Context, cl *sdk.Client) error {
			var err error
			in, o.Subsequent, err = snapshotio.FromRuntime(ctx, cl.RPC(), pos[0], *decay)
			return err
		})
	}
	if err != nil {
		return err
	}
	p, err := snapshot.Build(in, o)
	if err != nil {
		return err
	}
	sealed, err := snapshot.Seal(p)
	if err != nil {
		return err
	}
	out := sealed.Bytes
	if !*payload {
		if out, err = snapshot.NewReport(sealed).Bytes(); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(c.Stdout, "%s\n", out)
	return err
}

func (c *cli) offlineInput(dir, sessionID string, decay int, v snapshot.Viewer) (snapshot.Input, []string, error) {
	st, modes, err := c.openDataDir(dir)
	if err != nil {
		return snapshot.Input{}, nil, err
	}
	defer st.Close()
	src := snapshotio.StoreSource{Store: st}
	recs, err := src.Records(c.Ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return snapshot.Input{}, nil, fmt.Errorf("SESSION_NOT_FOUND: session %s is not in %s", sessionID, dir)
	}
	if err != nil {
		return snapshot.Input{}, nil, err
	}
	in, _, err := snapshot.InputFromRecords(recs, modes, session.DefaultLimits())
	if err != nil {
		return snapshot.Input{}, nil, fmt.Errorf("replaying %s: %w", sessionID, err)
	}
	var sub []string
	if decay > 0 {
		starts, err := src.Starts(c.Ctx)
		if err != nil {
			return snapshot.Input{}, nil, err
		}
		sub = snapshot.Subsequent(starts, sessionID, decay, v)
	}
	return in, sub, nil
}
