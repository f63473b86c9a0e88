package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/testutil"
	"github.com/macpd/macpd/sdk"
)

// appRunner starts macpd with profile ("" for the default) and returns a
// macpctl runner against it.
func appRunner(t *testing.T, mutate ...func(*config.Config)) runner {
	t.Helper()
	a := startApp(t, mutate...)
	return runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1"}}
}

func withProfile(p string) func(*config.Config) {
	return func(c *config.Config) {
		if p != "" {
			c.Profile = p
		}
	}
}

// macpctl suspend, resume and cancel print the ack with the state
// reached: SUSPENDED, OPEN, and CANCELLED under latest, EXPIRED under
// 2026-04 (the default); get agrees; only the initiator may call them.
func TestSuspendResumeCancelCommands(t *testing.T) {
	for _, tc := range []struct{ profile, cancelled string }{
		{"", "SESSION_STATE_EXPIRED"},
		{"2026-04", "SESSION_STATE_EXPIRED"},
		{"latest", "SESSION_STATE_CANCELLED"},
	} {
		t.Run("profile="+tc.profile, func(t *testing.T) {
			r := appRunner(t, withProfile(tc.profile))
			sid := r.ok("start", "--agent", "coord", "--participants", "coord,alice", "--ttl", "10m").lines()[0]
			state := func(args []string, want string) {
				t.Helper()
				res := r.ok(args...)
				m := obj(t, res.lines()[0])
				wantField(t, m, want, "session_state")
				wantField(t, obj(t, r.ok("get", sid, "--agent", "coord").lines()[0]), want, "state")
			}
			if res := r.run("suspend", sid, "--agent", "alice"); res.code != 1 || !strings.Contains(res.errOut, "FORBIDDEN") {
				t.Fatalf("suspend by a participant: exit %d %s", res.code, res.errOut)
			}
			if res := r.run("resume", sid, "--agent", "coord"); res.code != 1 || !strings.Contains(res.errOut, "SESSION_NOT_OPEN") {
				t.Fatalf("resume of an OPEN session: exit %d %s", res.code, res.errOut)
			}
			state([]string{"suspend", sid, "--agent", "coord", "--reason", "freeze"}, "SESSION_STATE_SUSPENDED")
			if res := r.run("send", "--agent", "alice", "--session", sid, "--type", "Proposal",
				"--payload-json", `{"proposal_id":"p1","option":"x"}`); res.code != 1 || !strings.Contains(res.errOut, "SESSION_NOT_OPEN") {
				t.Fatalf("a proposal while suspended: exit %d %s", res.code, res.errOut)
			}
			state([]string{"resume", sid, "--agent", "coord"}, "SESSION_STATE_OPEN")
			r.ok("send", "--agent", "alice", "--session", sid, "--type", "Proposal", "--payload-json", `{"proposal_id":"p1","option":"x"}`)
			state([]string{"suspend", sid, "--agent", "coord"}, "SESSION_STATE_SUSPENDED")
			state([]string{"cancel", sid, "--agent", "coord", "--reason", "dropped"}, tc.cancelled)
			// Cancelling again answers the terminal state.
			state([]string{"cancel", sid, "--agent", "coord"}, tc.cancelled)
			if res := r.run("suspend"); res.code != 2 {
				t.Fatalf("suspend without a session: exit %d", res.code)
			}
		})
	}
}

// list --page-size walks the sessions in pages linked by next_page_token.
func TestListPages(t *testing.T) {
	r := appRunner(t)
	want := map[string]bool{}
	for range 5 {
		want[r.ok("start", "--agent", "coord", "--participants", "alice").lines()[0]] = true
	}
	seen := map[string]bool{}
	token, pages := "", 0
	for {
		args := []string{"list", "--agent", "coord", "--page-size", "2"}
		if token != "" {
			args = append(args, "--page-token", token)
		}
		var page struct {
			Sessions []struct {
				SessionID string `json:"session_id"`
			} `json:"sessions"`
			Next string `json:"next_page_token"`
		}
		if err := json.Unmarshal([]byte(r.ok(args...).lines()[0]), &page); err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Sessions) > 2 {
			t.Fatalf("page of %d", len(page.Sessions))
		}
		for _, s := range page.Sessions {
			if seen[s.SessionID] || !want[s.SessionID] {
				t.Fatalf("%s listed twice or unknown", s.SessionID)
			}
			seen[s.SessionID] = true
		}
		if page.Next == "" {
			break
		}
		token = page.Next
	}
	if pages != 3 || len(seen) != 5 {
		t.Fatalf("%d pages, %d sessions", pages, len(seen))
	}
	all := obj(t, r.ok("list", "--agent", "coord").lines()[0])
	if n := len(field(all, "sessions").([]any)); n != 5 || field(all, "next_page_token") != "" {
		t.Fatalf("list without --page-size: %d sessions, token %v", n, field(all, "next_page_token"))
	}
	if res := r.run("list", "--agent", "coord", "--page-size", "-1"); res.code != 2 {
		t.Fatalf("--page-size -1: exit %d", res.code)
	}
	if res := r.run("list", "--agent", "coord", "--page-size", "2", "--page-token", "bogus"); res.code == 0 {
		t.Fatal("a token the runtime did not issue was accepted")
	}
}

