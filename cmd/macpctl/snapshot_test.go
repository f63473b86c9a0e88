package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// decisionSessions drives three Decision sessions through the CLI:
// resolved (start, proposal, vote, commitment), cancelled, open.
func decisionSessions(r runner) (resolved, cancelled, open string) {
	var sids []string
	for i := 0; i < 3; i++ {
		res := r.ok("start", "--agent", "coord", "--mode", "macp.mode.decision.v1", "--participants", "alice,bob", "--ttl", "60s",
			"--intent", "pick a database")
		sid := res.lines()[0]
		sids = append(sids, sid)
		r.ok("send", "--agent", "coord", "--session", sid, "--type", "Proposal",
			"--payload-json", `{"proposal_id":"p1","option":"postgres","rationale":"boring"}`)
		r.ok("send", "--agent", "alice", "--session", sid, "--type", "Vote", "--payload-json", `{"proposal_id":"p1","vote":"APPROVE"}`)
	}
	r.ok("send", "--agent", "coord", "--session", sids[0], "--type", "Commitment",
		"--payload-json", `{"action":"decision.selected","authority_scope":"team","reason":"approved","outcome_positive":true}`)
	r.ok("cancel", sids[1], "--agent", "coord")
	return sids[0], sids[1], sids[2]
}

// Issue 15: macpctl snapshot from a running server (GetSession + passive
// StreamSession) and offline from its data directory print the same
// report and payload, equal to the file MACP_SNAPSHOT_DIR received when
// the session ended; macpctl replay reports the same id and exit 0;
// a what-if under a stricter RFC-MACP-0012 policy diverges at the
// Commitment (sequence 4) with POLICY_DENIED.
func TestSnapshotOnlineOfflineFilesReplay(t *testing.T) {
	dir, snapDir := t.TempDir(), t.TempDir()
	a := startApp(t, func(c *config.Config) {
		c.MemoryOnly, c.DataDir = false, dir
		c.Snapshots = config.SnapshotConfig{EventSource: "assay://macpd-test", ServerID: "eu-1", Dir: snapDir}
	})
	r := runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1",
		"MACP_EVENT_SOURCE": "assay://macpd-test", "MACP_SERVER_ID": "eu-1"}}
	resolved, cancelled, open := decisionSessions(r)

	variants := [][]string{{}, {"--payload"}, {"--profile", "strict"}, {"--payload", "--profile", "strict"}, {"--decay-runs", "2", "--payload"}}
	online := map[string]string{}
	for _, sid := range []string{resolved, cancelled, open} {
		for _, v := range variants {
			res := r.ok(append([]string{"snapshot", sid, "--agent", "coord"}, v...)...)
			online[sid+strings.Join(v, " ")] = res.out
		}
		// A participant may read it too; an outsider may not.
		if res := r.ok("snapshot", sid, "--agent", "alice"); res.out != online[sid] {
			t.Errorf("alice's report differs")
		}
		if res := r.run("snapshot", sid, "--agent", "mallory"); res.code != 1 || !strings.Contains(res.errOut, "FORBIDDEN") {
			t.Errorf("mallory: exit %d %s", res.code, res.errOut)
		}
	}
	rep := online[resolved]
	if err := snapshot.ValidateReportJSON([]byte(rep)); err != nil {
		t.Fatal(err)
	}
	m := obj(t, rep)
	wantField(t, m, "assay://macpd-test", "session", "event_source")
	wantField(t, m, "eu-1", "session", "server_id")
	wantField(t, m, string(snapshot.Opaque("assay://macpd-test", "eu-1", resolved)), "session", "session_id")
	id := field(m, "snapshot", "state_snapshot_id").(string)
	if !snapshot.ValidHash(id) || field(m, "snapshot", "contents_ref") != id {
		t.Fatalf("report %s", rep)
	}
	payload := online[resolved+"--payload"]
	if string(snapshot.HashBytes([]byte(strings.TrimSuffix(payload, "\n")))) != id {
		t.Fatalf("the payload does not hash to the id")
	}
	p := obj(t, payload)
	wantField(t, p, "RESOLVED", "state")
	wantField(t, p, "commitment", "outcome", "ended_by")
	wantField(t, p, string(snapshot.Opaque("assay://macpd-test", "eu-1", "decision.selected")), "outcome", "action")
	wantField(t, p, float64(4), "accepted_count")
	if strings.Contains(payload, "pick a database") || strings.Contains(payload, "boring") {
		t.Fatalf("payload holds text: %s", payload)
	}
	if online[resolved] == online[resolved+"--profile strict"] {
		t.Fatal("strict profile has the same id")
	}

	// The files written at the terminal transitions (in the background).
	for _, sid := range []string{resolved, cancelled} {
		path := filepath.Join(snapDir, "reports", sid+".json")
		waitFor(t, func() bool { _, err := os.Stat(path); return err == nil })
		b, _ := os.ReadFile(path)
		if string(b)+"\n" != online[sid] {
			t.Errorf("%s: file %s\nonline %s", sid, b, online[sid])
		}
		pid := field(obj(t, string(b)), "snapshot", "contents_ref").(string)
		pb, err := os.ReadFile(filepath.Join(snapDir, "payloads", "sha256-"+strings.TrimPrefix(pid, "sha256:")+".json"))
		if err != nil || string(pb)+"\n" != online[sid+"--payload"] {
			t.Errorf("%s: payload file %s (%v)", sid, pb, err)
		}
	}
	if _, err := os.Stat(filepath.Join(snapDir, "reports", open+".json")); err == nil {
		t.Error("an OPEN session got a snapshot file")
	}
	// The in-process service agrees.
	svcRep, err := a.Snapshots().StateWindow(context.Background(), resolved, snapshotio.Query{})
	if err != nil || string(svcRep.Snapshot.StateSnapshotID) != id {
		t.Fatalf("service: %v %s", err, svcRep.Snapshot.StateSnapshotID)
	}

	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{resolved, cancelled, open} {
		for _, v := range variants {
			args := []string{"snapshot", sid, "--data-dir", dir}
			if slices.Contains(v, "--decay-runs") {
				args = append(args, "--as", "coord") // the online caller
			}
			res := r.ok(append(args, v...)...)
			if res.out != online[sid+strings.Join(v, " ")] {
				t.Errorf("%s %v: offline\n%s\nonline\n%s", sid, v, res.out, online[sid+strings.Join(v, " ")])
			}
		}
	}

	res := r.ok("replay", "--data-dir", dir, resolved)
	rr := obj(t, res.lines()[0])
	wantField(t, rr, id, "state_snapshot_id")
	wantField(t, rr, true, "matches_store")
	wantField(t, rr, "RESOLVED", "outcome", "state")
	if bv := rr["bound_versions"].([]any); len(bv) != 3 || bv[0].(map[string]any)["determinism_class"] != "semantic-deterministic" {
		t.Errorf("bound versions %v", bv)
	}
	if res := r.ok("replay", "--data-dir", dir, "--all"); res.lines()[0] != "3 sessions replayed, 0 diverged" {
		t.Fatalf("replay --all: %s", res.out)
	}

	pol := filepath.Join(t.TempDir(), "strict.json")
	os.WriteFile(pol, []byte(`{"policy_id":"policy.test.two-voters","mode":"macp.mode.decision.v1","description":"unanimous, two voters",
		"rules":{"voting":{"algorithm":"unanimous","quorum":{"type":"count","value":2}}},"schema_version":1}`), 0o644)
	res = r.ok("replay", "--data-dir", dir, resolved, "--policy-file", pol)
	w := obj(t, res.lines()[0])
	wantField(t, w, true, "diverged")
	wantField(t, w, float64(4), "first_divergence_seq")
	wantField(t, w, "POLICY_DENIED", "divergence_code")
	wantField(t, w, "RESOLVED", "original", "state")
	wantField(t, w, "OPEN", "what_if", "state")
	// The lenient default policy as a what-if diverges nowhere.
	lenient := filepath.Join(t.TempDir(), "lenient.json")
	os.WriteFile(lenient, []byte(`{"policy_id":"policy.test.lenient","mode":"*","rules":"{}"}`), 0o644)
	res = r.ok("replay", "--data-dir", dir, resolved, "--policy-file", lenient)
	wantField(t, obj(t, res.lines()[0]), false, "diverged")
	for _, bad := range [][]string{
		{"replay", "--data-dir", dir},
		{"replay", "--data-dir", dir, "--all", resolved},
		{"replay", "--data-dir", dir, resolved, "--policy-file", pol, "--mode-version", "2"},
		{"replay", "--data-dir", dir, resolved, "--policy-file", filepath.Join(dir, "none.json")},
		{"snapshot", resolved, "--data-dir", dir, "--profile", "raw"},
	} {
		if res := r.run(bad...); res.code != 2 {
			t.Errorf("%v: exit %d, %s", bad, res.code, res.errOut)
		}
	}
}

