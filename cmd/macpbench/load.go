package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/clikit"
)

// load runs the load generator (internal/bench/loadgen). Send failures are
// counted, never fatal: the exit status is 0 unless the command line is
// wrong or the connection cannot be set up.
func load(c *clikit.CLI, args []string) error {
	sessions := c.FS.Int("sessions", 100, "number of sessions (0 with --duration: as many as fit)")
	messages := c.FS.Int("messages", 20, "messages per session after the SessionStart")
	concurrency := c.FS.Int("concurrency", 16, "sessions driven at once")
	senders := c.FS.Int("senders", 1, "concurrent senders per session (participants p1..pN)")
	mode := c.FS.String("mode", "decision", "mode: decision, proposal, multi_round or a mode id")
	modeVersion := c.FS.String("mode-version", "", "mode version to bind (default: the runtime's)")
	commit := c.FS.Bool("commit", false, "end each session with a Commitment (decision only)")
	ttl := c.FS.Duration("ttl", 10*time.Minute, "session time to live")
	duration := c.FS.Duration("duration", 0, "stop starting Sends after this long (0: when every session is done)")
	ackedLog := c.FS.String("acked-log", "", "write \"session_id<TAB>message_id<TAB>stream<TAB>type\" per acknowledged envelope to FILE")
	jsonOut := c.FS.Bool("json", false, "also print every figure as one JSON line")
	transport := c.FS.String("transport", "macp", "macp, or echo to drive cmd/echo-bench with the same client path")
	conns := c.FS.Int("conns", 1, "gRPC connections to spread sessions over")
	initiator := c.FS.String("initiator", loadgen.DefaultInitiator, "dev identity that starts and commits sessions")
	pad := c.FS.Int("pad", 0, "extra payload bytes per mode message")
	giveUp := c.FS.Duration("give-up", 2*time.Second, "end the run when Sends fail and none was answered for this long (negative: never)")
	stream := c.FS.Bool("stream", false, "drive each session over one pipelined StreamSession call: up to --window envelopes in flight, each acknowledged by its durable echo on the stream (decision or proposal, one sender)")
	window := c.FS.Int("window", loadgen.DefaultWindow, "with --stream: envelopes in flight per stream")
	gcPercent := c.FS.Int("gc-percent", 400, "the load generator's own Go GC percent; GOGC, when set, wins")
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	// The generator shares the machine with the server it measures: its
	// own collector (a fifth of its CPU at the Go default, as every Send
	// allocates a few KiB) should not compete with the server for the
	// CPUs. The same setting drives every transport, echo included.
	if os.Getenv("GOGC") == "" && *gcPercent > 0 {
		debug.SetGCPercent(*gcPercent)
	}
	if c.Set("duration") && !c.Set("sessions") {
		*sessions = 0
	}
	switch {
	case *sessions < 0 || *messages < 0 || *pad < 0:
		return clikit.Usagef("--sessions, --messages and --pad must not be negative")
	case *sessions == 0 && *duration <= 0:
		return clikit.Usagef("--sessions 0 needs a --duration")
	case *concurrency < 1 || *senders < 1 || *conns < 1:
		return clikit.Usagef("--concurrency, --senders and --conns must be at least 1")
	case *window < 1:
		return clikit.Usagef("--window must be at least 1")
	case *stream && (*senders != 1 || *transport != string(loadgen.TransportMACP)):
		return clikit.Usagef("--stream drives a MACP runtime (--transport macp) with one sender per session")
	case *ttl <= 0:
		return clikit.Usagef("--ttl must be positive")
	case *transport != string(loadgen.TransportMACP) && *transport != string(loadgen.TransportEcho):
		return clikit.Usagef("--transport is macp or echo, not %q", *transport)
	}
	modeID, ok := loadgen.ResolveMode(*mode)
	if !ok {
		return clikit.Usagef("no message pattern for mode %q (known: %s)", *mode, strings.Join(loadgen.Modes(), ", "))
	}
	if *stream && modeID != loadgen.ModeDecision && modeID != loadgen.ModeProposal {
		return clikit.Usagef("--stream drives decision or proposal sessions (one sender), not %s", modeID)
	}
	if *commit && modeID != loadgen.ModeDecision {
		return clikit.Usagef("--commit is only supported with the decision mode")
	}
	// Each call carries its sender's identity, not the connection's.
	c.Anonymous = true
	probe, err := c.Dial() // surface flag mistakes before the run
	if err != nil {
		return err
	}
	probe.Close()
	cfg := loadgen.Config{
		Addr:        c.Conn.Addr,
		Conns:       *conns,
		Transport:   loadgen.Transport(*transport),
		Mode:        modeID,
		ModeVersion: *modeVersion,
		Sessions:    *sessions, Messages: *messages, Concurrency: *concurrency, SendersPerSession: *senders,
		Commit: *commit, TTL: *ttl, Duration: *duration, CallTimeout: c.Conn.Timeout,
		Initiator: *initiator, Pad: *pad, GiveUpAfter: *giveUp, Stream: *stream, Window: *window,
		Dial: func(context.Context) (macpv1.MACPRuntimeServiceClient, io.Closer, error) {
			cl, err := c.Dial()
			if err != nil {
				return nil, nil, err
			}
			return cl.RPC(), cl, nil
		},
	}
	var logFile *os.File
	if *ackedLog != "" {
		f, err := os.OpenFile(*ackedLog, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return clikit.Usagef("--acked-log: %v", err)
		}
		logFile = f
		cfg.AckedLog = f
	}
	res, err := loadgen.Run(c.Ctx, cfg)
	if logFile != nil {
		if cerr := logFile.Close(); cerr != nil && err == nil && res != nil && res.AckedLogError == "" {
			res.AckedLogError = cerr.Error()
		}
	}
	if err != nil {
		return err
	}
	printLoad(c.Stdout, c.Conn.Addr, res)
	if *jsonOut {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "%s\n", b)
	}
	if res.AckedLogError != "" {
		fmt.Fprintf(c.Stderr, "macpbench load: acked log: %s\n", res.AckedLogError)
	}
	return nil
}

