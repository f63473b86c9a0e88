package main

import (
	"fmt"

	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

func init() {
	commands = append(commands, cmd(
		"verify", "[--data-dir DIR]",
		"check a durable store offline (stop macpd first): every session's hash chain and a full replay; "+
			"one line per session, then \"N sessions verified, N failed\"",
		(*cli).verify,
	))
}

// verifyFailed makes macpctl exit 1 after printing its summary.
type verifyFailed struct{ n int }

func (e verifyFailed) Error() string { return fmt.Sprintf("%d session(s) failed verification", e.n) }

// verify opens the data directory read-only and checks every session
// (internal/replay/verify): one line per session,
//
//	OK   <session id> <STATUS> <records> records sha256:<final session hash>
//	FAIL <session id>: <why>
//
// then "N sessions verified, N failed". Replay uses this build's modes plus
// the extension modes registered durably in the store.
func (c *cli) verify(args []string) error {
	dir, err := c.dataDirArg(args) // repair.go
	if err != nil {
		return err
	}
	st, err := pebblestore.Open(dir, pebblestore.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("%w (is macpd still running on it? stop it first)", err)
	}
	defer st.Close()
	modes, err := verify.StoredModes(c.Ctx, st, builtin.Modes())
	if err != nil {
		return err
	}
	ok, failed, err := verify.Verify(c.Ctx, st, modes, session.DefaultLimits(), func(r verify.SessionResult) {
		if r.OK() {
			fmt.Fprintf(c.Stdout, "OK   %s %s %d records %s\n", r.SessionID, r.Status, r.Records, verify.HashString(r.FinalHash))
			return
		}
		fmt.Fprintf(c.Stdout, "FAIL %s: %v\n", r.SessionID, r.Err)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "%d sessions verified, %d failed\n", ok, failed)
	if failed > 0 {
		return verifyFailed{failed}
	}
	return nil
}
