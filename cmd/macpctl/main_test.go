package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/clikit/clitest"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/testutil"
	"google.golang.org/protobuf/proto"
)

func startApp(t *testing.T, mutate ...func(*config.Config)) *app.App {
	t.Helper()
	return clitest.StartApp(t, mutate...)
}

// syncBuffer is a log sink safe for concurrent writers and a reader.
type syncBuffer = testutil.SyncBuffer

type result struct {
	code        int
	out, errOut string
}

// lines returns the stdout lines.
func (r result) lines() []string { return strings.Split(strings.TrimRight(r.out, "\n"), "\n") }

type runner struct {
	t   *testing.T
	env map[string]string
}

func (r runner) run(args ...string) result {
	return r.runCtx(context.Background(), args...)
}

func (r runner) runCtx(ctx context.Context, args ...string) result {
	res := clitest.Run(ctx, run, r.env, args...)
	return result{res.Code, res.Out, res.ErrOut}
}

// ok runs args and asserts exit 0.
func (r runner) ok(args ...string) result {
	r.t.Helper()
	res := clitest.Runner{T: r.t, Name: "macpctl", Main: run, Env: r.env}.Ok(args...)
	return result{res.Code, res.Out, res.ErrOut}
}

// obj decodes one JSON object line.
func obj(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", line, err)
	}
	return m
}