func printLoad(w io.Writer, addr string, r *loadgen.Result) {
	planned := fmt.Sprint(r.SessionsPlanned)
	if r.SessionsPlanned == 0 {
		planned = "unbounded"
	}
	via := string(r.Transport)
	if r.Stream {
		via = fmt.Sprintf("pipelined StreamSession (window %d)", r.Window)
	}
	fmt.Fprintf(w, "load: %s %s via %s at %s\n", r.Mode, r.ModeVersion, via, addr)
	fmt.Fprintf(w, "sessions: %s planned, %d started, %d failed to start, %d abandoned, %d committed; %d messages each, concurrency %d, %d sender(s) per session\n",
		planned, r.SessionsStarted, r.SessionsFailed, r.SessionsAbandoned, r.SessionsCommitted, r.Messages, r.Concurrency, r.Senders)
	fmt.Fprintf(w, "sends: %d: %d acked (%d duplicate), %d rejected, %d errors\n", r.Sends, r.Acked, r.Duplicates, r.Rejected, r.Errors)
	if r.Unmatched > 0 {
		fmt.Fprintf(w, "unmatched echoes: %d (envelopes echoed that none of the streams had in flight)\n", r.Unmatched)
	}
	fmt.Fprintf(w, "throughput: %.1f acked/s over %.3fs\n", r.Throughput, r.ElapsedSec)
	l := r.Latency
	fmt.Fprintf(w, "latency ms (%d answered sends): mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n",
		l.Count, l.MeanMs, l.P50Ms, l.P90Ms, l.P99Ms, l.P999Ms, l.MaxMs)
	counts := func(label string, m map[string]int64, first string) {
		if len(m) == 0 {
			return
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		fmt.Fprintf(w, "%s: %s (first: %s)\n", label, strings.Join(parts, ", "), first)
	}
	counts("rejected", r.RejectedByCode, r.FirstRejection)
	counts("errors", r.ErrorsByCode, r.FirstError)
	if r.GaveUp {
		fmt.Fprintln(w, "stopped early: Sends were failing and none was answered within --give-up")
	}
}