// commitment-hash reproduces the RFC-MACP-0013 vectors (read from the
// shared fixture directory), hashes a payload given inline, and hashes a
// session's Commitment read live or from a data directory; the printed
// reference is accepted as a later Commitment's supersedes.
func TestCommitmentHashCommand(t *testing.T) {
	dir := filepath.Join(testutil.ConformanceLatestDir(t), "cmt-hash")
	files, _ := filepath.Glob(filepath.Join(dir, "cmt_hash_*.json"))
	if len(files) < 5 {
		t.Fatalf("%d vectors in %s", len(files), dir)
	}
	r := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1"}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Payload json.RawMessage `json:"payload"`
			Hash    string          `json:"hash"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		wantField(t, obj(t, r.ok("commitment-hash", "--payload-file", f).lines()[0]), v.Hash, "commitment_hash")
		wantField(t, obj(t, r.ok("commitment-hash", "--payload-json", string(v.Payload)).lines()[0]), v.Hash, "commitment_hash")
	}
	for _, bad := range [][]string{
		{"commitment-hash"},
		{"commitment-hash", "--payload-json", "{}", "sid"},
		{"commitment-hash", "--payload-json", `{"nope":1}`},
		{"commitment-hash", "--payload-json", "{}", "--seq", "3"},
	} {
		if res := r.run(bad...); res.code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, res.code)
		}
	}

	data := t.TempDir()
	a := startApp(t, func(c *config.Config) { c.MemoryOnly, c.DataDir, c.Profile = false, data, "latest" })
	r = runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1"}}
	resolve := func(commitment string) (string, result) {
		sid := r.ok("start", "--agent", "coord", "--participants", "alice", "--profile", "latest").lines()[0]
		r.ok("send", "--agent", "alice", "--session", sid, "--type", "Proposal", "--payload-json", `{"proposal_id":"p1","option":"x"}`)
		return sid, r.run("send", "--agent", "coord", "--session", sid, "--type", "Commitment", "--payload-json", commitment)
	}
	first, res := resolve(`{"commitment_id":"c1","action":"decision.selected","authority_scope":"team","reason":"ok","outcome_positive":true}`)
	if res.code != 0 {
		t.Fatalf("commit: %s %s", res.out, res.errOut)
	}
	live := obj(t, r.ok("commitment-hash", first, "--agent", "coord").lines()[0])
	wantField(t, live, first, "session_id")
	// The same payload, completed as macpctl send completed it.
	want, err := sdk.CommitmentHash(&macpv1.CommitmentPayload{CommitmentId: "c1", Action: "decision.selected", AuthorityScope: "team",
		Reason: "ok", OutcomePositive: true, ModeVersion: "1.0.0", ConfigurationVersion: "v1", PolicyVersion: "policy.default"})
	if err != nil {
		t.Fatal(err)
	}
	wantField(t, live, want, "commitment_hash")
	wantField(t, obj(t, r.ok("commitment-hash", first, "--seq", "3", "--agent", "coord").lines()[0]), want, "commitment_hash")
	if res := r.run("commitment-hash", first, "--seq", "2", "--agent", "coord"); res.code != 1 || !strings.Contains(res.errOut, "Proposal, not a Commitment") {
		t.Fatalf("--seq of a Proposal: exit %d %s", res.code, res.errOut)
	}
	ref, _ := json.Marshal(map[string]any{"session_id": first, "commitment_hash": want})
	second, res := resolve(`{"action":"decision.selected","authority_scope":"team","reason":"redo","outcome_positive":true,"supersedes":` + string(ref) + `}`)
	if res.code != 0 {
		t.Fatalf("a superseding commitment: %s %s", res.out, res.errOut)
	}
	open := r.ok("start", "--agent", "coord", "--participants", "alice").lines()[0]
	if res := r.run("commitment-hash", open, "--agent", "coord"); res.code != 1 || !strings.Contains(res.errOut, "OPEN") {
		t.Fatalf("an OPEN session: exit %d %s", res.code, res.errOut)
	}
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	off := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1"}}
	wantField(t, obj(t, off.ok("commitment-hash", first, "--data-dir", data).lines()[0]), want, "commitment_hash")
	got := obj(t, off.ok("commitment-hash", second, "--data-dir", data).lines()[0])
	if h, _ := field(got, "commitment_hash").(string); !strings.HasPrefix(h, "sha256:") || h == want {
		t.Fatalf("the superseding commitment's hash %v", got)
	}
}

// start --profile refuses, before sending anything, when the runtime binds
// new sessions to another profile.
func TestStartProfile(t *testing.T) {
	for _, tc := range []struct{ server, flag string }{{"", "latest"}, {"latest", "2026-04"}} {
		r := appRunner(t, withProfile(tc.server))
		res := r.run("start", "--agent", "coord", "--participants", "alice", "--profile", tc.flag)
		if res.code != 1 || res.out != "" || !strings.Contains(res.errOut, "no session was started") {
			t.Fatalf("server %q, --profile %s: exit %d out %q err %q", tc.server, tc.flag, res.code, res.out, res.errOut)
		}
		if ls := obj(t, r.ok("list", "--agent", "coord").lines()[0]); len(field(ls, "sessions").([]any)) != 0 {
			t.Fatalf("a session was started: %v", ls)
		}
	}
	r := appRunner(t, withProfile("latest"))
	for _, p := range []string{"latest", "2026-09"} {
		r.ok("start", "--agent", "coord", "--participants", "alice", "--profile", p)
	}
	appRunner(t).ok("start", "--agent", "coord", "--participants", "alice", "--profile", "2026-04")
	if res := r.run("start", "--agent", "coord", "--profile", "2027-01"); res.code != 2 {
		t.Fatalf("an unknown profile: exit %d", res.code)
	}
}
