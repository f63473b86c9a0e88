package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// readLifecycle reads the next "lifecycle" event of an SSE body.
func readLifecycle(t *testing.T, br *bufio.Reader) (typ, sid, state string) {
	t.Helper()
	name := ""
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("lifecycle feed: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && name == "lifecycle":
			var ev struct {
				EventType string `json:"event_type"`
				Session   struct {
					SessionID string `json:"session_id"`
					State     string `json:"state"`
				} `json:"session"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("lifecycle event %s: %v", line, err)
			}
			return ev.EventType, ev.Session.SessionID, ev.Session.State
		case strings.HasPrefix(line, "data: "):
			t.Fatalf("unexpected event %q: %s", name, line)
		}
	}
}

func openLifecycle(t *testing.T, e *env, agent string) *bufio.Reader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/macp/sessions/events", nil)
	req.Header.Set("Authorization", "Bearer "+agent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("lifecycle feed: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return bufio.NewReader(resp.Body)
}

// GET /macp/sessions/events is WatchSessions over SSE (RFC-MACP-0006 §4;
// authorization as RFC-MACP-0004 §3 session visibility): the sync reports
// the open sessions the caller may observe, then live events follow; a
// session the caller may not observe never appears; without credentials
// the feed is refused.
func TestLifecycleFeed(t *testing.T) {
	e := startApp(t, testConfig())
	before := e.startSession(t, "alice")
	alice := openLifecycle(t, e, "alice")
	if typ, sid, st := readLifecycle(t, alice); typ != "EVENT_TYPE_CREATED" || sid != before || st != "SESSION_STATE_OPEN" {
		t.Fatalf("sync: %s %s %s", typ, sid, st)
	}
	bob := openLifecycle(t, e, "bob")
	hidden := e.startSession(t, "carol") // neither alice nor bob may observe it
	live := e.startSession(t, "alice", "bob")
	e.mustAck(t, "/macp/session/"+live+"/cancel", "coord", `{"reason":"done"}`)
	// The spec has no CANCELLED event type: a cancelled session is EXPIRED, its state says CANCELLED.
	// The feed coalesces like WatchSessions (internal/runtime/watch.go): a
	// reader that had not taken the CREATED yet when the session ended is
	// told only the EXPIRED, so CREATED is optional, EXPIRED is not.
	for name, br := range map[string]*bufio.Reader{"alice": alice, "bob": bob} {
		typ, sid, _ := readLifecycle(t, br)
		if sid == hidden {
			t.Fatalf("%s sees %s's session", name, "carol")
		}
		if typ == "EVENT_TYPE_CREATED" && sid == live {
			typ, sid, _ = readLifecycle(t, br)
		}
		if typ != "EVENT_TYPE_EXPIRED" || sid != live {
			t.Fatalf("%s: got %s %s, want EVENT_TYPE_EXPIRED %s (after an optional CREATED)", name, typ, sid, live)
		}
	}
	if code, body := e.do(t, "GET", "/macp/sessions/events", "", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d %s", code, body)
	}
}
