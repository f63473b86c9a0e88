package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/macpd/macpd/internal/conformance"
)

func init() {
	commands = append(commands, command{
		"conformance", "DIR|FILE...",
		"run conformance fixtures (spec format) against a running runtime; one line per fixture, then \"N passed, N failed\"",
		(*cli).conformance,
	})
}

// conformanceFailed makes macpctl exit 1 after printing its summary.
type conformanceFailed struct{ n int }

func (e conformanceFailed) Error() string { return fmt.Sprintf("%d fixture(s) failed", e.n) }

// conformance runs every fixture as a black box over gRPC: a fresh session
// per fixture, started by the fixture's initiator, each message sent as its
// sender with a dev bearer identity (checklist CONF-10..15).
func (c *cli) conformance(args []string) error {
	paths, err := c.parse(args, -1)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return usagef("name at least one fixture directory or file")
	}
	fixtures, err := conformance.LoadDirs(paths...)
	if err != nil {
		return usagef("%v", err)
	}
	// The connection carries no identity of its own; each call carries
	// its fixture sender's.
	c.anonymous = true
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	target := conformance.GRPC{Client: cl.RPC()}
	passed, failed := 0, 0
	for _, f := range fixtures {
		ctx, cancel := context.WithTimeout(c.ctx, c.conn.timeout+fixtureWait(f))
		res := conformance.Run(ctx, f, target, uuid.NewString())
		cancel()
		if res.Passed() {
			passed++
			fmt.Fprintf(c.stdout, "PASS %s\n", f.Name)
			continue
		}
		failed++
		fmt.Fprintf(c.stdout, "FAIL %s\n", f.Name)
		for _, msg := range res.Failures {
			fmt.Fprintf(c.stdout, "     %s\n", msg)
		}
	}
	fmt.Fprintf(c.stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return conformanceFailed{failed}
	}
	return nil
}

func fixtureWait(f *conformance.Fixture) time.Duration {
	var d time.Duration
	for _, m := range f.Messages {
		d += time.Duration(m.WaitMs) * time.Millisecond
	}
	return d
}
