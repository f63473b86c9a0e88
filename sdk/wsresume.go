package sdk

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ResumeEventKind tells what a [ResumeEvent] carries.
type ResumeEventKind int

const (
	// KindEnvelope: an accepted envelope (Seq, Envelope).
	KindEnvelope ResumeEventKind = iota + 1
	// KindSession: the session's latest metadata (coalesced; Metadata).
	KindSession
	// KindCatchupLost: a resume answered catchup: false. The envelopes
	// after the previous Seq up to this event's Seq were not replayed
	// (they were outside the runtime's replay window); rehydrate, e.g.
	// with Client.GetSession, and continue: the next envelope is Seq+1.
	KindCatchupLost
)

// ResumeEvent is one item of a [ResumeStream].
type ResumeEvent struct {
	Kind     ResumeEventKind
	Seq      uint64 // the sessionEventId
	Envelope *macpv1.Envelope
	Metadata *macpv1.SessionMetadata
}

// ErrSuperseded is returned by [ResumeStream.Next] when the same caller
// attached to the session on another connection (one active attachment
// per caller and session); the stream does not reconnect.
// ErrSuperseded ends a follow for good: the same caller attached to the
// session elsewhere (session/resume or session/start), which makes that
// connection the only active one. DialResume and Subscribe return it (Subscribe
// wrapped, with the runtime's message) and do not reconnect.
var ErrSuperseded = errors.New("macp: superseded by another attachment of the same caller")

// ResumeStream follows one session in protocol mode (session/resume over
// the WebSocket endpoint /macp/ws, docs/resume.md "Protocol mode"). After
// a disconnect it reconnects with backoff and resumes from the last
// sessionEventId it returned, so the application sees one gap-free
// sequence of envelopes; when the runtime answers catchup: false it says
// so with a [KindCatchupLost] event instead of hiding the gap. Next must
// not be called concurrently; Last and Close may be called from anywhere.
type ResumeStream struct {
	url, token, sid string
	hc              *http.Client
	o               subscribeOptions
	ctx             context.Context
	cancel          context.CancelFunc

	conn       *websocket.Conn
	last       atomic.Uint64
	reconnects atomic.Int64
	failures   int
	lastErr    error
	queued     *ResumeEvent
}

// ResumeOption configures [DialResume].
type ResumeOption func(*ResumeStream)

// WithResumeHTTPClient sets the HTTP client used for the WebSocket
// handshake (TLS settings, dialer).
func WithResumeHTTPClient(hc *http.Client) ResumeOption { return func(s *ResumeStream) { s.hc = hc } }

// WithResumeSubscribeOptions applies the reconnect settings of
// [Client.Subscribe] (WithReconnectBackoff, WithMaxReconnects,
// WithReconnectHook).
func WithResumeSubscribeOptions(opts ...SubscribeOption) ResumeOption {
	return func(s *ResumeStream) {
		for _, o := range opts {
			o(&s.o)
		}
	}
}

// DialResume follows session sessionID at wsURL (ws://host:port/macp/ws)
// as the bearer token's identity, from after lastSessionEventID (0: from
// the SessionStart). It connects lazily, on the first Next.
func DialResume(ctx context.Context, wsURL, token, sessionID string, lastSessionEventID uint64, opts ...ResumeOption) *ResumeStream {
	ctx, cancel := context.WithCancel(ctx)
	s := &ResumeStream{url: wsURL, token: token, sid: sessionID, ctx: ctx, cancel: cancel,
		o: subscribeOptions{base: 100 * time.Millisecond, max: 5 * time.Second}}
	s.last.Store(lastSessionEventID)
	for _, o := range opts {
		o(s)
	}
	return s
}

// Last is the sessionEventId of the last envelope returned (or the
// resume point of a KindCatchupLost event).
func (s *ResumeStream) Last() uint64 { return s.last.Load() }

// Reconnects counts the resumes after the first attachment.
func (s *ResumeStream) Reconnects() int { return int(s.reconnects.Load()) }

// Close ends the stream.
func (s *ResumeStream) Close() {
	s.cancel()
	if s.conn != nil {
		_ = s.conn.CloseNow()
	}
}

type rpcFrame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (f *rpcFrame) err() error {
	if len(f.Error.Data) > 0 {
		me := &macpv1.MACPError{}
		if protojson.Unmarshal(f.Error.Data, me) == nil && me.Code != "" {
			return fromMACPError(me, nil)
		}
	}
	return fmt.Errorf("macp: JSON-RPC error %d: %s", f.Error.Code, f.Error.Message)
}

