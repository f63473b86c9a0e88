package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/macpd/macpd/internal/app"
)

// Clients no one here wrote: curl, Python's websockets, headless Chromium's
// own EventSource and WebSocket. CI installs them (.ci/run); elsewhere a
// missing tool skips its test with a message, under CI=true it fails.
func requireTool(t *testing.T, name string, check ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("outside-client test: make test-all (runs without -short)")
	}
	path, err := exec.LookPath(name)
	if err == nil && len(check) > 0 {
		err = exec.Command(path, check...).Run()
	}
	if err != nil {
		msg := fmt.Sprintf("%s is required for this test (Debian: see .ci/run): %v", name, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg + " (skipped outside CI)")
	}
	return path
}

// checkStream verifies envelopes as JSON (proto3 JSON, payload base64)
// with their sequence numbers against storage: 1..n in order, byte-equal.
func checkStream(t *testing.T, e *env, sid, via string, seqs []uint64, envs [][]byte) {
	t.Helper()
	stored := e.stored(t, sid)
	if len(seqs) != len(stored) {
		t.Fatalf("%s: %d envelopes, storage has %d", via, len(seqs), len(stored))
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("%s: envelope %d has seq %d", via, i, seq)
		}
		if !bytes.Equal(wireBytes(t, decodeEnvelopeJSON(t, envs[i])), stored[seq]) {
			t.Fatalf("%s: seq %d differs from storage: %s", via, seq, envs[i])
		}
	}
}

// curl: the JSON API, and curl -N on the SSE feed resuming with
// Last-Event-ID; the terminal session replays and the stream ends.
func TestOutsideCurl(t *testing.T) {
	curl := requireTool(t, "curl", "--version")
	e := startApp(t, testConfig())
	sid := uuid.NewString()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(curl, append([]string{"-sS", "--max-time", "20"}, args...)...).Output()
		if err != nil {
			t.Fatalf("curl %v: %v %s", args, err, out)
		}
		return string(out)
	}
	out := run("-H", "Authorization: Bearer coord", "-H", "Content-Type: application/json", "-d", startJSON(sid, "coord", "alice"), e.base+"/macp/session/start")
	if !strings.Contains(out, `"ok":true`) {
		t.Fatalf("curl start: %s", out)
	}
	for i := range 3 {
		out = run("-H", "Authorization: Bearer coord", "-H", "Content-Type: application/json", "-d", proposalJSON(sid, fmt.Sprint("c", i), fmt.Sprint("p", i)), e.base+"/macp/envelope")
		if !strings.Contains(out, `"ok":true`) {
			t.Fatalf("curl send: %s", out)
		}
	}
	out = run("-H", "Authorization: Bearer alice", "-w", "%{http_code}", e.base+"/macp/session/"+sid+"/cancel", "-H", "Content-Type: application/json", "-d", `{"reason":"x"}`)
	if !strings.HasSuffix(out, "403") || !strings.Contains(out, `"code":"FORBIDDEN"`) {
		t.Fatalf("curl forbidden cancel: %s", out)
	}
	run("-H", "Authorization: Bearer coord", "-H", "Content-Type: application/json", "-d", `{"reason":"done"}`, e.base+"/macp/session/"+sid+"/cancel")
	out = run("-N", "-H", "Authorization: Bearer alice", "-H", "Last-Event-ID: 2", e.base+"/macp/session/"+sid+"/events")
	var seqs []uint64
	var envs [][]byte
	var ids []string
	for _, block := range strings.Split(out, "\n\n") {
		var id, data, event string
		for _, l := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(l, "id: "):
				id = l[4:]
			case strings.HasPrefix(l, "data: "):
				data = l[6:]
			case strings.HasPrefix(l, "event: "):
				event = l[7:]
			}
		}
		if id != "" && event == "" {
			ids = append(ids, id)
			var n uint64
			fmt.Sscan(id, &n)
			seqs = append(seqs, n)
			envs = append(envs, []byte(data))
		}
	}
	if strings.Join(ids, ",") != "3,4,5" || !strings.Contains(out, "event: end") || !strings.HasPrefix(out, "retry: ") {
		t.Fatalf("curl -N with Last-Event-ID 2: ids %v\n%s", ids, out)
	}
	stored := e.stored(t, sid)
	for i, s := range seqs {
		if !bytes.Equal(wireBytes(t, decodeEnvelopeJSON(t, envs[i])), stored[s]) {
			t.Fatalf("seq %d differs from storage", s)
		}
	}
	code := run("-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer alice", "-H", "Last-Event-ID: 5", e.base+"/macp/session/"+sid+"/events")
	if code != "204" {
		t.Fatalf("reconnect to the ended session: %s", code)
	}
}

