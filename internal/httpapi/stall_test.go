package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A client that stops reading an SSE feed holds nothing for long: once a
// write waits MACP_HTTP_WRITE_TIMEOUT_MS the feed is cut and its session
// slot released (here the session's only slot: a new feed gets it).
func TestStalledSSEClientIsCut(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.MaxStreamsPerSession = 1
	cfg.HTTP.WriteTimeout = 200 * time.Millisecond
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice")
	conn, err := net.Dial("tcp", e.a.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	fmt.Fprintf(conn, "GET /macp/session/%s/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer alice\r\n\r\n", sid) // a Host the listener serves (dev mode)
	// The slot is taken: a second feed is refused.
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := e.do(t, "GET", "/sessions/"+sid+"/events?after=0", "alice", "", nil) // polling takes no slot
		if code != 200 {
			t.Fatalf("poll: %d", code)
		}
		if probe(t, e, sid) == 429 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled feed never took the session's slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Fill the socket buffers: large envelopes the client never reads.
	big := strings.Repeat("r", 60<<10)
	for i := 0; ; i++ {
		js := fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Proposal","message_id":"big%d","session_id":%q,"payload":{"proposal_id":"p%d","option":"o","rationale":%q}}`,
			decisionMode, i, sid, i, big)
		e.mustAck(t, "/macp/envelope", "coord", js)
		if i >= 400 {
			break
		}
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		if code := probe(t, e, sid); code != 429 {
			break // the slot was released (the probe itself streams live from the end)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled SSE client still holds its slot")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probe opens an SSE feed and returns its status, closing it at once.
func probe(t *testing.T, e *env, sid string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/macp/session/"+sid+"/events", nil)
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Last-Event-ID", "999999")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Streams per identity are bounded on the HTTP listener too: beyond
// MACP_MAX_STREAMS_PER_IDENTITY an SSE feed is 429 RATE_LIMITED and a
// WebSocket is closed with 4429; closing one frees a slot.
func TestStreamsPerIdentityBounded(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.MaxStreamsPerIdentity = 2
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice")
	f1 := e.openSSE(t, "alice", sid, 0, nil)
	c := e.dialWS(t, "alice")
	if err := wsCall(c, 1, "macp/subscribe", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	if m, err := wsRead(c); err != nil || m.Error != nil {
		t.Fatalf("second stream: %+v %v", m, err)
	}
	if code := probe(t, e, sid); code != 429 {
		t.Fatalf("third stream (SSE): %d, want 429", code)
	}
	c3 := e.dialWS(t, "alice")
	_, _, err := c3.Read(context.Background())
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4429 || !strings.HasPrefix(ce.Reason, "RATE_LIMITED") {
		t.Fatalf("third stream (WebSocket): %v, want close 4429", err)
	}
	f1.close()
	deadline := time.Now().Add(10 * time.Second)
	for probe(t, e, sid) == 429 {
		if time.Now().After(deadline) {
			t.Fatal("closing a feed did not free its slot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = c.CloseNow()
}
