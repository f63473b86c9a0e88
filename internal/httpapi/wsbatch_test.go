package httpapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Issue 33: a session/resume (or macp/subscribe) with "batch": true gets the missed envelopes
// in notifications/macp/envelopes when several are queued together, with
// every sessionEventId once, in order, mixed with single notifications;
// without it, only single notifications, as before.
func TestWebSocketResumeBatched(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	const k = 2000
	e.fill(t, sid, k)
	for _, tc := range []struct {
		method string
		batch  bool
	}{{"session/resume", true}, {"session/resume", false}, {"macp/subscribe", true}} {
		batch := tc.batch
		c := e.dialWS(t, "alice")
		params := map[string]any{"sessionId": sid, "lastSessionEventId": 1}
		if tc.method == "macp/subscribe" {
			params = map[string]any{"sessionId": sid, "afterSequence": 1}
		}
		if batch {
			params["batch"] = true
		}
		if err := wsCall(c, 1, tc.method, params); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // let the queue fill
		next, batches := uint64(2), 0
		for next <= k+1 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, b, err := c.Read(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			var m struct {
				Method string `json:"method"`
				Params struct {
					SessionID      string          `json:"sessionId"`
					SessionEventID json.Number     `json:"sessionEventId"`
					Envelope       json.RawMessage `json:"envelope"`
					Envelopes      []struct {
						SessionEventID uint64          `json:"sessionEventId"`
						Envelope       json.RawMessage `json:"envelope"`
					} `json:"envelopes"`
				} `json:"params"`
			}
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			switch m.Method {
			case "notifications/macp/envelope":
				if m.Params.SessionEventID.String() != json.Number(itoa(next)).String() {
					t.Fatalf("batch=%v: single %s, want %d", batch, m.Params.SessionEventID, next)
				}
				next++
			case "notifications/macp/envelopes":
				if !batch {
					t.Fatal("a batch without asking for one")
				}
				if m.Params.SessionID != sid || len(m.Params.Envelopes) < 2 {
					t.Fatalf("batch %s", b[:min(len(b), 300)])
				}
				batches++
				for _, it := range m.Params.Envelopes {
					if it.SessionEventID != next || decodeEnvelopeJSON(t, it.Envelope).GetSessionId() != sid {
						t.Fatalf("batch item %d, want %d", it.SessionEventID, next)
					}
					next++
				}
			}
		}
		if batch && batches == 0 {
			t.Fatal("no batch formed with 2,000 envelopes queued")
		}
		t.Logf("%s batch=%v: %d batches", tc.method, batch, batches)
		_ = c.Close(websocket.StatusNormalClosure, "")
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }
