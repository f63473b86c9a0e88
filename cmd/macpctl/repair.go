package main

import (
	"fmt"
	"os"

	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

func init() {
	commands = append(commands, cmd(
		"repair", "[--data-dir DIR]",
		"make a durable store whose write-ahead log is damaged start again (stop macpd first): the damaged log "+
			"is moved to DIR.repair-<time>/, the sessions it may have held are quarantined, every other session is kept",
		(*cli).repair,
	))
}

// repair runs pebblestore.Repair on the data directory (docs/resume.md
// "Damaged data") and prints what it did:
//
//	store opens: nothing to repair
//
// or the moved files, then one "QUARANTINED <session id>" line per
// quarantined session and a summary.
func (c *cli) repair(args []string) error {
	dir, err := c.dataDirArg(args)
	if err != nil {
		return err
	}
	rep, err := pebblestore.Repair(dir, nil)
	if err != nil {
		return fmt.Errorf("%w (is macpd still running on it? stop it first)", err)
	}
	if rep.Opened {
		fmt.Fprintln(c.Stdout, "store opens: nothing to repair")
		return nil
	}
	for _, p := range rep.Moved {
		fmt.Fprintf(c.Stdout, "MOVED %s\n", p)
	}
	for _, id := range rep.Quarantined {
		fmt.Fprintf(c.Stdout, "QUARANTINED %s\n", id)
	}
	fmt.Fprintf(c.Stdout, "%d damaged log file(s) moved to %s, %d session(s) quarantined; start macpd again\n",
		len(rep.Moved), rep.MovedTo, len(rep.Quarantined))
	return nil
}

// dataDirArg parses --data-dir (default MACP_DATA_DIR, then the default
// data directory) as the only flag of args and checks that it exists.
func (c *cli) dataDirArg(args []string) (string, error) {
	def := c.Env("MACP_DATA_DIR")
	if def == "" {
		def = config.Default().DataDir
	}
	dir := c.FS.String("data-dir", def, "the data directory (MACP_DATA_DIR)")
	if _, err := c.Parse(args, 0); err != nil {
		return "", err
	}
	if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
		return "", clikit.Usagef("no data directory at %s (set --data-dir or MACP_DATA_DIR)", *dir)
	}
	return *dir, nil
}
