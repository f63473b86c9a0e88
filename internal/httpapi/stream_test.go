package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// RFC-MACP-0006 §4 SSE feed: id = sequence number, Last-Event-ID resumes
// exactly after it; stream headers; keep-alive comments; a terminal
// session replays everything, ends with an "end" event, and a reconnect
// with nothing left is 204 (EventSource stops reconnecting).
func TestSSEResumeAndEnd(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.KeepAlive = 100 * time.Millisecond
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice")
	for _, id := range []string{"a", "b", "c"} {
		e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, id, id))
	}
	f := e.openSSE(t, "alice", sid, 0, http.Header{"Last-Event-Id": {"2"}})
	for _, h := range []string{"X-Accel-Buffering", "Cache-Control"} {
		if f.header.Get(h) == "" {
			t.Fatalf("SSE header %s missing", h)
		}
	}
	if f.header.Get("Content-Type") != "text/event-stream" || f.header.Get("X-Macp-Resume-After") != "2" || f.header.Get("X-Macp-Session-Sequence") != "4" {
		t.Fatalf("headers %v", f.header)
	}
	seq, env, err := f.next()
	if err != nil || seq != 3 || env.MessageId != "b" {
		t.Fatalf("first after Last-Event-ID 2: %d %v %v", seq, env, err)
	}
	seq, _, err = f.next()
	if err != nil || seq != 4 {
		t.Fatalf("%d %v", seq, err)
	}
	// Idle: keep-alive comments arrive.
	line := ""
	for !strings.HasPrefix(line, ": keep-alive") {
		if line, err = f.r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	// Live, then the session ends: the cancel record, then "end".
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, "d", "d"))
	if seq, _, err = f.next(); err != nil || seq != 5 {
		t.Fatalf("live: %d %v", seq, err)
	}
	e.mustAck(t, "/macp/session/"+sid+"/cancel", "coord", `{"reason":"done"}`)
	if seq, env, err = f.next(); err != nil || seq != 6 || env.MessageType != "SessionCancel" {
		t.Fatalf("cancel record: %d %v %v", seq, env, err)
	}
	if _, _, err = f.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the terminal record: %v, want the end event", err)
	}
	f.close()
	// A terminal session replays everything and ends.
	f = e.openSSE(t, "alice", sid, 0, nil)
	n := 0
	for {
		_, _, err := f.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	f.close()
	if n != 6 {
		t.Fatalf("replayed %d envelopes, want 6", n)
	}
	if code, _ := e.do(t, "GET", "/macp/session/"+sid+"/events", "alice", "", nil, "Last-Event-ID", "6"); code != 204 {
		t.Fatalf("reconnect to an ended session with nothing left: %d, want 204", code)
	}
	// ?payload=json: decoded payloads.
	code, b := e.do(t, "GET", "/macp/session/"+sid+"/events?after_sequence=4&payload=json", "alice", "", nil)
	if code != 200 || !strings.Contains(string(b), `"payload":{"proposal_id":"d","option":"opt-d"}`) {
		t.Fatalf("payload=json: %d %s", code, b)
	}
}

