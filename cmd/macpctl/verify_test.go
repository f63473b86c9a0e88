package main

import (
	"context"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// macpctl verify on a data directory written by a real macpd: every
// session verifies; after one byte of one stored record value is flipped
// (written straight into Pebble, bypassing the store's codec, so the
// damage is deterministic), exactly that session fails, by name.
func TestVerifyDataDir(t *testing.T) {
	dir := t.TempDir()
	a := startApp(t, func(c *config.Config) {
		c.MemoryOnly = false
		c.DataDir = dir
	})
	r := runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1"}}
	var sids []string
	for i := 0; i < 2; i++ {
		res := r.ok("start", "--agent", "coord", "--mode", "macp.mode.decision.v1", "--participants", "alice,bob", "--ttl", "60s")
		sid := res.lines()[0]
		sids = append(sids, sid)
		r.ok("send", "--agent", "coord", "--session", sid, "--type", "Proposal",
			"--payload-json", `{"proposal_id":"p1","option":"postgres","rationale":"boring"}`)
		r.ok("send", "--agent", "alice", "--session", sid, "--type", "Vote", "--payload-json", `{"proposal_id":"p1","vote":"APPROVE"}`)
	}
	r.ok("send", "--agent", "coord", "--session", sids[0], "--type", "Commitment",
		"--payload-json", `{"action":"decision.selected","authority_scope":"team","reason":"approved","outcome_positive":true}`)
	r.ok("cancel", sids[1], "--agent", "coord")
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	res := r.ok("verify", "--data-dir", dir)
	lines := res.lines()
	if len(lines) != 3 || lines[2] != "2 sessions verified, 0 failed" {
		t.Fatalf("verify output:\n%s", res.out)
	}
	for _, l := range lines[:2] {
		if !strings.HasPrefix(l, "OK   ") || !strings.Contains(l, " sha256:") {
			t.Fatalf("verify line %q", l)
		}
	}
	if !strings.Contains(res.out, sids[0]+" RESOLVED 4 records sha256:") || !strings.Contains(res.out, sids[1]+" EXPIRED 4 records sha256:") {
		t.Fatalf("verify output:\n%s", res.out)
	}
	// MACP_DATA_DIR is the default.
	r.env["MACP_DATA_DIR"] = dir
	if res := r.ok("verify"); !strings.HasSuffix(res.out, "2 sessions verified, 0 failed\n") {
		t.Fatalf("verify via MACP_DATA_DIR:\n%s", res.out)
	}

	// Flip one byte of session 0's record 3.
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	k := pebblestore.RecordKey(sids[0], 3)
	v, closer, err := db.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	v = append([]byte(nil), v...)
	closer.Close()
	v[len(v)/2] ^= 0x20
	if err := db.Set(k, v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	res = r.run("verify", "--data-dir", dir)
	if res.code != 1 || !strings.HasSuffix(res.out, "1 sessions verified, 1 failed\n") {
		t.Fatalf("verify after damage: exit %d\n%s%s", res.code, res.out, res.errOut)
	}
	if !strings.Contains(res.out, "FAIL "+sids[0]+": ") || !strings.Contains(res.out, "session "+sids[0]+" record 3") ||
		!strings.Contains(res.out, "OK   "+sids[1]) {
		t.Fatalf("verify after damage does not name the session and record:\n%s", res.out)
	}
	// Read-only: verify left no quarantine mark, so a second run says the same.
	if res2 := r.run("verify", "--data-dir", dir); res2.out != res.out {
		t.Fatalf("second run differs:\n%s\nvs\n%s", res2.out, res.out)
	}

	if res := r.run("verify", "--data-dir", dir+"/missing"); res.code != clikit.ExitUsage {
		t.Fatalf("verify of a missing directory: exit %d", res.code)
	}
}

// quietPebble keeps Pebble's informational logging out of test output.
type quietPebble struct{ t *testing.T }

func (quietPebble) Infof(string, ...any)           {}
func (q quietPebble) Errorf(f string, a ...any)    { q.t.Logf("pebble: "+f, a...) }
func (q quietPebble) Fatalf(f string, args ...any) { q.t.Fatalf("pebble: "+f, args...) }
