package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/wire"
	"github.com/macpd/macpd/sdk"
)

func init() {
	commands = append(commands, cmd("tail", "SESSION_ID [--after N] [--count N]",
		"follow a session: one JSON line per accepted envelope with its sequence number, resuming by itself after a disconnect; ends when the session does", (*cli).tail))
}

// tailLine is one line of macpctl tail: the envelope's sequence number
// (the resume cursor of every transport, docs/resume.md) and the
// envelope in canonical JSON.
type tailLine struct {
	Seq      uint64                 `json:"seq"`
	Envelope wire.CanonicalEnvelope `json:"envelope"`
}

// tail follows a session over StreamSession's passive subscription (the
// Go SDK's Subscribe): it resubscribes from the last printed sequence
// number after a transport failure, so nothing is missed or printed twice.
func (c *cli) tail(args []string) error {
	after := c.FS.Uint64("after", 0, "print the envelopes after this sequence number (0: from the SessionStart)")
	count := c.FS.Int("count", 0, "stop after N envelopes (0: until the session ends or interrupted)")
	pos, err := c.Parse(args, 1)
	if err != nil {
		return err
	}
	if *count < 0 {
		return clikit.Usagef("--count must not be negative")
	}
	cl, err := c.Dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	sub := cl.Subscribe(c.Ctx, pos[0], *after, sdk.WithReconnectBackoff(200*time.Millisecond, 5*time.Second),
		sdk.WithReconnectHook(func(attempt int, err error) {
			fmt.Fprintf(c.Stderr, "tail: reconnecting (attempt %d): %v\n", attempt, err)
		}))
	defer sub.Close()
	for n := 0; *count == 0 || n < *count; n++ {
		ev, err := sub.Next()
		if errors.Is(err, io.EOF) {
			return nil // the session ended and everything was printed
		}
		if err != nil {
			if c.Ctx.Err() != nil {
				return nil // interrupted
			}
			if errors.Is(err, sdk.ErrSuperseded) {
				// Final, not retried: this identity resumed the session on
				// another connection (docs/resume.md).
				return fmt.Errorf("tail: stopped after sequence %d: %w", sub.Last(), err)
			}
			return err
		}
		b, err := json.Marshal(tailLine{Seq: ev.Seq, Envelope: wire.Canonical(ev.Envelope)})
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(c.Stdout, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}
