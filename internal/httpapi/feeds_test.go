package httpapi_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// A feed is one follower of a session on one transport: it yields the
// session's envelopes with their sequence numbers.
type feed interface {
	next() (uint64, *macpv1.Envelope, error) // io.EOF: the session ended
	close()
}

var transports = []string{"grpc", "sse", "ws", "poll"}

func (e *env) open(t testing.TB, transport, agent, sid string, after uint64) feed {
	t.Helper()
	switch transport {
	case "grpc":
		return e.openGRPC(t, agent, sid, after)
	case "sse":
		return e.openSSE(t, agent, sid, after, nil)
	case "ws":
		return e.openWS(t, agent, sid, after)
	case "poll":
		return &pollFeed{e: e, t: t, agent: agent, sid: sid, after: after}
	}
	t.Fatalf("unknown transport %s", transport)
	return nil
}

// gRPC: the Go SDK's passive subscription (StreamSession).
type grpcFeed struct {
	sub *sdk.Subscription
}

// sdkClient is a Go SDK client for agent, one per env and agent.
func (e *env) sdkClient(t testing.TB, agent string) *sdk.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cl, ok := e.clients[agent]; ok {
		return cl
	}
	cl, err := sdk.Dial(context.Background(), e.a.Addr(), sdk.WithInsecure(), sdk.WithBearer(agent))
	if err != nil {
		t.Fatal(err)
	}
	if e.clients == nil {
		e.clients = map[string]*sdk.Client{}
	}
	e.clients[agent] = cl
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (e *env) openGRPC(t testing.TB, agent, sid string, after uint64) *grpcFeed {
	return &grpcFeed{sub: e.sdkClient(t, agent).Subscribe(context.Background(), sid, after, sdk.WithMaxReconnects(1))}
}

func (f *grpcFeed) next() (uint64, *macpv1.Envelope, error) {
	ev, err := f.sub.Next()
	if err != nil {
		return 0, nil, err
	}
	return ev.Seq, ev.Envelope, nil
}

func (f *grpcFeed) close() { f.sub.Close() }

// SSE over net/http.
type sseFeed struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
	header http.Header
	events []string // event types seen ("" = message), for tests
}

func (e *env) openSSE(t testing.TB, agent, sid string, after uint64, hdr http.Header) *sseFeed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := fmt.Sprintf("%s/macp/session/%s/events?after_sequence=%d", e.base, sid, after)
	if _, ok := hdr["Last-Event-Id"]; ok {
		u = fmt.Sprintf("%s/macp/session/%s/events", e.base, sid)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+agent)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("SSE: %d %s", resp.StatusCode, b)
	}
	return &sseFeed{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel, header: resp.Header}
}

