package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
)

// chromiumPath finds Debian's chromium; CI installs it (.ci/run), so there
// a missing browser fails the test, elsewhere it is skipped with a message.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: make test-all (runs without -short)")
	}
	p, err := exec.LookPath("chromium")
	if err == nil {
		err = exec.Command(p, "--version").Run()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is required for the console test (Debian package chromium, see .ci/run): %v", err)
		}
		t.Skipf("chromium not available (%v); skipped outside CI", err)
	}
	return p
}

// cutter is a TCP relay between the browser and macpd whose open
// connections the test can cut, as a network drop would.
type cutter struct {
	lis   net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newCutter(t *testing.T, target string) *cutter {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{lis: lis, conns: make(map[net.Conn]bool)}
	t.Cleanup(func() { lis.Close(); c.cut() })
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns[in], c.conns[out] = true, true
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return c
}

// cut closes every relayed connection and reports how many there were.
func (c *cutter) cut() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.conns)
	for k := range c.conns {
		k.Close()
		delete(c.conns, k)
	}
	return n
}

func as(agent string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+agent)
}

// The console in headless Chromium against a real macpd in development
// mode, opened as the dev identity "coord" (RFC-MACP-0006 §4 HTTP
// binding; RFC-MACP-0007 Decision mode; RFC-MACP-0004 authorization):
//   - a Decision session started and resolved over gRPC appears in the
//     open list and reaches RESOLVED there and in the session view
//     without a reload;
//   - the transcript shows every accepted envelope, in order, once, even
//     though the test cuts the browser's connections in the middle;
//   - a session coord may not observe is neither listed nor readable;
//   - the session link and the snapshot button work from the keyboard;
//   - screenshots of the main pages at 1280x800 are written to
//     $MACP_CONSOLE_SCREENSHOTS (or a temporary directory).
//
// It runs once per profile (issue 31): a cancelled session is EXPIRED
// under 2026-04 and CANCELLED under latest, in the list and the view.
func TestConsoleInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	for _, profile := range []string{coord.ProfileApril, coord.ProfileLatest} {
		t.Run(profile, func(t *testing.T) { consoleInChromium(t, chrome, profile) })
	}
}

