package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/protobuf/proto"
)

var updateSnapshotIDs = flag.Bool("update-snapshot-ids", false, "rewrite testdata/snapshot_ids.json")

// Session ids and canaries of the determinism run. The canaries are
// high-entropy strings placed in every free-text field and in payload
// bytes; none may surface, in any encoding, in snapshots, reports or logs.
const (
	detResolved  = "5b1e3c4a-7d2f-4e8a-9b6c-0a1d2e3f4a5b"
	detCancelled = "6c2f4d5b-8e3a-4f9b-8c7d-1b2e3f4a5b6c"
	detExpired   = "7d3a5e6c-9f4b-4a0c-9d8e-2c3f4a5b6c7d"
	detOpen      = "8e4b6f7d-0a5c-4b1d-8e9f-3d4a5b6c7d8e"
)

var canaries = []string{
	"CANARY-intent-q7Zp2xV9kLm4Rt8Wb3Ny6Hs1",
	"CANARY-extval-J5dK8fQ2wE7rT4yU9iO1pA6s",
	"CANARY-ration-Z3xC6vB9nM2lK5jH8gF1dS4a",
	"CANARY-voterz-P0oI9uY8tR7eW6qA5sD4fG3h",
	"CANARY-commit-L1kJ2hG3fD4sA5pO6iU7yT8r",
	"CANARY-cancel-M9nB8vC7xZ6lK5jH4gF3dS2a",
	"CANARY-reject-Q2wE3rT4yU5iO6pA7sD8fG9h",
	"CANARY-ctxid0-R4tY5uI6oP7aS8dF9gH0jK1l",
}

// macpdProc is one macpd process of the determinism test.
type macpdProc struct {
	cmd     *exec.Cmd
	out     *syncBuffer
	addr    string
	snapDir string
	exited  chan error
}

