package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/httpapi"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Issue 33: macp/send requests on one WebSocket connection are admitted
// as they arrive, without waiting for earlier answers, up to
// WSSendWindow outstanding; acceptance order within a session is the
// order of arrival, every request gets exactly one answer carrying its
// id, and errors in the middle of a pipelined burst touch only their own
// request.
func TestWebSocketPipelinedSends(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	sid2 := e.startSession(t, "coord", "alice")
	c := e.dialWS(t, "coord")
	defer c.CloseNow()

	const n = 300
	badJSON, dup, other := 50, 100, 150 // a bad envelope, a duplicate proposal_id, another session
	go func() {
		for i := range n {
			var msg string
			switch i {
			case badJSON:
				msg = `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"macp/send","params":{"envelope":{"macp_version":"1.0","sesion":"x"}}}`
			case dup:
				msg = `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"macp/send","params":{"envelope":` + proposalJSON(sid, "dup", "p-1") + `}}`
			case other:
				msg = `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"macp/send","params":{"envelope":` + proposalJSON(sid2, "o-1", "o-1") + `}}`
			default:
				id := fmt.Sprintf("p-%d", i)
				msg = `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"macp/send","params":{"envelope":` + proposalJSON(sid, id, id) + `}}`
			}
			if err := c.Write(context.Background(), websocket.MessageText, []byte(msg)); err != nil {
				return
			}
		}
	}()
	seen := make(map[int]bool)
	for len(seen) < n {
		m, err := wsRead(c)
		if err != nil {
			t.Fatal(err)
		}
		id, err := strconv.Atoi(string(m.ID))
		if err != nil || id < 0 || id >= n || seen[id] {
			t.Fatalf("answer with id %s (seen %v): %+v", m.ID, seen[id], m)
		}
		seen[id] = true
		switch id {
		case badJSON:
			if m.Error == nil || m.Error.Code != -32602 {
				t.Fatalf("bad envelope: %+v", m)
			}
			continue
		}
		ack := &macpv1.Ack{}
		if m.Error != nil || protojson.Unmarshal(m.Result, ack) != nil {
			t.Fatalf("request %d: %+v", id, m)
		}
		if want := id != dup; ack.Ok != want {
			t.Fatalf("request %d: ok=%v, want %v: %s", id, ack.Ok, want, m.Result)
		}
		if id == dup && !strings.Contains(string(m.Result), "INVALID_ENVELOPE") {
			t.Fatalf("duplicate proposal: %s", m.Result)
		}
	}
	// Acceptance order within the session is the order of arrival.
	hist := e.stored(t, sid)
	if len(hist) != 1+n-3 {
		t.Fatalf("session has %d records, want %d", len(hist), 1+n-3)
	}
	next := 0
	for seq := uint64(2); seq <= uint64(len(hist)); seq++ {
		for next == badJSON || next == dup || next == other {
			next++
		}
		env := &macpv1.Envelope{}
		if err := proto.Unmarshal(hist[seq], env); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("p-%d", next); env.GetMessageId() != want {
			t.Fatalf("record %d is %s, want %s", seq, env.GetMessageId(), want)
		}
		next++
	}
	if got := len(e.stored(t, sid2)); got != 2 {
		t.Fatalf("other session has %d records, want 2", got)
	}
	if peak := httpapi.WSPeakOutstanding(); peak > httpapi.WSSendWindow || peak < 1 {
		t.Fatalf("peak outstanding %d, window %d", peak, httpapi.WSSendWindow)
	} else {
		t.Logf("peak outstanding macp/send on one connection: %d (window %d)", peak, httpapi.WSSendWindow)
	}
}

// Other methods are answered while earlier macp/send requests are still
// outstanding, and a request that is a notification (no id) is admitted
// without an answer.
func TestWebSocketPipelinedMixed(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	c := e.dialWS(t, "coord")
	defer c.CloseNow()
	note, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "macp/send", "params": map[string]any{"envelope": json.RawMessage(proposalJSON(sid, "n-1", "n-1"))}})
	if err := c.Write(context.Background(), websocket.MessageText, note); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := wsCall(c, i, "macp/send", map[string]any{"envelope": json.RawMessage(proposalJSON(sid, fmt.Sprintf("m-%d", i), fmt.Sprintf("m-%d", i)))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wsCall(c, 99, "session/get", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 11 {
		m, err := wsRead(c)
		if err != nil {
			t.Fatal(err)
		}
		if m.Error != nil || len(m.ID) == 0 {
			t.Fatalf("%+v", m)
		}
		got[string(m.ID)] = true
	}
	if n := len(e.stored(t, sid)); n != 12 {
		t.Fatalf("history has %d records, want 12", n)
	}
}