// RFC-MACP-0006 §5: over one WebSocket a client sends envelopes and gets
// acks, subscribes and gets the session's envelopes in order as
// notifications after the subscribe response, and unsubscribes.
// Rejections are acks with ok=false, as on gRPC.
func TestWebSocketSendSubscribe(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	c := e.dialWS(t, "coord")
	defer c.CloseNow()
	if err := wsCall(c, 1, "macp/subscribe", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	m, err := wsRead(c)
	if err != nil || m.Error != nil || !strings.Contains(string(m.Result), `"resumeAfter":0`) {
		t.Fatalf("subscribe response: %+v %v", m, err)
	}
	if m, _ = wsRead(c); m.Method != "notifications/macp/envelope" || !strings.Contains(string(m.Params), `"sessionEventId":1`) {
		t.Fatalf("first notification %+v", m)
	}
	for i, id := range []string{"w1", "w2", "w3"} {
		var envJSON json.RawMessage = json.RawMessage(proposalJSON(sid, id, id))
		if err := wsCall(c, 10+i, "macp/send", map[string]any{"envelope": envJSON}); err != nil {
			t.Fatal(err)
		}
	}
	acks, notes := 0, 0
	for acks < 3 || notes < 3 {
		m, err := wsRead(c)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.Result != nil:
			// Issue #14: macp/send's result is the Ack itself (strict
			// decoding: a wrapper object would be an unknown field).
			ack := &macpv1.Ack{}
			if err := protojson.Unmarshal(m.Result, ack); err != nil || !ack.Ok {
				t.Fatalf("macp/send result is not an ok Ack: %s (%v)", m.Result, err)
			}
			acks++
		case m.Method == "notifications/macp/envelope":
			notes++
			if want := `"sessionEventId":` + string(rune('1'+notes)); !strings.Contains(string(m.Params), want) {
				t.Fatalf("notification %d out of order: %s", notes, m.Params)
			}
		}
	}
	// A rejected envelope: an ack with ok=false and the MACP code.
	bad, _ := json.Marshal(map[string]any{"envelope": json.RawMessage(proposalJSON(sid, "w1b", "w1"))}) // duplicate proposal_id
	_ = c.Write(context.Background(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":20,"method":"macp/send","params":`+string(bad)+`}`))
	if m, _ = wsRead(c); !strings.Contains(string(m.Result), `"ok":false`) || !strings.Contains(string(m.Result), "INVALID_ENVELOPE") {
		t.Fatalf("rejected send: %+v", m)
	}
	if err := wsCall(c, 30, "macp/unsubscribe", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	if m, _ = wsRead(c); m.Error != nil || !strings.Contains(string(m.Result), `"lastSequence":4`) {
		t.Fatalf("unsubscribe: %+v", m)
	}
	// Bad requests get JSON-RPC errors and the connection stays usable.
	for _, msg := range []string{`{"jsonrpc":`, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"macp/send\",\"params\":{\"envelope\":{\"x\":\"\xff\"}}}",
		`[{"jsonrpc":"2.0","id":1,"method":"macp/send"}]`, `{"jsonrpc":"2.0","id":2,"method":"nope"}`,
		`{"jsonrpc":"2.0","id":3,"method":"macp/send","params":{"envelope":{"macp_version":"1.0","sesion":"x"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"macp/subscribe","params":{"sessionId":"` + sid + `","afterSequence":-1}}`,
		`{"jsonrpc":"2.0","id":5,"method":"macp/subscribe","params":{"sessionId":"nope-session"}}`} {
		_ = c.Write(context.Background(), websocket.MessageText, []byte(msg))
		if m, err = wsRead(c); err != nil || m.Error == nil {
			t.Fatalf("%q: %+v %v", msg, m, err)
		}
	}
	if err := wsCall(c, 40, "macp/send", map[string]any{"envelope": json.RawMessage(proposalJSON(sid, "w4", "w4"))}); err != nil {
		t.Fatal(err)
	}
	if m, _ = wsRead(c); !strings.Contains(string(m.Result), `"ok":true`) {
		t.Fatalf("after bad requests: %+v", m)
	}
	if n := len(e.stored(t, sid)); n != 5 {
		t.Fatalf("history has %d records, want 5 (bad requests change nothing)", n)
	}
}

// Fatal WebSocket conditions close the connection with a code: bad
// credentials 4401 (UNAUTHENTICATED, after the upgrade, so browsers can
// read it), binary messages 1003, oversized messages 1009; browsers
// authenticate with a single-use ticket.
func TestWebSocketCloseCodes(t *testing.T) {
	cfg := testConfig()
	cfg.MaxPayloadBytes = 1024
	e := startApp(t, cfg)
	closeCode := func(c *websocket.Conn) (websocket.StatusCode, string) {
		_, _, err := c.Read(context.Background())
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("read: %v, want a close", err)
		}
		return ce.Code, ce.Reason
	}
	c := e.dialWS(t, "")
	if code, reason := closeCode(c); code != 4401 || !strings.HasPrefix(reason, "UNAUTHENTICATED") {
		t.Fatalf("no credentials: %d %q", code, reason)
	}
	c = e.dialWS(t, "coord")
	_ = c.Write(context.Background(), websocket.MessageBinary, []byte{1, 2, 3})
	if code, _ := closeCode(c); code != websocket.StatusUnsupportedData {
		t.Fatalf("binary: %d", code)
	}
	c = e.dialWS(t, "coord")
	_ = c.Write(context.Background(), websocket.MessageText, []byte(strings.Repeat(" ", 2*1024+65<<10)))
	if code, _ := closeCode(c); code != websocket.StatusMessageTooBig {
		t.Fatalf("oversized: %d", code)
	}
	// Ticket.
	code, b := e.do(t, "POST", "/macp/auth/ticket", "coord", "", nil)
	var tk struct{ Ticket string }
	if code != 200 || json.Unmarshal(b, &tk) != nil {
		t.Fatalf("ticket %d %s", code, b)
	}
	c, _, err := websocket.Dial(context.Background(), "ws://"+e.a.HTTPAddr()+"/macp/ws?ticket="+tk.Ticket, nil)
	if err != nil {
		t.Fatal(err)
	}
	sid := e.startSession(t, "coord")
	if err := wsCall(c, 1, "macp/subscribe", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	if m, err := wsRead(c); err != nil || m.Error != nil {
		t.Fatalf("subscribe with a ticket: %+v %v", m, err)
	}
	c.CloseNow()
	c, _, err = websocket.Dial(context.Background(), "ws://"+e.a.HTTPAddr()+"/macp/ws?ticket="+tk.Ticket, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := closeCode(c); code != 4401 {
		t.Fatalf("reused ticket: %d", code)
	}
	// A foreign origin is refused at the handshake.
	if _, resp, err := websocket.Dial(context.Background(), "ws://"+e.a.HTTPAddr()+"/macp/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}, "Authorization": {"Bearer coord"}}}); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("foreign origin: %v %v", resp, err)
	}
}
