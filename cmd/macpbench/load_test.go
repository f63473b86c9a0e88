package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/clikit/clitest"
)

func TestLoad(t *testing.T) {
	a := clitest.StartApp(t)
	r := newRunner(t, nil)
	log := filepath.Join(t.TempDir(), "acked.log")
	res := r.Ok("load", "--addr", a.Addr(), "--insecure", "--sessions", "4", "--messages", "6", "--concurrency", "2",
		"--commit", "--acked-log", log, "--json")
	lines := res.Lines()
	var got loadgen.Result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line is not the JSON result: %v\n%s", err, res.Out)
	}
	if got.Acked != 4*8 || got.Errors != 0 || got.Rejected != 0 || got.SessionsCommitted != 4 || got.Latency.P99Ms <= 0 {
		t.Fatalf("%s", res.Out)
	}
	for _, want := range []string{"throughput:", "latency ms (32 answered sends)", "sends: 32: 32 acked (0 duplicate), 0 rejected, 0 errors"} {
		if !strings.Contains(res.Out, want) {
			t.Errorf("summary lacks %q:\n%s", want, res.Out)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 32 {
		t.Fatalf("acked log: %d lines, want 32", n)
	}

	// One session, concurrent senders.
	res = r.Ok("load", "--addr", a.Addr(), "--insecure", "--sessions", "1", "--messages", "40", "--senders", "4", "--json")
	lines = res.Lines()
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil || got.Acked != 41 || got.Senders != 4 {
		t.Fatalf("%v\n%s", err, res.Out)
	}
}

// --stream: pipelined StreamSession calls, each envelope acknowledged by
// its echo; the acked log checks against the history.
func TestLoadStream(t *testing.T) {
	a := clitest.StartApp(t)
	r := newRunner(t, nil)
	log := filepath.Join(t.TempDir(), "acked.log")
	res := r.Ok("load", "--addr", a.Addr(), "--insecure", "--stream", "--window", "8", "--sessions", "3", "--messages", "20",
		"--concurrency", "2", "--commit", "--acked-log", log, "--json")
	lines := res.Lines()
	var got loadgen.Result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line is not the JSON result: %v\n%s", err, res.Out)
	}
	if !got.Stream || got.Window != 8 || got.Acked != 3*22 || got.Sends != 3*22 || got.Errors != 0 || got.Rejected != 0 || got.Latency.Count != 3*22 {
		t.Fatalf("%s", res.Out)
	}
	if !strings.Contains(res.Out, "via pipelined StreamSession (window 8)") {
		t.Fatalf("%s", res.Out)
	}
	res = r.Run("check-acked", "--addr", a.Addr(), "--insecure", "--idle", "200ms", log)
	if res.Code != 0 || !strings.Contains(res.Out, "66 acked checked, 0 missing, 0 duplicated, 0 out of order") {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Out, res.ErrOut)
	}
}

func TestLoadEcho(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := loadgen.NewEchoServer()
	go g.Serve(lis)
	defer g.Stop()
	res := newRunner(t, nil).Ok("load", "--addr", lis.Addr().String(), "--insecure", "--transport", "echo", "--sessions", "3", "--messages", "5")
	if !strings.Contains(res.Out, "18 acked") || !strings.Contains(res.Out, "via echo") {
		t.Fatalf("%s", res.Out)
	}
}

// Send failures are counted, not fatal: nothing listens at the address.
func TestLoadUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	res := newRunner(t, nil).Ok("load", "--addr", addr, "--insecure", "--sessions", "3", "--messages", "2", "--give-up", "100ms", "--timeout", "1s", "--mode-version", "1.0.0")
	if !strings.Contains(res.Out, "errors: UNAVAILABLE") {
		t.Fatalf("%s", res.Out)
	}
}

func TestLoadUsage(t *testing.T) {
	r := newRunner(t, nil)
	for _, args := range [][]string{
		{"--concurrency", "0"},
		{"--senders", "0"},
		{"--sessions", "0"},
		{"--transport", "carrier-pigeon"},
		{"--mode", "macp.mode.task.v1"},
		{"--mode", "proposal", "--commit"},
		{"--acked-log", "/nonexistent/dir/log"},
		{"extra"},
		{"--stream", "--window", "0"},
		{"--stream", "--senders", "2"},
		{"--stream", "--transport", "echo"},
		{"--stream", "--mode", "multi_round"},
	} {
		res := r.Run(append([]string{"load", "--insecure"}, args...)...)
		if res.Code != clikit.ExitUsage {
			t.Errorf("load %v: exit %d, want %d\n%s", args, res.Code, clikit.ExitUsage, res.ErrOut)
		}
	}
}