// Issue 15 "Done when": macpctl replay --all over a data directory
// written by the load generator reports 0 diverged.
func TestReplayAllLoadGenerator(t *testing.T) {
	dir := t.TempDir()
	a := startApp(t, func(c *config.Config) { c.MemoryOnly, c.DataDir = false, dir })
	r := runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1"}}
	for _, cfg := range []loadgen.Config{
		{Addr: a.Addr(), Sessions: 40, Messages: 6, Concurrency: 4, Commit: true},
		{Addr: a.Addr(), Sessions: 10, Messages: 4, Concurrency: 2, SendersPerSession: 2},
	} {
		res, err := loadgen.Run(context.Background(), cfg)
		if err != nil || res.Errors != 0 || res.Rejected != 0 || res.SessionsStarted != int64(cfg.Sessions) {
			t.Fatalf("load %+v: %v %+v", cfg, err, res)
		}
	}
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := r.ok("replay", "--data-dir", dir, "--all")
	if res.out != "50 sessions replayed, 0 diverged\n" {
		t.Fatalf("replay --all:\n%s", res.out)
	}

	// Exit 0 only when everything equals what was stored: flip one byte
	// of one session's record 2 (straight into Pebble).
	st, err := pebblestore.Open(dir, pebblestore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var victim string
	_ = st.List(context.Background(), func(info store.SessionInfo) error {
		if victim == "" {
			victim = info.SessionID
		}
		return nil
	})
	st.Close()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	k := pebblestore.RecordKey(victim, 2)
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
	res = r.run("replay", "--data-dir", dir, "--all")
	if res.code != 1 || !strings.HasSuffix(res.out, "50 sessions replayed, 1 diverged\n") || !strings.Contains(res.out, victim) {
		t.Fatalf("replay --all after damage: exit %d\n%s", res.code, res.out)
	}
	res = r.run("replay", "--data-dir", dir, victim)
	if res.code != 1 {
		t.Fatalf("replay of the damaged session: exit %d\n%s", res.code, res.out)
	}
	wantField(t, obj(t, res.lines()[0]), false, "matches_store")
}
