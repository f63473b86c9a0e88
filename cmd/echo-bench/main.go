// Command echo-bench is the transport ceiling for MACP Send benchmarks: a
// plain gRPC server whose macp.v1.MACPRuntimeService Send answers every
// envelope at once with an ok Ack (no authentication, validation or
// storage; every other RPC is unimplemented). Drive it with
// "macpbench load --transport echo --insecure --addr ADDR".
//
// With --durable DIR it is instead the floor for durable servers
// (loadgen.DurableEchoService): each Send's envelope is appended to a log
// file in DIR and answered once a group fdatasync covering it returned,
// served with macpd's transport settings (server.TransportOptions); with
// --sync-each too, each Send is written and synced on its own, one at a
// time: the one-sync-per-message server group commit is compared with.
//
// It prints "echo-bench listening on ADDR" once serving (use --addr
// 127.0.0.1:0 for a free port) and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/server"
	"google.golang.org/grpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "echo-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("echo-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	durable := fs.String("durable", "", "directory for the log of a durable echo (group fdatasync before each answer); empty: plain echo")
	syncEach := fs.Bool("sync-each", false, "with --durable: one write and fdatasync per Send, one at a time (no group commit)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (to compare with macpd's /debug/pprof/profile)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *syncEach && *durable == "" {
		return fmt.Errorf("--sync-each needs --durable")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	var g *grpc.Server
	if *durable != "" {
		svc, err := loadgen.NewDurableEchoService(*durable, *syncEach)
		if err != nil {
			lis.Close()
			return err
		}
		defer svc.Close()
		g = loadgen.NewDurableEchoServer(svc, server.TransportOptions()...)
	} else {
		g = loadgen.NewEchoServer()
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	fmt.Fprintf(stdout, "echo-bench listening on %s\n", lis.Addr())
	select {
	case <-ctx.Done():
		g.Stop()
		return nil
	case err := <-served:
		return err
	}
}