// startDetMacpd starts the built macpd in workDir with a relative data
// directory (so the two processes' absolute paths differ), the given time
// zone and GOMAXPROCS, dev identities, debug JSON logs and a snapshot
// directory; extraEnv (KEY=VALUE) is added last.
func startDetMacpd(t *testing.T, tz, procs string, extraEnv ...string) *macpdProc {
	t.Helper()
	bin, err := buildMacpd()
	if err != nil {
		t.Fatal(err)
	}
	p := &macpdProc{out: &syncBuffer{}, addr: freeAddr(t), snapDir: t.TempDir(), exited: make(chan error, 1)}
	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MACP_") && !strings.HasPrefix(kv, "TZ=") && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "TZ="+tz, "GOMAXPROCS="+procs,
		"MACP_ALLOW_INSECURE=1", "MACP_BIND_ADDR="+p.addr, "MACP_DATA_DIR=data", "MACP_SNAPSHOT_DIR="+p.snapDir,
		"MACP_LOG_LEVEL=debug", "MACP_LOG_FORMAT=json",
		"MACP_SESSION_START_LIMIT_PER_MINUTE=0", "MACP_MESSAGE_LIMIT_PER_MINUTE=0")
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	// Serving: an Initialize answers.
	cl := p.client(t, "coord")
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cl.Initialize(ctx)
		cancel()
		if err == nil {
			return p
		}
		select {
		case werr := <-p.exited:
			t.Fatalf("macpd exited: %v\n%s", werr, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("macpd did not serve: %v\n%s", err, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *macpdProc) client(t *testing.T, who string) *sdk.Client {
	t.Helper()
	cl, err := sdk.Dial(context.Background(), p.addr, sdk.WithInsecure(), sdk.WithBearer(who))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (p *macpdProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("macpd exit: %v\n%s", err, p.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("macpd did not stop")
	}
}

func mustPB(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// feed sends the fixed envelopes (same ids, senders, payloads) to p.
// SessionStart timestamps are the current time (they must be within the
// runtime's skew), so the two runs differ in every timestamp.
func feed(t *testing.T, p *macpdProc) {
	t.Helper()
	ctx := context.Background()
	cls := map[string]*sdk.Client{"coord": p.client(t, "coord"), "alice": p.client(t, "alice"), "bob": p.client(t, "bob")}
	const mode = "macp.mode.decision.v1"
	send := func(who, sid, id, typ string, payload []byte, wantOK bool) {
		t.Helper()
		ack, err := cls[who].Send(ctx, &macpv1.Envelope{MacpVersion: "1.0", Mode: mode, MessageType: typ, MessageId: id,
			SessionId: sid, Sender: who, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload})
		if ok := err == nil && ack.GetOk(); ok != wantOK {
			t.Fatalf("%s %s in %s: ok=%v err=%v, want ok=%v", who, typ, sid, ack.GetOk(), err, wantOK)
		}
	}
	start := func(sid string, ttl int64, intent string, ext map[string][]byte) {
		send("coord", sid, "start-"+sid, "SessionStart", mustPB(&macpv1.SessionStartPayload{
			Intent: intent, Participants: []string{"alice", "bob"}, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-7",
			TtlMs: ttl, ContextId: canaries[7], Extensions: ext}), true)
	}
	propose := func(sid string) {
		send("coord", sid, "prop-"+sid, "Proposal", mustPB(&decisionv1.ProposalPayload{ProposalId: "p1", Option: "postgres", Rationale: canaries[2]}), true)
	}
	commitment := func(who, sid, id, reason string, ok bool) {
		send(who, sid, id, "Commitment", mustPB(&macpv1.CommitmentPayload{CommitmentId: "c-" + sid, Action: "decision.selected",
			AuthorityScope: "team", Reason: reason, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-7", OutcomePositive: true}), ok)
	}

	start(detResolved, 600_000, canaries[0], map[string][]byte{"x-note": []byte(canaries[1])})
	propose(detResolved)
	send("alice", detResolved, "vote-a-"+detResolved, "Vote", mustPB(&decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE", Reason: canaries[3]}), true)
	commitment("alice", detResolved, "bad-commit", canaries[6], false) // FORBIDDEN: rejected, never in history
	commitment("coord", detResolved, "commit-"+detResolved, canaries[4], true)

	start(detCancelled, 600_000, canaries[0], nil)
	propose(detCancelled)
	if ack, err := cls["coord"].CancelSession(ctx, detCancelled, canaries[5]); err != nil || !ack.GetOk() {
		t.Fatalf("cancel: %v %v", ack, err)
	}

	start(detExpired, 300, canaries[0], nil)
	propose(detExpired)
	waitFor(t, 20*time.Second, func() bool {
		md, err := cls["coord"].GetSession(ctx, detExpired)
		return err == nil && md.GetState() == macpv1.SessionState_SESSION_STATE_EXPIRED
	})

	start(detOpen, 600_000, canaries[0], map[string][]byte{"x-note": []byte(canaries[1])})
	propose(detOpen)
	send("bob", detOpen, "vote-b-"+detOpen, "Vote", mustPB(&decisionv1.VotePayload{ProposalId: "p1", Vote: "REJECT", Reason: canaries[3]}), true)
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// collect reads every session's snapshot (both profiles, report and
// payload) over the wire and the files the snapshot directory received.
func collect(t *testing.T, p *macpdProc) (ids map[string]string, texts []string) {
	t.Helper()
	return collectSessions(t, p, []string{detResolved, detCancelled, detExpired, detOpen}, []string{detResolved, detCancelled, detExpired})
}

// collectSessions reads the snapshots of sessions (both profiles, report
// and payload) over the wire, and the files the snapshot directory
// received for the ended ones.
func collectSessions(t *testing.T, p *macpdProc, sessions, ended []string) (ids map[string]string, texts []string) {
	t.Helper()
	ids = map[string]string{}
	rpc := p.client(t, "coord").RPC()
	for _, sid := range sessions {
		in, _, err := snapshotio.FromRuntime(context.Background(), rpc, sid, 0)
		if err != nil {
			t.Fatalf("%s: %v", sid, err)
		}
		for _, prof := range []snapshot.Class{snapshot.ProfileDefault, snapshot.ProfileStrict} {
			pl, err := snapshot.Build(in, snapshot.Options{EventSource: "macpd", ServerID: "default", Profile: prof})
			if err != nil {
				t.Fatal(err)
			}
			s, err := snapshot.Seal(pl)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := snapshot.NewReport(s).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			ids[sid+"/"+string(prof)] = string(s.ID)
			texts = append(texts, string(s.Bytes), string(rep))
		}
	}
	for _, sid := range ended {
		path := filepath.Join(p.snapDir, "reports", sid+".json")
		waitFor(t, 20*time.Second, func() bool { _, err := os.Stat(path); return err == nil })
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r snapshot.Report
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		ids[sid+"/file"] = string(r.Snapshot.StateSnapshotID)
		pb, err := os.ReadFile(filepath.Join(p.snapDir, "payloads", "sha256-"+strings.TrimPrefix(string(r.Snapshot.ContentsRef), "sha256:")+".json"))
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b), string(pb))
	}
	return ids, texts
}

// canaryForms are the plain, hex and base64 forms of a canary that any
// encoding of a larger byte string containing it would show: for base64,
// the stable middle of the encoding at each of the three alignments.
func canaryForms(c string) []string {
	forms := []string{c, hex.EncodeToString([]byte(c)), strings.ToUpper(hex.EncodeToString([]byte(c)))}
	for shift := 0; shift < 3; shift++ {
		b := append(make([]byte, shift), c...)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			s := enc.EncodeToString(b)
			forms = append(forms, s[4:len(s)-4])
		}
	}
	return forms
}

func assertNoCanary(t *testing.T, where, text string) {
	t.Helper()
	for _, c := range canaries {
		for _, f := range canaryForms(c) {
			if strings.Contains(text, f) {
				t.Errorf("%s holds canary %s as %q", where, c, f)
			}
		}
	}
}

// Issue 15 "Done when": two macpd processes with different data
// directories, time zones, working directories and GOMAXPROCS, fed the
// same envelopes at different wall-clock times, give every session the
// same state_snapshot_id (over the wire, in both profiles, and in the
// MACP_SNAPSHOT_DIR files); the ids equal the checked-in golden ones; and
// no canary (intents, reasons, rationale, extension values, context id,
// a rejected envelope) appears in payloads, reports or debug logs, in
// plain, hex or base64 form (ADR-029 §3).
func TestSnapshotIDsAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds macpd and runs it twice: make test-all")
	}
	// The canary forms catch an embedded, base64-encoded canary.
	probe := base64.StdEncoding.EncodeToString([]byte("xy" + canaries[3] + "z"))
	found := false
	for _, f := range canaryForms(canaries[3]) {
		found = found || strings.Contains(probe, f)
	}
	if !found {
		t.Fatal("canaryForms misses a base64-embedded canary")
	}

	a := startDetMacpd(t, "UTC", "1")
	feed(t, a)
	idsA, textsA := collect(t, a)
	a.stop(t)

	time.Sleep(1100 * time.Millisecond) // a later wall-clock second for every timestamp of the second run
	b := startDetMacpd(t, "Asia/Kathmandu", "3")
	feed(t, b)
	idsB, textsB := collect(t, b)
	b.stop(t)

	if len(idsA) != 11 {
		t.Fatalf("collected %d ids: %v", len(idsA), idsA)
	}
	for k, v := range idsA {
		if idsB[k] != v {
			t.Errorf("%s: %s vs %s", k, v, idsB[k])
		}
	}
	for _, sid := range []string{detResolved, detCancelled, detExpired} {
		if idsA[sid+"/file"] != idsA[sid+"/default"] {
			t.Errorf("%s: the written file's id differs from the wire one", sid)
		}
	}

	golden := filepath.Join("testdata", "snapshot_ids.json")
	if *updateSnapshotIDs {
		out, _ := json.MarshalIndent(idsA, "", "  ")
		if err := os.WriteFile(golden, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gb, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update-snapshot-ids to create it)", err)
	}
	var want map[string]string
	if err := json.Unmarshal(gb, &want); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(want) != fmt.Sprint(idsA) {
		t.Errorf("ids differ from %s:\n got %v\nwant %v", golden, idsA, want)
	}

	for i, s := range append(textsA, textsB...) {
		assertNoCanary(t, fmt.Sprintf("snapshot text %d", i), s)
	}
	assertNoCanary(t, "macpd log (first run)", a.out.String())
	assertNoCanary(t, "macpd log (second run)", b.out.String())
	if !strings.Contains(a.out.String(), `"level":"DEBUG"`) && !strings.Contains(a.out.String(), "writing session snapshots") {
		t.Errorf("the log check read no log:\n%s", a.out.String())
	}
}