func field(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func wantField(t *testing.T, m map[string]any, want any, path ...string) {
	t.Helper()
	if got := field(m, path...); got != want {
		t.Fatalf("%s = %v (%T), want %v in %v", strings.Join(path, "."), got, got, want, m)
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// A whole Decision session walk, as three agents, through the CLI.
func TestDecisionWalk(t *testing.T) {
	a := startApp(t)
	r := runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1"}}

	res := r.ok("start", "--agent", "coord", "--mode", "macp.mode.decision.v1", "--participants", "alice,bob",
		"--ttl", "60s", "--intent", "choose a database", "--context-id", "ctx:1")
	lines := res.lines()
	if len(lines) != 2 || !uuidV4.MatchString(lines[0]) {
		t.Fatalf("start output: %q", res.out)
	}
	sid := lines[0]
	ack := obj(t, lines[1])
	wantField(t, ack, true, "ok")
	wantField(t, ack, false, "duplicate")
	wantField(t, ack, sid, "session_id")
	wantField(t, ack, "SESSION_STATE_OPEN", "session_state")
	wantField(t, ack, nil, "error") // present and null: EmitUnpopulated
	if _, ok := ack["error"]; !ok {
		t.Fatalf("unpopulated fields must be emitted: %v", ack)
	}

	res = r.ok("send", "--agent", "coord", "--session", sid, "--type", "Proposal", "--id", "m-prop",
		"--payload-json", `{"proposal_id":"p1","option":"postgres","rationale":"boring"}`)
	ack = obj(t, res.out)
	wantField(t, ack, true, "ok")
	wantField(t, ack, "m-prop", "message_id")
	// Resending the same message id is a duplicate.
	res = r.ok("send", "--agent", "coord", "--session", sid, "--type", "Proposal", "--id", "m-prop",
		"--payload-json", `{"proposal_id":"p1","option":"postgres","rationale":"boring"}`)
	wantField(t, obj(t, res.out), true, "duplicate")

	// Flags may follow positional-free commands in any order; --mode given.
	res = r.ok("send", "--session", sid, "--type", "Evaluation", "--agent", "bob", "--mode", "macp.mode.decision.v1",
		"--payload-json", `{"proposal_id":"p1","recommendation":"APPROVE","confidence":0.8}`)
	wantField(t, obj(t, res.out), true, "ok")
	res = r.ok("send", "--agent", "alice", "--session", sid, "--type", "Vote", "--payload-json", `{"proposal_id":"p1","vote":"APPROVE"}`)
	wantField(t, obj(t, res.out), "SESSION_STATE_OPEN", "session_state")

	// A rejected message: exit 1, the ack on stdout, the code on stderr.
	res = r.run("send", "--agent", "alice", "--session", sid, "--type", "Vote", "--payload-json", `{"proposal_id":"p1","vote":"APPROVE"}`)
	if res.code != 1 || !strings.HasPrefix(res.errOut, "error: INVALID_ENVELOPE: ") {
		t.Fatalf("second vote: %+v", res)
	}
	wantField(t, obj(t, res.out), false, "ok")
	wantField(t, obj(t, res.out), "INVALID_ENVELOPE", "error", "code")

	commit := `{"action":"decision.selected","authority_scope":"team","reason":"alice approved","outcome_positive":true}`
	res = r.run("send", "--agent", "bob", "--session", sid, "--type", "Commitment", "--payload-json", commit)
	if res.code != 1 || !strings.HasPrefix(res.errOut, "error: FORBIDDEN: ") {
		t.Fatalf("non-initiator commitment: %+v", res)
	}
	// The initiator commits; commitment_id and the version binding are
	// filled from the session.
	res = r.ok("send", "--agent", "coord", "--session", sid, "--type", "Commitment", "--payload-json", commit)
	ack = obj(t, res.out)
	wantField(t, ack, true, "ok")
	wantField(t, ack, "SESSION_STATE_RESOLVED", "session_state")

	res = r.ok("get", sid, "--agent", "alice") // flags after the positional argument
	md := obj(t, res.out)
	wantField(t, md, sid, "session_id")
	wantField(t, md, "macp.mode.decision.v1", "mode")
	wantField(t, md, "SESSION_STATE_RESOLVED", "state")
	wantField(t, md, "coord", "initiator")
	wantField(t, md, "1.0.0", "mode_version")
	wantField(t, md, "v1", "configuration_version")
	wantField(t, md, "policy.default", "policy_version")
	wantField(t, md, "ctx:1", "context_id")

	// A second session, cancelled by its initiator.
	res = r.ok("start", "--agent", "coord", "--participants", "alice", "--ttl", "1m")
	sid2 := res.lines()[0]
	res = r.run("cancel", sid2, "--agent", "alice", "--reason", "not mine")
	if res.code != 1 || !strings.HasPrefix(res.errOut, "error: FORBIDDEN: ") || res.out != "" {
		t.Fatalf("cancel by a participant: %+v", res)
	}
	res = r.ok("cancel", "--agent", "coord", "--reason", "superseded", sid2)
	ack = obj(t, res.out)
	wantField(t, ack, true, "ok")
	wantField(t, ack, "SESSION_STATE_EXPIRED", "session_state")

	res = r.ok("list", "--agent", "coord")
	sessions, _ := field(obj(t, res.out), "sessions").([]any)
	states := map[string]any{}
	for _, s := range sessions {
		states[s.(map[string]any)["session_id"].(string)] = s.(map[string]any)["state"]
	}
	if len(sessions) != 2 || states[sid] != "SESSION_STATE_RESOLVED" || states[sid2] != "SESSION_STATE_EXPIRED" {
		t.Fatalf("list: %s", res.out)
	}
	res = r.ok("list", "--agent", "bob")
	if got := field(obj(t, res.out), "sessions").([]any); len(got) != 1 {
		t.Fatalf("bob's list: %s", res.out)
	}

	// watch sessions: the initial sync reports the OPEN session, then a
	// live event; --count ends the watch.
	res = r.ok("start", "--agent", "coord", "--participants", "alice", "--ttl", "1m")
	sid3 := res.lines()[0]
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"watch", "sessions", "--count", "2", "--agent", "alice"},
			func(k string) string { return r.env[k] }, &out, &errOut)
	}()
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") >= 1 })
	r.ok("cancel", sid3, "--agent", "coord")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("watch: exit %d: %s", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch --count 2 did not end")
	}
	evs := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(evs) != 2 {
		t.Fatalf("watch output: %q", out.String())
	}
	first, second := obj(t, evs[0]), obj(t, evs[1])
	wantField(t, first, "EVENT_TYPE_CREATED", "event_type")
	wantField(t, first, sid3, "session", "session_id")
	wantField(t, second, "EVENT_TYPE_EXPIRED", "event_type")
	wantField(t, second, "SESSION_STATE_EXPIRED", "session", "state")
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDiscoveryCommands(t *testing.T) {
	a := startApp(t)
	// Flags only, no environment; discovery needs no identity.
	r := runner{t, nil}
	conn := []string{"--addr", a.Addr(), "--insecure"}
	res := r.ok(append([]string{"init"}, conn...)...)
	in := obj(t, res.out)
	wantField(t, in, "1.0", "selected_protocol_version")
	wantField(t, in, "macpd", "runtime_info", "name")
	res = r.ok(append([]string{"modes"}, conn...)...)
	modes := field(obj(t, res.out), "modes").([]any)
	found := false
	for _, m := range modes {
		found = found || m.(map[string]any)["mode"] == "macp.mode.decision.v1"
	}
	if !found {
		t.Fatalf("modes: %s", res.out)
	}
	res = r.ok(append([]string{"manifest"}, conn...)...)
	wantField(t, obj(t, res.out), "macpd", "agent_id")
	res = r.run(append([]string{"manifest", "someone-else"}, conn...)...)
	if res.code != 1 || !strings.HasPrefix(res.errOut, "error: NOT_FOUND: ") {
		t.Fatalf("unknown manifest: %+v", res)
	}
	// Session commands need an identity.
	res = r.run(append([]string{"list"}, conn...)...)
	if res.code != 1 || !strings.HasPrefix(res.errOut, "error: UNAUTHENTICATED: ") {
		t.Fatalf("anonymous list: %+v", res)
	}
	res = r.run(append([]string{"get", "0b7cde1c-3c2f-4c52-9d0e-7a4c9f1f2a11", "--agent", "x"}, conn...)...)
	if res.code != 1 || !strings.HasPrefix(res.errOut, "error: SESSION_NOT_FOUND: ") {
		t.Fatalf("unknown session: %+v", res)
	}
	// Nothing listens: exit 1 with the transport error.
	res = r.run("init", "--addr", "127.0.0.1:1", "--insecure", "--timeout", "2s")
	if res.code != 1 || !strings.HasPrefix(res.errOut, "error: UNAVAILABLE: ") {
		t.Fatalf("unreachable: %+v", res)
	}
}

func TestWatchSignalsAndRawPayloads(t *testing.T) {
	a := startApp(t)
	r := runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "true", "MACP_AGENT": "obs"}}
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"watch", "signals", "--count", "1"},
			func(k string) string { return r.env[k] }, &out, &errOut)
	}()
	// Signals have no backlog: send until the watcher has one.
	sender := runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1", "MACP_TOKEN": "alice"}}
	var code int
	for waiting := true; waiting; {
		sender.ok("send", "--type", "Signal", "--payload-json", `{"signal_type":"heartbeat","confidence":0.5}`)
		select {
		case code = <-done:
			waiting = false
		case <-time.After(50 * time.Millisecond):
		}
	}
	if code != 0 {
		t.Fatalf("watch signals: exit %d: %s", code, errOut.String())
	}
	env := obj(t, strings.TrimSpace(out.String()))
	// Canonical envelope JSON (RFC-MACP-0001 §10): RFC 3339 timestamp,
	// decoded payload, empty mode and session_id present.
	wantField(t, env, "Signal", "message_type")
	wantField(t, env, "alice", "sender")
	wantField(t, env, "", "mode")
	wantField(t, env, "", "session_id")
	wantField(t, env, "heartbeat", "payload", "signal_type")
	wantField(t, env, 0.5, "payload", "confidence")
	if ts, _ := env["timestamp"].(string); ts == "" {
		t.Fatalf("timestamp: %v", env)
	} else if _, err := time.Parse(time.RFC3339, ts); err != nil {
		t.Fatalf("timestamp %q: %v", ts, err)
	}
	if _, ok := env["timestamp_unix_ms"]; ok {
		t.Fatal("timestamp_unix_ms must be renamed")
	}

	// --payload-b64 sends raw bytes.
	coord := runner{t, map[string]string{"MACP_ADDR": a.Addr(), "MACP_ALLOW_INSECURE": "1", "MACP_AGENT": "coord"}}
	res := coord.ok("start", "--participants", "coord")
	sid := res.lines()[0]
	raw, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: "p1", Option: "x"})
	res = coord.ok("send", "--session", sid, "--type", "Proposal", "--payload-b64", base64.StdEncoding.EncodeToString(raw))
	wantField(t, obj(t, res.out), true, "ok")
	// The raw proposal was decoded by the runtime: p1 can be voted on.
	res = coord.ok("send", "--session", sid, "--type", "Vote", "--payload-json", `{"proposal_id":"p1","vote":"ABSTAIN"}`)
	wantField(t, obj(t, res.out), true, "ok")
}

