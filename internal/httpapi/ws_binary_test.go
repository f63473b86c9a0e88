package httpapi_test

import (
	"context"
	"encoding/binary"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/httpapi"
	"google.golang.org/protobuf/proto"
)

func (e *env) dialWSProto(t testing.TB, agent string) *websocket.Conn {
	t.Helper()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+agent)
	c, _, err := websocket.Dial(context.Background(), "ws://"+e.a.HTTPAddr()+"/macp/ws", &websocket.DialOptions{HTTPHeader: hdr, Subprotocols: []string{httpapi.WSSubprotocolProto}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != httpapi.WSSubprotocolProto {
		t.Fatalf("negotiated %q", c.Subprotocol())
	}
	c.SetReadLimit(8 << 20)
	return c
}

func sendFrame(id uint64, body []byte) []byte {
	f := make([]byte, 9, 9+len(body))
	f[0] = 0x01
	binary.BigEndian.PutUint64(f[1:], id)
	return append(f, body...)
}

func proposalProto(t testing.TB, sid, msgID string) []byte {
	p, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: msgID, Option: "o"})
	b, err := proto.Marshal(&macpv1.Envelope{MacpVersion: "1.0", Mode: decisionMode, MessageType: "Proposal", MessageId: msgID,
		SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: p})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readFrame reads one message: a binary frame (kind, id, body) or text.
func readFrame(t testing.TB, c *websocket.Conn) (kind byte, id uint64, body []byte, text []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if typ == websocket.MessageText {
		return 0, 0, nil, b
	}
	if len(b) < 9 {
		t.Fatalf("short frame %x", b)
	}
	return b[0], binary.BigEndian.Uint64(b[1:9]), b[9:], nil
}

// Issue 33: the macp.v1+proto subprotocol carries macp/send as protobuf
// send frames answered by ack frames, pipelined like JSON macp/send;
// subscriptions deliver envelope frames with the sessionEventId; bad
// frames get error frames and the connection stays open.
func TestWebSocketBinarySubprotocol(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	c := e.dialWSProto(t, "coord")
	defer c.CloseNow()
	ctx := context.Background()
	// JSON-RPC text still works on a binary connection.
	if err := wsCall(c, 1, "macp/subscribe", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, text := readFrame(t, c); !strings.Contains(string(text), `"resumeAfter":0`) {
		t.Fatalf("subscribe response %s", text)
	}
	if kind, seq, body, _ := readFrame(t, c); kind != 0x03 || seq != 1 {
		t.Fatalf("first envelope frame: kind %x seq %d", kind, seq)
	} else {
		env := &macpv1.Envelope{}
		if err := proto.Unmarshal(body, env); err != nil || env.GetMessageType() != "SessionStart" || env.GetSessionId() != sid {
			t.Fatalf("envelope frame body %v %v", env, err)
		}
	}
	const n = 100
	for i := range n {
		if err := c.Write(ctx, websocket.MessageBinary, sendFrame(uint64(1000+i), proposalProto(t, sid, "b-"+string(rune('A'+i%26))+strings.Repeat("x", i/26)))); err != nil {
			t.Fatal(err)
		}
	}
	acks, next := 0, uint64(2)
	for acks < n || next < 2+n {
		kind, id, body, text := readFrame(t, c)
		switch kind {
		case 0x02:
			ack := &macpv1.Ack{}
			if err := proto.Unmarshal(body, ack); err != nil || !ack.Ok || id != uint64(1000+acks) {
				t.Fatalf("ack %d for id %d: %v %v", acks, id, ack, err)
			}
			acks++
		case 0x03:
			if id != next {
				t.Fatalf("envelope frame %d, want %d", id, next)
			}
			next++
		default:
			t.Fatalf("unexpected kind %x %s", kind, text)
		}
	}
	// Bad frames: error frames with the id, the connection stays open.
	for _, tc := range []struct {
		frame []byte
		id    uint64
		want  string
	}{
		{[]byte{0x01, 0x00}, 0, "at least 9 bytes"},
		{append([]byte{0x02}, make([]byte, 8)...), 0, "kind 0x02"},
		{sendFrame(7, []byte{0xff, 0xff, 0xff}), 7, "not a protobuf"},
	} {
		if err := c.Write(ctx, websocket.MessageBinary, tc.frame); err != nil {
			t.Fatal(err)
		}
		kind, id, body, _ := readFrame(t, c)
		me := &macpv1.MACPError{}
		if kind != 0x04 || id != tc.id || proto.Unmarshal(body, me) != nil || me.Code != "INVALID_ENVELOPE" || !strings.Contains(me.Message, tc.want) {
			t.Fatalf("frame %x: kind %x id %d %v", tc.frame, kind, id, me)
		}
	}
	// A rejected envelope is an ack with ok=false.
	if err := c.Write(ctx, websocket.MessageBinary, sendFrame(9, proposalProto(t, "no-such-session", "z1"))); err != nil {
		t.Fatal(err)
	}
	if kind, id, body, _ := readFrame(t, c); kind != 0x02 || id != 9 {
		t.Fatalf("kind %x id %d", kind, id)
	} else if ack := (&macpv1.Ack{}); proto.Unmarshal(body, ack) != nil || ack.Ok || ack.GetError().GetCode() == "" {
		t.Fatalf("ack %v", ack)
	}
	if got := len(e.stored(t, sid)); got != 1+n {
		t.Fatalf("history %d, want %d", got, 1+n)
	}
	// An oversize frame closes the connection with 1009.
	big := sendFrame(10, make([]byte, 4<<20))
	_ = c.Write(ctx, websocket.MessageBinary, big)
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, _, err := c.Read(rctx)
		cancel()
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
				t.Fatalf("oversize frame: %v", err)
			}
			break
		}
	}
}

// An unknown subprotocol is refused at the upgrade with 400 and a
// MACPError; a binary message on a JSON connection closes it with 1003.
func TestWebSocketSubprotocolRefused(t *testing.T) {
	e := startApp(t, testConfig())
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer coord")
	_, resp, err := websocket.Dial(context.Background(), "ws://"+e.a.HTTPAddr()+"/macp/ws", &websocket.DialOptions{HTTPHeader: hdr, Subprotocols: []string{"mqtt"}})
	if err == nil || resp == nil || resp.StatusCode != 400 {
		t.Fatalf("unknown subprotocol: %v %v", resp, err)
	}
	c := e.dialWS(t, "coord")
	defer c.CloseNow()
	_ = c.Write(context.Background(), websocket.MessageBinary, sendFrame(1, nil))
	_, _, err = c.Read(context.Background())
	if websocket.CloseStatus(err) != websocket.StatusUnsupportedData || !strings.Contains(err.Error(), httpapi.WSSubprotocolProto) {
		t.Fatalf("binary on a JSON connection: %v", err)
	}
}