func consoleInChromium(t *testing.T, chrome, profile string) {
	cancelled := "EXPIRED" // what a cancellation ends as under profile
	if coord.IsLatest(profile) {
		cancelled = "CANCELLED"
	}
	cfg := config.Default()
	cfg.Profile = profile
	cfg.MemoryOnly = true
	cfg.BindAddr, cfg.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.AllowInsecure = true
	cfg.Limits.SessionStartsPerMinute, cfg.Limits.MessagesPerMinute = 0, 0
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rpc := macpv1.NewMACPRuntimeServiceClient(conn)
	relay := newCutter(t, a.HTTPAddr())
	base := "http://" + relay.lis.Addr().String()
	shots := os.Getenv("MACP_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if coord.IsLatest(profile) {
		shots = filepath.Join(shots, "latest")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	var sent []string // message ids of the watched session, in order
	send := func(agent, sid, typ, mid string, p proto.Message) *macpv1.Ack {
		t.Helper()
		b, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := rpc.Send(as(agent), &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1",
			MessageType: typ, MessageId: mid, SessionId: sid, Sender: agent, TimestampUnixMs: time.Now().UnixMilli(), Payload: b}})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Ack.Ok {
			t.Fatalf("%s %s: %v", typ, mid, r.Ack)
		}
		return r.Ack
	}
	start := func(agent, sid string, participants ...string) {
		t.Helper()
		send(agent, sid, "SessionStart", "start-"+sid[:8], &macpv1.SessionStartPayload{Intent: "pick a vendor", Participants: participants,
			ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 600000})
	}

	// A session coord is not part of: it must stay invisible.
	hidden := uuid.NewString()
	start("eve", hidden, "mallory")

	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800))
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	run := func(what string, acts ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, acts...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	wait := func(what, expr string) {
		t.Helper()
		run("waiting for "+what+" ("+expr+")", chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
	}
	// eval evaluates expr and decodes its JSON value into out (nil: none).
	eval := func(expr string, out any) {
		t.Helper()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage]("JSON.stringify(("+expr+") ?? null)"))
		if err != nil {
			t.Fatalf("evaluating %s: %v", expr, err)
		}
		var js string
		if err := json.Unmarshal(raw, &js); err != nil {
			js = string(raw)
		}
		if out != nil {
			if err := json.Unmarshal([]byte(js), out); err != nil {
				t.Fatalf("evaluating %s: %s: %v", expr, js, err)
			}
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// issue 28: opened without ?agent= in development mode, the console
	// says how to pick an identity instead of a bare UNAUTHENTICATED.
	run("open the console without an identity", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(base+"/console/"))
	wait("the ?agent= hint", `document.getElementById("whoami").textContent.includes("/console/?agent=ID") && `+
		`document.getElementById("error").textContent.includes("UNAUTHENTICATED") && document.getElementById("error").textContent.includes("?agent=ID")`)

	run("open the console", chromedp.Navigate(base+"/console/?agent=coord"))
	eval(`window.__sameDocument = true`, nil)
	wait("the identity", `document.getElementById("whoami").textContent === "Signed in as coord"`)
	wait("the dev banner", `!document.getElementById("dev-banner").hidden`)
	// The list has been read and the lifecycle feed is open before the
	// session starts, so the session can only appear through the feed.
	wait("the lifecycle feed", `window.macpConsole.listConnects === 1`)

	sid := uuid.NewString()
	start("coord", sid, "coord", "alice", "bob")
	sent = append(sent, "start-"+sid[:8])
	row := fmt.Sprintf(`document.querySelector('#sessions tr[data-sid=%q]')`, sid)
	wait("the new session in the list", row+`?.dataset.state === "OPEN"`)
	var seesHidden bool
	eval(fmt.Sprintf(`window.macpConsole.sessions.some(s => s.session_id === %q) || !!document.querySelector('tr[data-sid=%q]')`, hidden, hidden), &seesHidden)
	if seesHidden {
		t.Fatal("coord's console lists eve's session")
	}
	shot("sessions.png")

	// Open the session from the list with the keyboard: focus its link, Enter.
	run("open the session", chromedp.Focus(fmt.Sprintf(`#sessions tr[data-sid=%q] a`, sid)), chromedp.KeyEvent("\r"))
	wait("the transcript's first envelope", `window.macpConsole.lastSeq === 1 && window.macpConsole.feedConnects === 1`)
	send("coord", sid, "Proposal", "m-prop", &decisionv1.ProposalPayload{ProposalId: "p1", Option: "vendor A", Rationale: "cheapest"})
	send("alice", sid, "Evaluation", "m-eval", &decisionv1.EvaluationPayload{ProposalId: "p1", Recommendation: "APPROVE", Confidence: 0.8, Reason: "fits"})
	sent = append(sent, "m-prop", "m-eval")
	wait("three envelopes", `window.macpConsole.lastSeq === 3`)

	// The network drops: every connection of the page is cut, and more
	// envelopes are accepted while the page is disconnected.
	if n := relay.cut(); n == 0 {
		t.Fatal("no connection to cut")
	}
	send("alice", sid, "Vote", "m-vote-a", &decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE", Reason: "ok"})
	send("bob", sid, "Vote", "m-vote-b", &decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE"})
	sent = append(sent, "m-vote-a", "m-vote-b")
	wait("the resumed feed", `window.macpConsole.lastSeq === 5 && window.macpConsole.feedConnects >= 2`)

	ack := send("coord", sid, "Commitment", "m-commit", &macpv1.CommitmentPayload{CommitmentId: "c1", Action: "decision.selected",
		AuthorityScope: "procurement", Reason: "approved by all", ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", OutcomePositive: true})
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("commitment: %v", ack)
	}
	sent = append(sent, "m-commit")
	wait("RESOLVED in the session view", `document.getElementById("page-session").dataset.state === "RESOLVED" && window.macpConsole.lastSeq === 6`)
	wait("the commitment in the trail", `!!document.getElementById("trail-commitment")`)
	// The trail tallies each kind of answer apart (an Evaluation is not a
	// vote).
	var tally string
	eval(`document.querySelector('.trail-item[data-subject="p1"] .tally')?.textContent ?? ""`, &tally)
	if want := "Evaluations: APPROVE 1 · Votes: APPROVE 2"; tally != want {
		t.Fatalf("decision trail tally %q, want %q", tally, want)
	}

	var got struct {
		Rows []struct {
			Seq int    `json:"seq"`
			ID  string `json:"id"`
		} `json:"rows"`
		Gaps, Duplicates, Connects int
		DOM                        []string
	}
	eval(`({rows: window.macpConsole.rows, Gaps: window.macpConsole.gaps, Duplicates: window.macpConsole.duplicates,
		Connects: window.macpConsole.feedConnects,
		DOM: [...document.querySelectorAll("#transcript tbody tr")].map(r => r.dataset.seq + " " + r.children[3].textContent)})`, &got)
	if got.Gaps != 0 || got.Duplicates != 0 || len(got.Rows) != len(sent) || len(got.DOM) != len(sent) {
		t.Fatalf("transcript: %d rows (want %d), %d gaps, %d duplicates: %+v", len(got.Rows), len(sent), got.Gaps, got.Duplicates, got)
	}
	for i, r := range got.Rows {
		if r.Seq != i+1 || r.ID != sent[i] || got.DOM[i] != fmt.Sprint(i+1, " ", sent[i]) {
			t.Fatalf("transcript row %d: seq %d id %q dom %q, want seq %d id %q", i, r.Seq, r.ID, got.DOM[i], i+1, sent[i])
		}
	}
	t.Logf("transcript: %d envelopes in order over %d feed connections, 0 gaps, 0 duplicates", len(got.Rows), got.Connects)

	run("compute the snapshot", chromedp.Focus("#snap"), chromedp.KeyEvent("\r"))
	wait("the snapshot id and download link", `!!document.getElementById("snap-download") && document.getElementById("snap-out").textContent.includes("sha256:")`)
	shot("session.png")

	eval(`location.hash = "#/"`, nil)
	wait("RESOLVED in the list", row+`?.dataset.state === "RESOLVED"`)
	// And a change while the list is open arrives live: a second session,
	// cancelled.
	sid2 := uuid.NewString()
	start("coord", sid2, "alice")
	row2 := fmt.Sprintf(`document.querySelector('#sessions tr[data-sid=%q]')`, sid2)
	wait("the second session", row2+`?.dataset.state === "OPEN"`)
	if _, err := rpc.CancelSession(as("coord"), &macpv1.CancelSessionRequest{SessionId: sid2, Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	wait(cancelled+" in the list (a cancelled session under "+profile+")", row2+`?.dataset.state === "`+cancelled+`"`)
	// The state filter knows every state: the cancelled session alone.
	run("filter "+cancelled, chromedp.SetValue("#f-state", "SESSION_STATE_"+cancelled))
	eval(`document.getElementById("f-state").dispatchEvent(new Event("input"))`, nil)
	wait("the "+cancelled+" filter", `[...document.querySelectorAll("#sessions tbody tr[data-sid]")].map(r => r.dataset.sid).join() === `+fmt.Sprintf("%q", sid2))
	run("clear the filter", chromedp.SetValue("#f-state", ""))
	eval(`document.getElementById("f-state").dispatchEvent(new Event("input"))`, nil)
	var same bool
	eval(`window.__sameDocument === true`, &same)
	if !same {
		t.Fatal("the page was reloaded")
	}

	// issue 31: suspend, resume and cancel from the browser. coord starts
	// a session, opens it and uses the initiator's buttons; the state, the
	// buttons and the transcript (the runtime's SessionSuspend /
	// SessionResume / SessionCancel records) follow without a reload.
	sid3 := uuid.NewString()
	start("coord", sid3, "alice")
	eval(fmt.Sprintf(`location.hash = "#/session/" + %q`, sid3), nil)
	state := `document.getElementById("page-session").dataset.state`
	shown := func(id string) string { return `!document.getElementById("` + id + `").hidden` }
	wait("the initiator's controls", state+` === "OPEN" && `+shown("s-controls")+` && `+shown("act-suspend")+` && !`+shown("act-resume")+` && `+shown("act-cancel"))
	wait("the bound profile", `document.querySelector('#s-meta dd[data-key="Profile"]')?.textContent === `+fmt.Sprintf("%q", profile))
	click := func(id string) { t.Helper(); run("press "+id, chromedp.Focus("#"+id), chromedp.KeyEvent("\r")) }
	click("act-suspend")
	wait("SUSPENDED in the session view", state+` === "SUSPENDED" && `+shown("act-resume")+` && !`+shown("act-suspend")+` && window.macpConsole.rows.some(r => r.type === "SessionSuspend")`+
		` && document.querySelector('#s-meta dd[data-key="Profile"]')?.textContent === `+fmt.Sprintf("%q", profile))
	md, err := rpc.GetSession(as("alice"), &macpv1.GetSessionRequest{SessionId: sid3})
	if err != nil || md.Metadata.State != macpv1.SessionState_SESSION_STATE_SUSPENDED {
		t.Fatalf("after the browser's suspend: %v %v", md, err)
	}
	wait("the suspended feed status", `document.getElementById("feed-status").textContent.startsWith("Suspended after seq 2")`)
	// A suspended session's feed stays open (it is not over).
	var feedDone bool
	eval(`window.macpConsole.feedDone`, &feedDone)
	if feedDone {
		t.Fatal("the feed of a SUSPENDED session ended")
	}
	shot("suspended.png")
	eval(`location.hash = "#/"`, nil)
	row3 := fmt.Sprintf(`document.querySelector('#sessions tr[data-sid=%q]')`, sid3)
	wait("SUSPENDED in the list", row3+`?.dataset.state === "SUSPENDED"`)
	run("filter SUSPENDED", chromedp.SetValue("#f-state", "SESSION_STATE_SUSPENDED"))
	eval(`document.getElementById("f-state").dispatchEvent(new Event("input"))`, nil)
	wait("the filter", `[...document.querySelectorAll("#sessions tbody tr[data-sid]")].map(r => r.dataset.sid).join() === `+fmt.Sprintf("%q", sid3))
	run("clear the filter", chromedp.SetValue("#f-state", ""))
	eval(`document.getElementById("f-state").dispatchEvent(new Event("input"))`, nil)
	eval(fmt.Sprintf(`location.hash = "#/session/" + %q`, sid3), nil)
	wait("the resume button", state+` === "SUSPENDED" && `+shown("act-resume"))
	click("act-resume")
	wait("OPEN again", state+` === "OPEN" && `+shown("act-suspend")+` && window.macpConsole.rows.some(r => r.type === "SessionResume")`)
	click("act-cancel")
	wait(cancelled+" after the browser's cancel", state+` === "`+cancelled+`" && `+`document.getElementById("s-controls").hidden && window.macpConsole.feedDone`)
	var types []string
	eval(`window.macpConsole.rows.map(r => r.type)`, &types)
	if strings.Join(types, ",") != "SessionStart,SessionSuspend,SessionResume,SessionCancel" {
		t.Fatalf("transcript of the controlled session: %v", types)
	}
	// Not the initiator: no buttons (the runtime would refuse FORBIDDEN).
	sid4 := uuid.NewString()
	start("alice", sid4, "coord")
	eval(fmt.Sprintf(`location.hash = "#/session/" + %q`, sid4), nil)
	wait("a participant's view", state+` === "OPEN" && window.macpConsole.meta?.session_id === `+fmt.Sprintf("%q", sid4))
	var ctlHidden bool
	eval(`document.getElementById("s-controls").hidden`, &ctlHidden)
	if !ctlHidden {
		t.Fatal("controls shown to a participant who is not the initiator")
	}
	// A Commitment that supersedes sid's links to it, with its hash.
	sid5 := uuid.NewString()
	start("coord", sid5, "coord", "alice", "bob")
	send("coord", sid5, "Proposal", "m5-prop", &decisionv1.ProposalPayload{ProposalId: "p5", Option: "vendor B"})
	send("alice", sid5, "Vote", "m5-vote-a", &decisionv1.VotePayload{ProposalId: "p5", Vote: "APPROVE"})
	send("bob", sid5, "Vote", "m5-vote-b", &decisionv1.VotePayload{ProposalId: "p5", Vote: "APPROVE"})
	prior := &macpv1.CommitmentPayload{CommitmentId: "c1", Action: "decision.selected",
		AuthorityScope: "procurement", Reason: "approved by all", ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", OutcomePositive: true}
	hash, err := cmthash.Hash(prior)
	if err != nil {
		t.Fatal(err)
	}
	send("coord", sid5, "Commitment", "m5-commit", &macpv1.CommitmentPayload{CommitmentId: "c5", Action: "decision.selected",
		AuthorityScope: "procurement", Reason: "vendor A withdrew", ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", OutcomePositive: true,
		Supersedes: &macpv1.CommitmentRef{SessionId: sid, CommitmentHash: hash}})
	eval(fmt.Sprintf(`location.hash = "#/session/" + %q`, sid5), nil)
	wait("the supersession link", `document.getElementById("trail-supersedes")?.getAttribute("href") === `+fmt.Sprintf("%q", "#/session/"+sid)+
		` && document.getElementById("trail-commitment").textContent.includes(`+fmt.Sprintf("%q", hash)+`)`)
	shot("supersedes.png")
	run("follow the supersession link", chromedp.Focus("#trail-supersedes"), chromedp.KeyEvent("\r"))
	wait("the superseded session", state+` === "RESOLVED" && window.macpConsole.sid === `+fmt.Sprintf("%q", sid)+
		` && document.querySelector('#s-meta dd[data-key="Commitment hash"]')?.textContent === `+fmt.Sprintf("%q", hash))

	eval(`location.hash = "#/modes"`, nil)
	wait("the modes", `document.querySelectorAll("#modes tbody tr").length >= 5 && document.querySelectorAll("#policies tbody tr").length >= 1`)
	shot("modes.png")
	eval(`location.hash = "#/health"`, nil)
	wait("the health page", `document.getElementById("health").textContent.includes("reachable") && document.querySelectorAll("#counts tbody tr").length === 5`)
	shot("health.png")

	// Reading eve's session directly is refused and shows nothing of it.
	eval(fmt.Sprintf(`location.hash = "#/session/" + %q`, hidden), nil)
	wait("the refusal", `!document.getElementById("error").hidden`)
	var refused struct {
		Error string
		Rows  int
		State string
	}
	eval(`({Error: document.getElementById("error").textContent, Rows: window.macpConsole.rows.length,
		State: document.getElementById("page-session").dataset.state})`, &refused)
	if refused.Rows != 0 || !(strings.Contains(refused.Error, "FORBIDDEN") || strings.Contains(refused.Error, "NOT_FOUND") || strings.Contains(refused.Error, "SESSION_NOT_FOUND")) {
		t.Fatalf("eve's session as coord: %+v", refused)
	}
	t.Logf("screenshots in %s", shots)
}