func TestCanonicalEnvelopeFallsBackToB64(t *testing.T) {
	b, err := canonicalEnvelope(&macpv1.Envelope{MacpVersion: "1.0", Mode: "x.custom", MessageType: "Thing", MessageId: "m",
		SessionId: "s", Sender: "a", TimestampUnixMs: 1700000000123, Payload: []byte{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	m := obj(t, string(b))
	wantField(t, m, "AQI=", "payload_b64")
	wantField(t, m, "2023-11-14T22:13:20.123Z", "timestamp")
	if _, ok := m["payload"]; ok {
		t.Fatalf("exactly one of payload and payload_b64: %s", b)
	}
}

func TestUsageErrors(t *testing.T) {
	r := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1", "MACP_ADDR": "127.0.0.1:1"}}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{nil, ""},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"get"}, "want 1 argument"},
		{[]string{"get", "a", "b"}, "want 1 argument"},
		{[]string{"list", "--nope"}, "flag provided but not defined"},
		{[]string{"send", "--session", "s"}, "--type is required"},
		{[]string{"send", "--type", "Vote"}, "--session is required"},
		{[]string{"send", "--type", "Signal", "--session", "s"}, "no --session or --mode"},
		{[]string{"send", "--type", "SessionStart", "--session", "s"}, "--mode is required"},
		{[]string{"send", "--type", "Vote", "--session", "s", "--payload-json", "{}", "--payload-b64", "AA=="}, "exclusive"},
		{[]string{"send", "--type", "Commitment", "--session", "s", "--payload-json", `{"nope":1}`}, "not a valid macp.v1.CommitmentPayload"},
		{[]string{"send", "--type", "Vote", "--session", "s", "--mode", "macp.mode.decision.v1", "--payload-json", `{"vote":1}`}, "not a valid macp.modes.decision.v1.VotePayload"},
		{[]string{"send", "--type", "Thing", "--session", "s", "--mode", "x.custom", "--payload-json", `{}`}, "use --payload-b64"},
		{[]string{"send", "--type", "Vote", "--session", "s", "--payload-b64", "!!"}, "--payload-b64"},
		{[]string{"start", "--ttl", "0s"}, "--ttl must be positive"},
		{[]string{"watch", "everything"}, "watch sessions or watch signals"},
		{[]string{"watch", "sessions", "--count", "-1"}, "must not be negative"},
		{[]string{"list", "--agent", "a", "--token", "b"}, "pick one"},
		{[]string{"list", "--tls-ca", "/nonexistent"}, "--tls-ca"},
	} {
		res := r.run(tc.args...)
		if res.code != 2 || !strings.Contains(res.errOut, tc.msg) {
			t.Errorf("macpctl %v: exit %d, stderr %q; want 2 and %q", tc.args, res.code, res.errOut, tc.msg)
		}
	}
	res := runner{t, map[string]string{"MACP_AGENT": "a", "MACP_TOKEN": "b"}}.run("list")
	if res.code != 2 || !strings.Contains(res.errOut, "pick one") {
		t.Errorf("both env identities: %+v", res)
	}

	res = r.ok("help")
	for _, c := range []string{"init", "start", "send", "get", "list", "cancel", "watch", "modes", "manifest"} {
		if !strings.Contains(res.out, "\n  "+c+" ") {
			t.Errorf("help does not list %s:\n%s", c, res.out)
		}
	}
	res = r.ok("help", "send")
	if !strings.Contains(res.out, "-payload-json") || !strings.Contains(res.out, "-addr") {
		t.Errorf("help send:\n%s", res.out)
	}
	r.ok("start", "-h")
}

func TestTLSCA(t *testing.T) {
	certPath, keyPath := writeCert(t)
	a := startApp(t, func(cfg *config.Config) { cfg.TLSCertPath, cfg.TLSKeyPath = certPath, keyPath })
	r := runner{t, nil}
	res := r.ok("init", "--addr", a.Addr(), "--tls-ca", certPath)
	wantField(t, obj(t, res.out), "1.0", "selected_protocol_version")
	res = r.ok("list", "--addr", a.Addr(), "--tls-ca", certPath, "--agent", "coord")
	if got := field(obj(t, res.out), "sessions").([]any); len(got) != 0 {
		t.Fatalf("list: %s", res.out)
	}
	// The system roots do not trust the test certificate.
	res = r.run("init", "--addr", a.Addr(), "--timeout", "2s")
	if res.code != 1 || !strings.HasPrefix(res.errOut, "error: UNAVAILABLE: ") {
		t.Fatalf("untrusted: %+v", res)
	}
	// MACP_ALLOW_INSECURE implies plaintext unless --tls-ca is given.
	res = runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1"}}.ok("init", "--addr", a.Addr(), "--tls-ca", certPath)
	wantField(t, obj(t, res.out), "1.0", "selected_protocol_version")
}

func writeCert(t *testing.T) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "macpd-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}