// event reads one SSE event (comments and retry lines skipped).
func (f *sseFeed) event() (id, typ, data string, err error) {
	for {
		line, err := f.r.ReadString('\n')
		if err != nil {
			return "", "", "", err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if data != "" || typ != "" {
				f.events = append(f.events, typ)
				return id, typ, data, nil
			}
		case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry:"):
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		default:
			return "", "", "", fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

func (f *sseFeed) next() (uint64, *macpv1.Envelope, error) {
	id, typ, data, err := f.event()
	if err != nil {
		return 0, nil, err
	}
	switch typ {
	case "end":
		return 0, nil, io.EOF
	case "":
	default:
		return 0, nil, fmt.Errorf("SSE event %s: %s", typ, data)
	}
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0, nil, err
	}
	env := &macpv1.Envelope{}
	if err := protojson.Unmarshal([]byte(data), env); err != nil {
		return 0, nil, err
	}
	return seq, env, nil
}

func (f *sseFeed) close() { f.cancel(); f.resp.Body.Close() }

// WebSocket JSON-RPC, with coder/websocket as the client.
type wsFeed struct {
	c      *websocket.Conn
	sid    string
	result json.RawMessage
}

type rpcMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (e *env) dialWS(t testing.TB, agent string) *websocket.Conn {
	t.Helper()
	hdr := http.Header{}
	if agent != "" {
		hdr.Set("Authorization", "Bearer "+agent)
	}
	c, _, err := websocket.Dial(context.Background(), "ws://"+e.a.HTTPAddr()+"/macp/ws", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(8 << 20)
	return c
}

func wsCall(c *websocket.Conn, id int, method string, params any) error {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return c.Write(context.Background(), websocket.MessageText, b)
}

func wsRead(c *websocket.Conn) (*rpcMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ == websocket.MessageBinary {
		return envelopeFrameNotification(b)
	}
	m := &rpcMsg{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%s: %v", b, err)
	}
	return m, nil
}

// framesSeen counts the envelope frames wsRead decoded (the resume trials
// check that the binary path was exercised).
var framesSeen atomic.Int64

// envelopeFrameNotification reads an envelope frame of a macp.v1+proto
// connection (ws_binary.go: kind 0x03, the sessionEventId, the Envelope)
// as the notifications/macp/envelope a JSON connection gets, so that the
// resume checks read both alike. Any other binary message is an error.
func envelopeFrameNotification(b []byte) (*rpcMsg, error) {
	if len(b) < 9 || b[0] != 0x03 {
		return nil, fmt.Errorf("unexpected binary message %x", b[:min(len(b), 16)])
	}
	framesSeen.Add(1)
	env := &macpv1.Envelope{}
	if err := proto.Unmarshal(b[9:], env); err != nil {
		return nil, fmt.Errorf("envelope frame: %v", err)
	}
	ej, err := protojson.Marshal(env)
	if err != nil {
		return nil, err
	}
	params, _ := json.Marshal(map[string]any{"sessionId": env.SessionId, "sessionEventId": binary.BigEndian.Uint64(b[1:9]), "envelope": json.RawMessage(ej)})
	return &rpcMsg{JSONRPC: "2.0", Method: "notifications/macp/envelope", Params: params}, nil
}

func (e *env) openWS(t testing.TB, agent, sid string, after uint64) *wsFeed {
	t.Helper()
	c := e.dialWS(t, agent)
	if err := wsCall(c, 1, "macp/subscribe", map[string]any{"sessionId": sid, "afterSequence": after}); err != nil {
		t.Fatal(err)
	}
	m, err := wsRead(c)
	if err != nil || m.Error != nil || m.Result == nil {
		t.Fatalf("subscribe: %+v %v", m, err)
	}
	return &wsFeed{c: c, sid: sid, result: m.Result}
}

func (f *wsFeed) next() (uint64, *macpv1.Envelope, error) {
	m, err := wsRead(f.c)
	if err != nil {
		return 0, nil, err
	}
	switch m.Method {
	case "notifications/macp/end":
		return 0, nil, io.EOF
	case "notifications/macp/envelope":
	default:
		return 0, nil, fmt.Errorf("unexpected message %+v", m)
	}
	var p struct {
		SessionID      string          `json:"sessionId"`
		SessionEventID uint64          `json:"sessionEventId"`
		Envelope       json.RawMessage `json:"envelope"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || p.SessionID != f.sid {
		return 0, nil, fmt.Errorf("notification %s: %v", m.Params, err)
	}
	env := &macpv1.Envelope{}
	if err := protojson.Unmarshal(p.Envelope, env); err != nil {
		return 0, nil, err
	}
	return p.SessionEventID, env, nil
}

func (f *wsFeed) close() { _ = f.c.CloseNow() }

// The polling compatibility route, driven like HttpTransportAdapter
// (?after=N, then the largest seq seen), with the payload_b64... the
// canonical view carries decoded payloads, so the envelope is rebuilt
// from the stored form by sequence number for byte checks: the feed
// returns the canonical fields re-encoded through wire.
type pollFeed struct {
	e     *env
	t     testing.TB
	agent string
	sid   string
	after uint64
	buf   []pollEntry
}

type pollEntry struct {
	Seq         uint64          `json:"seq"`
	MacpVersion string          `json:"macp_version"`
	Mode        string          `json:"mode"`
	MessageType string          `json:"message_type"`
	MessageID   string          `json:"message_id"`
	SessionID   string          `json:"session_id"`
	Sender      string          `json:"sender"`
	Timestamp   string          `json:"timestamp"`
	Payload     json.RawMessage `json:"payload"`
	PayloadB64  *string         `json:"payload_b64"`
	ProposalID  string          `json:"proposal_id"`
}

func (f *pollFeed) next() (uint64, *macpv1.Envelope, error) {
	for tries := 0; len(f.buf) == 0; tries++ {
		if tries > 3000 {
			return 0, nil, errors.New("poll: nothing new for 30 s")
		}
		code, b := f.e.do(f.t, "GET", fmt.Sprintf("/sessions/%s/events?after=%d&limit=16", f.sid, f.after), f.agent, "", nil)
		if code != 200 {
			return 0, nil, fmt.Errorf("poll: %d %s", code, b)
		}
		if err := json.Unmarshal(b, &f.buf); err != nil {
			return 0, nil, err
		}
		if len(f.buf) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	it := f.buf[0]
	f.buf = f.buf[1:]
	f.after = it.Seq
	// Rebuild the envelope from the canonical form (decoded payload).
	js, _ := json.Marshal(it)
	env, cerr := decodeCanonical(js)
	if cerr != nil {
		return 0, nil, cerr
	}
	return it.Seq, env, nil
}

func (f *pollFeed) close() {}
