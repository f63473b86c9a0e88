package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/benchrec"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/clikit"
)

// fanout runs the fan-out measurement (loadgen.RunFanout) against a
// running macpd and reports the server's CPU time per delivered envelope,
// read from /proc/PID/stat (Linux, benchrec.ProcCPU) for --pid, or for the
// process that listens on --addr's port when --pid is not given.
func fanout(c *clikit.CLI, args []string) error {
	subs := c.FS.Int("subscribers", 1000, "passive subscribers of the busy session")
	conns := c.FS.Int("conns", 20, "connections the subscribers are spread over (the senders use one more)")
	senders := c.FS.Int("senders", 8, "concurrent unary Send callers")
	messages := c.FS.Int("messages", 1000, "measured envelopes")
	warmup := c.FS.Int("warmup", 100, "untimed envelopes delivered first")
	pad := c.FS.Int("pad", 0, "extra payload bytes per envelope")
	pid := c.FS.Int("pid", 0, "the server's process id, for its CPU time (default: the process listening on --addr's port; -1: do not measure)")
	timeout := c.FS.Duration("deliver-timeout", 5*time.Minute, "fail when the subscribers did not get everything within this long")
	jsonOut := c.FS.Bool("json", false, "also print the result as one JSON line")
	gcPercent := c.FS.Int("gc-percent", 400, "the load generator's own Go GC percent; GOGC, when set, wins")
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" && *gcPercent > 0 {
		debug.SetGCPercent(*gcPercent)
	}
	switch {
	case *subs < 1 || *conns < 1 || *senders < 1 || *messages < 1:
		return clikit.Usagef("--subscribers, --conns, --senders and --messages must be at least 1")
	case *warmup < 0 || *pad < 0:
		return clikit.Usagef("--warmup and --pad must not be negative")
	}
	c.Anonymous = true
	probe, err := c.Dial()
	if err != nil {
		return err
	}
	probe.Close()
	cfg := loadgen.FanoutConfig{
		Addr: c.Conn.Addr, Subscribers: *subs, Conns: *conns, Senders: *senders, Messages: *messages, Warmup: *warmup,
		Pad: *pad, CallTimeout: c.Conn.Timeout, Timeout: *timeout,
		Dial: func(context.Context) (macpv1.MACPRuntimeServiceClient, io.Closer, error) {
			cl, err := c.Dial()
			if err != nil {
				return nil, nil, err
			}
			return cl.RPC(), cl, nil
		},
	}
	if *pid == 0 {
		p, err := listenerPID(c.Conn.Addr)
		if err != nil {
			return fmt.Errorf("finding the server's process (give --pid, or -1 not to measure it): %w", err)
		}
		*pid = p
	}
	if *pid > 0 {
		p := *pid
		cfg.ServerCPU = func() (time.Duration, error) {
			sec, err := benchrec.ProcCPU(p)
			return time.Duration(sec * float64(time.Second)), err
		}
	}
	res, err := loadgen.RunFanout(c.Ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "fan-out: session %s, %d subscribers over %d connections, %d senders, %d envelopes\n",
		res.SessionID, res.Subscribers, res.Conns, res.Senders, res.Messages)
	fmt.Fprintf(c.Stdout, "delivered: %d envelopes, every subscriber every envelope once in the same order (verified); accepted in %.3fs, delivered in %.3fs (%.0f deliveries/s)\n",
		res.Delivered, res.AcceptedSec, res.DeliveredSec, res.DeliveriesPerSec)
	if cfg.ServerCPU != nil {
		fmt.Fprintf(c.Stdout, "server CPU (pid %d): %.2fs, %.2f µs per delivered envelope\n", *pid, res.ServerCPUSec, res.ServerCPUPerDelivery)
	}
	if *jsonOut {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "%s\n", b)
	}
	return nil
}

// listenerPID finds the process listening on addr's TCP port (Linux:
// /proc/net/tcp{,6} for the socket, then the /proc/*/fd links to it).
func listenerPID(addr string) (int, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st ... inode (field 9)
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			if p, err := strconv.ParseUint(fs[1][i+1:], 16, 16); err == nil && p == port {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no process listens on TCP port %d", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if link, err := os.Readlink(fd); err == nil && inodes[link] {
			return strconv.Atoi(strings.Split(fd, "/")[2])
		}
	}
	return 0, fmt.Errorf("the socket listening on port %d belongs to no process this user can see", port)
}