// call sends one JSON-RPC request on c and reads its answer. A failed
// write or read closes c and is retried (retry); an answer that is not the
// one asked for closes c and is final.
func (s *ResumeStream) call(c *websocket.Conn, id int, method string, params map[string]any) (f rpcFrame, final error, retry error) {
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := c.Write(s.ctx, websocket.MessageText, req); err != nil {
		_ = c.CloseNow()
		return f, nil, err
	}
	_, b, err := c.Read(s.ctx)
	if err != nil {
		_ = c.CloseNow()
		return f, nil, err
	}
	if err := json.Unmarshal(b, &f); err != nil || string(f.ID) != strconv.Itoa(id) {
		_ = c.CloseNow()
		return f, fmt.Errorf("macp: unexpected answer to %s: %s", method, b), nil
	}
	return f, nil, nil
}

// readRest subscribes c in transport mode (macp/subscribe) after the
// cursor, for a session that ended: Next then delivers its remaining
// envelopes and the end.
func (s *ResumeStream) readRest(c *websocket.Conn) (final error, retry error) {
	f, final, retry := s.call(c, 2, "macp/subscribe", map[string]any{"sessionId": s.sid, "afterSequence": s.last.Load()})
	if final != nil || retry != nil {
		return final, retry
	}
	if f.Error != nil {
		_ = c.CloseNow()
		return f.err(), nil
	}
	s.conn = c
	return nil, nil
}

// connect opens a connection and resumes; a refusal (a MACP error) is
// final, anything else is retried by Next.
func (s *ResumeStream) connect() (final error, retry error) {
	hdr := http.Header{}
	if s.token != "" {
		hdr.Set("Authorization", "Bearer "+s.token)
	}
	// Offer the binary subprotocol (docs/resume.md "Pipelining, binary
	// frames and batched catch-up"): a macpd that speaks it delivers each
	// envelope as a protobuf frame; one that does not answers without a
	// subprotocol and JSON notifications follow, handled alike.
	c, _, err := websocket.Dial(s.ctx, s.url, &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: s.hc, Subprotocols: []string{wsSubprotocolProto}})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(8 << 20)
	f, final, retry := s.call(c, 1, "session/resume", map[string]any{"sessionId": s.sid, "lastSessionEventId": s.last.Load()})
	if final != nil || retry != nil {
		return final, retry
	}
	if f.Error != nil {
		if err := f.err(); CodeOf(err) == CodeSessionNotOpen {
			// The session has ended (docs/resume.md "Ended sessions"): it
			// cannot be resumed, but what is left of its history after
			// the cursor is read in transport mode on this connection,
			// and then notifications/macp/end ends the stream (io.EOF).
			return s.readRest(c)
		}
		_ = c.CloseNow()
		return f.err(), nil
	}
	var r struct {
		Catchup        bool   `json:"catchup"`
		SessionEventID uint64 `json:"sessionEventId"`
	}
	if err := json.Unmarshal(f.Result, &r); err != nil {
		_ = c.CloseNow()
		return fmt.Errorf("macp: session/resume result %s: %v", f.Result, err), nil
	}
	if !r.Catchup {
		s.last.Store(r.SessionEventID)
		s.queued = &ResumeEvent{Kind: KindCatchupLost, Seq: r.SessionEventID}
	}
	s.conn = c
	return nil, nil
}

