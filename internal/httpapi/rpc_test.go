package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// hstream is a protocol-mode client over HTTP: POST /macp/rpc for
// requests, GET /macp/rpc/stream for notifications.
type hstream struct {
	t      testing.TB
	e      *env
	agent  string
	key    string
	resp   *http.Response
	rd     *bufio.Reader
	cancel context.CancelFunc
	id     int
	ids    eventIDs // every session-scoped notification's sessionEventId
}

func (e *env) hdial(t testing.TB, agent string) *hstream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/macp/rpc/stream", nil)
	req.Header.Set("Authorization", "Bearer "+agent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		cancel()
		t.Fatalf("stream: %v %v", resp, err)
	}
	h := &hstream{t: t, e: e, agent: agent, resp: resp, rd: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(h.close)
	typ, data := h.event()
	var first struct {
		StreamID string `json:"streamId"`
	}
	if typ != "stream" || json.Unmarshal([]byte(data), &first) != nil || first.StreamID == "" {
		t.Fatalf("first event %s %s", typ, data)
	}
	h.key = first.StreamID
	return h
}

func (h *hstream) close() { h.cancel(); h.resp.Body.Close() }

func (h *hstream) event() (typ, data string) {
	h.t.Helper()
	for {
		line, err := h.rd.ReadString('\n')
		if err != nil {
			h.t.Fatal(err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && typ != "":
			return typ, data
		case strings.HasPrefix(line, "event: "):
			typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
}

func (h *hstream) call(method string, params any, hdr ...string) (int, *rpcMsg) {
	h.t.Helper()
	h.id++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": h.id, "method": method, "params": params})
	code, body := h.e.do(h.t, "POST", "/macp/rpc", h.agent, "application/json", b, append([]string{"X-MACP-RPC-Stream", h.key}, hdr...)...)
	m := &rpcMsg{}
	_ = json.Unmarshal(body, m)
	return code, m
}

func (h *hstream) notif() *rpcMsg {
	h.t.Helper()
	typ, data := h.event()
	m := &rpcMsg{}
	if typ != "message" || json.Unmarshal([]byte(data), m) != nil || m.Method == "" {
		h.t.Fatalf("stream event %s %s", typ, data)
	}
	h.ids.note(h.t, m)
	return m
}

func (h *hstream) nextEnvelope() uint64 {
	h.t.Helper()
	seq, _ := h.nextEnvelopeBytes()
	return seq
}

func (h *hstream) nextEnvelopeBytes() (uint64, []byte) {
	h.t.Helper()
	for {
		m := h.notif()
		if m.Method == "notifications/macp/envelope" {
			n := params(h.t, m)
			env := &macpv1.Envelope{}
			if err := protojson.Unmarshal(n.Envelope, env); err != nil {
				h.t.Fatal(err)
			}
			return uint64(n.SessionEventID), wireBytes(h.t, env)
		}
		if m.Method != "notifications/macp/session" {
			h.t.Fatalf("unexpected %s %s", m.Method, m.Params)
		}
	}
}

// Protocol mode over HTTP; cross-transport resume and the single active
// attachment across WebSocket and HTTP; mixed modes refused.
func TestProtocolOverHTTP(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice", "bob")
	for i := range 4 {
		e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), fmt.Sprint("p", i)))
	}
	// A cursor from a WebSocket attachment resumes over HTTP.
	ws := e.pdial(t, "alice")
	ws.resume(sid, 0)
	var cut uint64
	for range 2 {
		cut, _ = ws.nextEnvelope(sid)
	}
	h := e.hdial(t, "alice")
	code, m := h.call("session/resume", map[string]any{"sessionId": sid, "lastSessionEventId": cut})
	if code != 200 || m.Error != nil || !bytes.Contains(m.Result, []byte(`"catchup":true`)) {
		t.Fatalf("resume over HTTP: %d %+v %s", code, m.Error, m.Result)
	}
	for want := cut + 1; want <= 5; want++ {
		if got := h.nextEnvelope(); got != want {
			t.Fatalf("HTTP stream seq %d, want %d", got, want)
		}
	}
	// The WebSocket attachment of the same caller was superseded.
	for {
		n := ws.notif()
		if n.Method == "notifications/macp/detached" {
			break
		}
		if n.Method != "notifications/macp/envelope" && n.Method != "notifications/macp/session" {
			t.Fatalf("superseded WebSocket got %s", n.Method)
		}
	}
	// And back: HTTP's cursor resumes on WebSocket, superseding HTTP.
	ws2 := e.pdial(t, "alice")
	if r := ws2.resume(sid, 5); !r.Catchup {
		t.Fatal("catchup false")
	}
	for {
		n := h.notif()
		if n.Method == "notifications/macp/detached" {
			break
		}
	}
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), "x"))
	if seq, _ := ws2.nextEnvelope(sid); seq != 6 {
		t.Fatalf("seq %d", seq)
	}
	// Mixed modes: Last-Event-ID on a protocol-mode request.
	if code, _ := h.call("session/resume", map[string]any{"sessionId": sid}, "Last-Event-ID", "3"); code != 400 {
		t.Fatalf("session/resume with Last-Event-ID: %d", code)
	}
	// Without a stream nothing can attach; session/get and unknown methods work.
	code, body := e.do(t, "POST", "/macp/rpc", "alice", "application/json", []byte(`{"jsonrpc":"2.0","id":1,"method":"session/resume","params":{"sessionId":"`+sid+`"}}`))
	if code != 200 || !bytes.Contains(body, []byte(`-32600`)) {
		t.Fatalf("resume without a stream: %d %s", code, body)
	}
	code, body = e.do(t, "POST", "/macp/rpc", "alice", "application/json", []byte(`{"jsonrpc":"2.0","id":1,"method":"nope"}`))
	if code != 200 || !bytes.Contains(body, []byte(`-32601`)) {
		t.Fatalf("unknown method: %d %s", code, body)
	}
	code, body = e.do(t, "POST", "/macp/rpc", "alice", "application/json", []byte(`{"jsonrpc":"2.0","id":1,"method":"session/get","params":{"sessionId":"`+sid+`"}}`))
	if code != 200 || !bytes.Contains(body, []byte(`"sessionEventId":6`)) {
		t.Fatalf("session/get: %d %s", code, body)
	}
	// Another caller's stream name is refused.
	code, _ = e.do(t, "POST", "/macp/rpc", "bob", "application/json", []byte(`{"jsonrpc":"2.0","id":1,"method":"session/get","params":{"sessionId":"`+sid+`"}}`), "X-MACP-RPC-Stream", h.key)
	if code != 400 {
		t.Fatalf("foreign stream: %d", code)
	}
}
