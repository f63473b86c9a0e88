package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
)

// macpctl tail prints one line per accepted envelope with its sequence
// number (docs/resume.md) and ends with the session; --after resumes
// after a sequence number; across a runtime restart (a disconnect) it
// resumes by itself and prints each envelope exactly once.
func TestTail(t *testing.T) {
	dir := t.TempDir()
	cfgOf := func(addr string) config.Config {
		cfg := config.Default()
		cfg.DataDir = filepath.Join(dir, "data")
		cfg.BindAddr = addr
		cfg.AllowInsecure = true
		cfg.Limits.SessionStartsPerMinute, cfg.Limits.MessagesPerMinute = 0, 0
		return cfg
	}
	a, err := app.New(cfgOf("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	addr := a.Addr()
	r := runner{t: t, env: map[string]string{"MACP_ADDR": addr, "MACP_ALLOW_INSECURE": "1"}}
	sid := r.ok("start", "--agent", "coord", "--participants", "coord,alice", "--ttl", "5m").lines()[0]
	r.ok("send", "--agent", "coord", "--session", sid, "--type", "Proposal", "--payload-json", `{"proposal_id":"p1","option":"a"}`)

	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"tail", sid, "--agent", "alice"}, func(k string) string { return r.env[k] }, &out, &errOut)
	}()
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") >= 2 })
	// Restart the runtime on the same address: tail reconnects.
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	a, err = app.New(cfgOf(addr), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	r.ok("send", "--agent", "coord", "--session", sid, "--type", "Proposal", "--payload-json", `{"proposal_id":"p2","option":"b"}`)
	r.ok("cancel", sid, "--agent", "coord")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("tail: exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("tail did not end with the session; output %q, stderr %q", out.String(), errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("tail printed %d lines, want 4: %q", len(lines), out.String())
	}
	for i, l := range lines {
		m := obj(t, l)
		if m["seq"] != float64(i+1) {
			t.Fatalf("line %d: seq %v", i, m["seq"])
		}
	}
	wantField(t, obj(t, lines[2]), "p2", "envelope", "payload", "proposal_id")
	wantField(t, obj(t, lines[3]), "SessionCancel", "envelope", "message_type")
	if !strings.Contains(errOut.String(), "reconnecting") {
		t.Fatalf("no reconnection reported: %q", errOut.String())
	}
	res := r.ok("tail", sid, "--agent", "alice", "--after", "2")
	if got := res.lines(); len(got) != 2 || !strings.HasPrefix(got[0], fmt.Sprintf(`{"seq":%d,`, 3)) {
		t.Fatalf("--after 2: %q", res.out)
	}
}

// A session/resume of the same identity elsewhere supersedes tail's
// follow (the runtime's Attachments.Supersede, what session/resume
// calls): tail stops with an error naming where it stopped and does not
// reconnect (before: ABORTED was retried at once).
func TestTailStopsWhenSuperseded(t *testing.T) {
	a := startApp(t)
	r := runner{t: t, env: map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1"}}
	sid := r.ok("start", "--agent", "coord", "--participants", "coord,alice", "--ttl", "5m").lines()[0]
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"tail", sid, "--agent", "alice"}, func(k string) string { return r.env[k] }, &out, &errOut)
	}()
	waitFor(t, func() bool {
		return strings.Count(out.String(), "\n") >= 1 && a.Runtime().Attachments().Tracked("alice", sid) == 1
	})
	a.Runtime().Attachments().Supersede("alice", sid)
	select {
	case code := <-done:
		if code == 0 || !strings.Contains(errOut.String(), "stopped after sequence 1") || !strings.Contains(errOut.String(), "superseded") ||
			strings.Contains(errOut.String(), "reconnecting") {
			t.Fatalf("tail exited %d: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("tail did not stop: %s", errOut.String())
	}
}