// Next returns the next event; io.EOF once the session has ended and
// everything was delivered. It reconnects by itself after transport
// failures (with backoff; WithMaxReconnects bounds the attempts).
func (s *ResumeStream) Next() (ResumeEvent, error) {
	for {
		if err := s.ctx.Err(); err != nil {
			return ResumeEvent{}, err
		}
		if s.conn == nil {
			if s.failures > 0 {
				if s.o.maxAttempts > 0 && s.failures > s.o.maxAttempts {
					return ResumeEvent{}, s.lastErr
				}
				if s.o.onReconnect != nil {
					s.o.onReconnect(s.failures, s.lastErr)
				}
				d := s.o.base << min(s.failures-1, 20)
				if d > s.o.max || d <= 0 {
					d = s.o.max
				}
				d = d/2 + rand.N(d/2+1)
				select {
				case <-time.After(d):
				case <-s.ctx.Done():
					return ResumeEvent{}, s.ctx.Err()
				}
			}
			final, retry := s.connect()
			if final != nil {
				return ResumeEvent{}, final
			}
			if retry != nil {
				s.failures++
				s.lastErr = retry
				continue
			}
			if s.lastErr != nil {
				s.reconnects.Add(1)
			}
			s.failures = 0
		}
		if q := s.queued; q != nil {
			s.queued = nil
			return *q, nil
		}
		typ, b, err := s.conn.Read(s.ctx)
		if err != nil {
			_ = s.conn.CloseNow()
			s.conn = nil
			s.failures = 1
			s.lastErr = err
			continue
		}
		if typ == websocket.MessageBinary {
			// An envelope frame: kind 0x03, the sessionEventId as a
			// big-endian uint64, then the protobuf Envelope.
			if len(b) < 9 || b[0] != frameEnvelope {
				continue // not for this stream
			}
			seq := binary.BigEndian.Uint64(b[1:9])
			env := &macpv1.Envelope{}
			if err := proto.Unmarshal(b[9:], env); err != nil {
				return ResumeEvent{}, fmt.Errorf("macp: envelope frame %d: %v", seq, err)
			}
			if env.GetSessionId() != s.sid || seq <= s.last.Load() {
				continue // not for this stream, or never twice
			}
			s.last.Store(seq)
			return ResumeEvent{Kind: KindEnvelope, Seq: seq, Envelope: env}, nil
		}
		var f rpcFrame
		if err := json.Unmarshal(b, &f); err != nil {
			return ResumeEvent{}, fmt.Errorf("macp: not JSON-RPC: %s", b)
		}
		var p struct {
			SessionID string `json:"sessionId"`
			// N for envelopes, N.5 for state notifications (the state
			// after envelope N); only envelopes move the cursor.
			SessionEventID eventID         `json:"sessionEventId"`
			Envelope       json.RawMessage `json:"envelope"`
			Metadata       json.RawMessage `json:"metadata"`
			Error          json.RawMessage `json:"error"`
		}
		if f.Method == "" || json.Unmarshal(f.Params, &p) != nil || p.SessionID != s.sid {
			continue // not for this stream
		}
		switch f.Method {
		case "notifications/macp/envelope":
			seq := uint64(p.SessionEventID)
			if seq <= s.last.Load() {
				continue // never twice
			}
			env := &macpv1.Envelope{}
			if err := protojson.Unmarshal(p.Envelope, env); err != nil {
				return ResumeEvent{}, fmt.Errorf("macp: envelope %d: %v", seq, err)
			}
			s.last.Store(seq)
			return ResumeEvent{Kind: KindEnvelope, Seq: seq, Envelope: env}, nil
		case "notifications/macp/session":
			md := &macpv1.SessionMetadata{}
			if err := protojson.Unmarshal(p.Metadata, md); err != nil {
				return ResumeEvent{}, fmt.Errorf("macp: session metadata: %v", err)
			}
			return ResumeEvent{Kind: KindSession, Seq: s.last.Load(), Metadata: md}, nil
		case "notifications/macp/end":
			s.Close()
			return ResumeEvent{}, io.EOF
		case "notifications/macp/detached":
			s.Close()
			return ResumeEvent{}, ErrSuperseded
		case "notifications/macp/error":
			me := &macpv1.MACPError{}
			if protojson.Unmarshal(p.Error, me) == nil && me.Code != "" {
				e := fromMACPError(me, nil)
				if !Code(me.Code).Retryable() {
					s.Close()
					return ResumeEvent{}, e
				}
				s.lastErr = e
			}
			_ = s.conn.CloseNow()
			s.conn = nil
			s.failures = 1
		}
	}
}

// wsSubprotocolProto is macpd's binary WebSocket subprotocol; frameEnvelope
// the kind of its envelope frames.
const (
	wsSubprotocolProto      = "macp.v1+proto"
	frameEnvelope      byte = 0x03
)

// eventID decodes a sessionEventId: N (an envelope) or N.5 (a state
// notification, the state after envelope N); it holds N.
type eventID uint64

func (e *eventID) UnmarshalJSON(b []byte) error {
	v := strings.Trim(string(b), `"`)
	n, err := strconv.ParseUint(strings.TrimSuffix(v, ".5"), 10, 64)
	if err != nil {
		return fmt.Errorf("sessionEventId %s: %v", b, err)
	}
	*e = eventID(n)
	return nil
}