// Python websockets (another ecosystem's WebSocket client): subscribe,
// send, receive every envelope in order byte-equal to storage, the end
// notification, and the 4401 close code without credentials.
func TestOutsidePythonWebsockets(t *testing.T) {
	py := requireTool(t, "/usr/bin/python3", "-c", "import websockets")
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, "m1", "p1"))
	cmd := exec.Command(py, "testdata/ws_client.py", "ws://"+e.a.HTTPAddr()+"/macp/ws", "alice", sid, "0")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// End the session once the client's own envelope is in.
	deadline := time.Now().Add(20 * time.Second)
	for len(e.stored(t, sid)) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	e.mustAck(t, "/macp/session/"+sid+"/cancel", "coord", `{"reason":"done"}`)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ws_client.py: %v\n%s\n%s", err, out.String(), errOut.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("ws_client.py did not finish:\n%s\n%s", out.String(), errOut.String())
	}
	var seqs []uint64
	var envs [][]byte
	acked, closed := false, false
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m struct {
			ID     int             `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Params struct {
				SessionEventID uint64          `json:"sessionEventId"`
				Envelope       json.RawMessage `json:"envelope"`
			} `json:"params"`
			CloseCode int `json:"close_code"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		switch {
		case m.Method == "notifications/macp/envelope":
			seqs = append(seqs, m.Params.SessionEventID)
			envs = append(envs, m.Params.Envelope)
		case m.ID == 2:
			var ack struct {
				Ok bool `json:"ok"`
			}
			acked = json.Unmarshal(m.Result, &ack) == nil && ack.Ok // the result is the Ack
		case m.CloseCode != 0:
			closed = m.CloseCode == 4401
		}
	}
	if !acked || !closed {
		t.Fatalf("ack %v, close 4401 %v:\n%s", acked, closed, out.String())
	}
	checkStream(t, e, sid, "python websockets", seqs, envs)
}

// Headless Chromium runs a page that uses the browser's own EventSource
// and WebSocket, authenticated by single-use tickets, while the session
// is live and then ends; both feeds deliver every envelope in order,
// byte-equal to storage, and a bad ticket closes the WebSocket with 4401.
func TestOutsideChromium(t *testing.T) {
	chrome := requireTool(t, "chromium", "--version")
	cfg := testConfig()
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("testdata/browser.html")
	if err != nil {
		t.Fatal(err)
	}
	// The test page, same origin, mounted like any extra route.
	a.HTTP().Handle("GET /test/browser.html", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	}))
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	e := &env{a: a, base: "http://" + a.HTTPAddr()}
	sid := e.startSession(t, "coord", "alice")
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, "b1", "p1"))

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(e.base+"/test/browser.html")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`run("alice", %q); true`, sid))); err != nil {
		t.Fatal(err)
	}
	// Live traffic while the page follows, then the end.
	time.Sleep(300 * time.Millisecond)
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, "b2", "p2"))
	e.mustAck(t, "/macp/session/"+sid+"/cancel", "coord", `{"reason":"done"}`)
	var result struct {
		SSE []struct {
			ID   string          `json:"id"`
			Data json.RawMessage `json:"data"`
		} `json:"sse"`
		WS []struct {
			Method string `json:"method"`
			Params struct {
				SessionEventID uint64          `json:"sessionEventId"`
				Envelope       json.RawMessage `json:"envelope"`
			} `json:"params"`
		} `json:"ws"`
		Errors   []string `json:"errors"`
		BadClose struct {
			Code   int    `json:"code"`
			Reason string `json:"reason"`
		} `json:"badClose"`
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`window.done === true`, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("page did not finish: %v", err)
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](`JSON.stringify(window.result)`))
	if err != nil {
		t.Fatal(err)
	}
	var js string
	if err := json.Unmarshal(raw, &js); err != nil {
		js = string(raw)
	}
	if err := json.Unmarshal([]byte(js), &result); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	var seqs []uint64
	var envs [][]byte
	for _, ev := range result.SSE {
		var n uint64
		fmt.Sscan(ev.ID, &n)
		seqs = append(seqs, n)
		envs = append(envs, ev.Data)
	}
	checkStream(t, e, sid, "chromium EventSource", seqs, envs)
	seqs, envs = nil, nil
	for _, m := range result.WS {
		if m.Method == "notifications/macp/envelope" {
			seqs = append(seqs, m.Params.SessionEventID)
			envs = append(envs, m.Params.Envelope)
		}
	}
	checkStream(t, e, sid, "chromium WebSocket", seqs, envs)
	if result.BadClose.Code != 4401 || !strings.HasPrefix(result.BadClose.Reason, "UNAUTHENTICATED") {
		t.Fatalf("bad ticket close %+v", result.BadClose)
	}
}
