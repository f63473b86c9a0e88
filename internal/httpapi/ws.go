package httpapi

import (
	"context"
	"encoding/json"
	"net/url"
	"sync"
	"sync/atomic"

	"net/http"

	"github.com/coder/websocket"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/jsonrpc"
	"github.com/macpd/macpd/internal/wire"
)

// WebSocket binding (RFC-MACP-0006 §5) at /macp/ws: JSON-RPC 2.0, one
// request, response or notification per text message, so each message
// carries at most one envelope, except a notifications/macp/envelopes
// batch, which a client asks for; with the macp.v1+proto subprotocol,
// also binary protobuf frames (ws_binary.go).
//
// Methods:
//
//	macp/send        {"envelope": <Envelope JSON>}                -> <Ack JSON>
//	macp/subscribe   {"sessionId", "afterSequence"?, "payload"?, "batch"?}  -> {"sessionId", "lastSequence", "resumeAfter"}
//	macp/unsubscribe {"sessionId"}                                -> {"sessionId", "lastSequence"}
//	macp/cancelSession, macp/suspendSession, macp/resumeSession
//	                 {"sessionId", "reason"?}                     -> <Ack JSON> (resolution.go)
//
// Notifications (server to client), per subscribed session in sequence
// order, after the subscribe response:
//
//	notifications/macp/envelope {"sessionId", "sessionEventId": <sequence number>, "envelope": <Envelope JSON>}
//	notifications/macp/end      {"sessionId", "lastSequence"}        the session is terminal, all delivered
//	notifications/macp/error    {"sessionId", "error": <MACPError>}  the subscription failed and ended
//	notifications/macp/envelopes {"sessionId", "envelopes": [{"sessionEventId", "envelope"}, ...]}
//	                            queued envelope notifications in one message, for a
//	                            session/resume or macp/subscribe with "batch": true (wsbatch.go)
//
// macp/send is admitted like gRPC Send (runtime.SendPipelined); its result is the
// Ack, and a rejection is a result with ok=false and the MACPError, as on
// gRPC. Requests
// are handled in the order they arrive. A macp/send is admitted at once
// (runtime.SendPipelined: decided and submitted for commit in arrival
// order, so envelopes sent on one connection are accepted in that order
// within a session) and answered once durable or refused, while the
// connection reads on: up to WSSendWindow (64) macp/send requests may be
// outstanding per connection (wspipe.go); with the window full the
// connection reads nothing more until the oldest is answered. macp/send
// answers come in admission order; other methods are answered as soon as
// they are handled, so a response may overtake earlier macp/send answers
// (JSON-RPC 2.0 allows any order: match responses by id). JSON-RPC
// errors: -32700 (not JSON, invalid UTF-8), -32600, -32601, -32602 (bad
// params, bad envelope JSON: data is the MACPError), -32000 (a MACP
// refusal: data is the MACPError). The connection stays open after them.
//
// Fatal conditions close the connection with a code carrying the MACP
// error (wire.CloseCode: 4000 + its HTTP status; the reason starts with
// the code): 4401 bad or missing credentials (checked after the upgrade,
// because browsers cannot read a refused handshake's status), 4429 too
// many connections for the identity. Also 1003 for binary messages on a
// connection without the macp.v1+proto subprotocol (ws_binary.go), 1009
// for messages over the size limit, 1001 when macpd shuts down, 1008 when
// the client does not read for the write timeout.

const (
	wsOutQueue  = 256
	rpcEnvelope = "notifications/macp/envelope"
	rpcEnd      = "notifications/macp/end"
	rpcError    = "notifications/macp/error"
)

// wsOriginPatterns are the allowed origins as coder/websocket host
// patterns; same-origin requests are always allowed.
func (s *Server) wsAcceptOptions() *websocket.AcceptOptions {
	o := &websocket.AcceptOptions{}
	for _, origin := range s.opts.CORSOrigins {
		if origin == "*" {
			o.InsecureSkipVerify = true // any origin, as configured
			continue
		}
		if u, err := url.Parse(origin); err == nil && u.Host != "" {
			o.OriginPatterns = append(o.OriginPatterns, u.Host)
		}
	}
	return o
}

type wsConn struct {
	s      *Server
	c      *websocket.Conn
	id     coord.Identity
	ctx    context.Context
	cancel context.CancelFunc
	out    chan outMsg

	mu   sync.Mutex
	subs map[string]*wsSub
	pc   *protoConn // protocol mode (ws_session.go)
	pipe *wsPipe    // pipelined macp/send answers (wspipe.go)
	// binary: the connection negotiated WSSubprotocolProto (ws_binary.go).
	binary bool
}

const (
	websocketText   = websocket.MessageText
	websocketBinary = websocket.MessageBinary
)

type wsSub struct {
	cancel context.CancelFunc
	done   chan struct{}
	last   uint64 // last delivered sequence number (guarded by wsConn.mu)
}

func (s *Server) websocket(w http.ResponseWriter, r *http.Request) {
	binaryMode, perr := negotiateSubprotocol(r)
	if perr != nil {
		WriteError(w, perr) // before the upgrade: 400 with the MACPError
		return
	}
	id, _, authErr := s.Identify(r, true, false)
	opts := s.wsAcceptOptions()
	if binaryMode {
		opts.Subprotocols = []string{WSSubprotocolProto}
	}
	c, err := websocket.Accept(w, r, opts)
	if err != nil {
		return // Accept answered the handshake (e.g. 403 for a foreign origin)
	}
	if authErr != nil {
		closeWith(c, authErr)
		return
	}
	// The connection may carry protocol mode (session/*): a transport-mode
	// cursor on the upgrade would mix the two in one attempt.
	if what := transportCursor(r); what != "" {
		closeWith(c, mixedModeCursorError("/macp/ws", what))
		return
	}
	release, cerr := s.acquireStream(id, "")
	if cerr != nil {
		closeWith(c, cerr)
		return
	}
	defer release()
	c.SetReadLimit(s.maxBody())
	ctx, cancel := contextWithDrain(r.Context(), s.drain)
	defer cancel()
	wc := &wsConn{s: s, c: c, id: id, ctx: ctx, cancel: cancel, out: make(chan outMsg, wsOutQueue), subs: make(map[string]*wsSub), binary: binaryMode}
	wc.pc = s.newProtoConn(id, wc, true)
	wc.pc.transportMode = func(sid string) bool {
		wc.mu.Lock()
		defer wc.mu.Unlock()
		return wc.subs[sid] != nil
	}
	wc.pc.others = func() int {
		wc.mu.Lock()
		defer wc.mu.Unlock()
		return len(wc.subs)
	}
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); wc.writeLoop() }()
	wc.pipe = newWSPipe()
	go wc.pipe.run(ctx, wc.enqueue)
	code, reason := wc.readLoop()
	cancel()
	wc.pipe.stop()
	wc.unsubscribeAll()
	wc.pc.detachAll()
	<-writerDone
	drainOut(wc.out) // every follower has ended: what is left was never written
	if code != 0 {
		_ = c.Close(code, reason)
	} else {
		_ = c.CloseNow()
	}
}

func closeWith(c *websocket.Conn, e *coord.Error) {
	reason := string(e.Code) + ": " + e.Message
	if len(reason) > 120 {
		reason = reason[:120]
	}
	_ = c.Close(websocket.StatusCode(wire.CloseCode(string(e.Code))), reason)
}

// readLoop handles requests until the connection ends; it returns the
// close code to send (0: none, the connection is gone).
func (wc *wsConn) readLoop() (websocket.StatusCode, string) {
	d := jsonrpc.New()
	d.Register("macp/send", wc.send)
	d.Register("macp/subscribe", wc.subscribe)
	d.Register("macp/unsubscribe", wc.unsubscribe)
	wc.s.registerControl(d, wc.id) // resolution.go
	wc.pc.register(d)
	for {
		typ, msg, err := wc.c.Read(wc.ctx)
		if err != nil {
			if wc.s.drain.Err() != nil {
				return websocket.StatusGoingAway, "macpd is shutting down; reconnect"
			}
			return 0, ""
		}
		if typ != websocket.MessageText {
			if wc.binary {
				wc.binaryFrame(msg) // ws_binary.go
				continue
			}
			return websocket.StatusUnsupportedData, "send JSON-RPC 2.0 requests as text messages (binary frames need the " + WSSubprotocolProto + " subprotocol)"
		}
		if resp := d.Handle(wc.ctx, msg); resp != nil {
			if !wc.enqueue(wc.ctx, resp) {
				return 0, ""
			}
		}
	}
}

// writeLoop is the only writer; a client that does not take a message
// within the write timeout is disconnected. It also pings the client
// every keep-alive interval.
func (wc *wsConn) writeLoop() {
	t := wc.s.rt.Clock().NewTicker(wc.s.opts.KeepAlive)
	defer t.Stop()
	for {
		select {
		case msg := <-wc.out:
			for {
				var batch []outMsg
				var next *outMsg
				b := msg.b
				if msg.batch != "" {
					batch, next = wc.gather(msg) // wsbatch.go
					if len(batch) > 1 {
						b = batchNotification(batch)
					}
				}
				ctx, cancel := context.WithTimeout(wc.ctx, wc.s.opts.WriteTimeout)
				err := wc.writeMsg(ctx, b)
				cancel()
				if batch == nil {
					msg.finish(err == nil)
				}
				for _, m := range batch {
					m.finish(err == nil)
				}
				if err != nil {
					if next != nil {
						next.finish(false)
					}
					wc.cancel()
					return
				}
				if next == nil {
					break
				}
				msg = *next
			}
		case <-t.C():
			go func() {
				ctx, cancel := context.WithTimeout(wc.ctx, wc.s.opts.WriteTimeout)
				defer cancel()
				if err := wc.c.Ping(ctx); err != nil && wc.ctx.Err() == nil {
					wc.cancel()
				}
			}()
		case <-wc.ctx.Done():
			return
		}
	}
}

func macpRPCError(e *coord.Error) *jsonrpc.Error {
	return &jsonrpc.Error{Code: wire.RPCMACPError, Message: string(e.Code) + ": " + e.Message, Data: json.RawMessage(mustCompact(wire.ErrorOf(e)))}
}

func mustCompact(m *macpv1.MACPError) []byte {
	b, err := wire.Compact(m)
	if err != nil {
		return []byte(`{"code":"INTERNAL_ERROR"}`)
	}
	return b
}

// send admits the envelope now, in arrival order (runtime.SendPipelined),
// and leaves its answer to the connection's pipe (wspipe.go), so the read
// loop goes on with the next message while this one is being committed.
func (wc *wsConn) send(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	env, jerr := sendParams(req)
	if jerr != nil {
		return nil, jerr
	}
	wc.pipe.admit(ctx, req, func() func() *macpv1.Ack { return wc.s.rt.SendPipelined(ctx, wc.id, env) })
	return jsonrpc.Deferred, nil // answered by the pipe, or the connection ended
}

func (wc *wsConn) subscribe(_ context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	var p struct {
		SessionID     string `json:"sessionId"`
		AfterSequence uint64 `json:"afterSequence"`
		Payload       string `json:"payload"`
		Batch         bool   `json:"batch"` // notifications/macp/envelopes (wsbatch.go)
	}
	if jerr := jsonrpc.Params(req, &p); jerr != nil {
		return nil, jerr
	}
	if p.SessionID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "macp/subscribe needs a sessionId"}
	}
	view := false
	switch p.Payload {
	case "", "base64":
	case "json":
		view = true
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `payload: use "base64" (default) or "json"`}
	}
	openedMs := wc.s.nowMs()
	wc.mu.Lock()
	if wc.pc.attachedTo(p.SessionID) {
		wc.mu.Unlock()
		return nil, macpRPCError(coord.Errorf(coord.CodeInvalidEnvelope, "this connection is attached to session %s in protocol mode (session/resume); send session/end before macp/subscribe", p.SessionID))
	}
	if _, dup := wc.subs[p.SessionID]; dup {
		wc.mu.Unlock()
		return nil, macpRPCError(coord.Errorf(coord.CodeInvalidEnvelope, "this connection already follows session %s; unsubscribe first", p.SessionID))
	}
	if len(wc.subs)+wc.pc.count() >= wc.s.opts.MaxSubscriptions {
		wc.mu.Unlock()
		return nil, macpRPCError(coord.Errorf(coord.CodeRateLimited, "this connection already follows %d sessions", wc.s.opts.MaxSubscriptions))
	}
	release, cerr := wc.s.acquireSessionSlot(wc.id, p.SessionID)
	if cerr != nil {
		wc.mu.Unlock()
		return nil, macpRPCError(cerr)
	}
	ctx, cancel := context.WithCancel(wc.ctx)
	sub := &wsSub{cancel: cancel, done: make(chan struct{}), last: p.AfterSequence}
	wc.subs[p.SessionID] = sub
	wc.mu.Unlock()

	started := make(chan *jsonrpc.Error, 1)
	// A session/resume (or session/start) of the same identity and
	// session supersedes this subscription (runtime/attach.go): it ends
	// with a final notifications/macp/detached.
	var superseded atomic.Bool
	untrack := wc.s.rt.Attachments().Track(wc.id.Sender, p.SessionID, func() {
		superseded.Store(true)
		cancel()
	})
	go func() {
		defer close(sub.done)
		defer release()
		defer untrack()
		fw := wc.s.newFeedWindow() // feedwindow.go
		defer fw.end()
		didStart := false
		ended, err := wc.s.follow(ctx, wc.id, p.SessionID, p.AfterSequence, openedMs, fw, func(last, from uint64) {
			didStart = true
			wc.mu.Lock()
			sub.last = from
			wc.mu.Unlock()
			// The response goes out before any notification.
			if b := jsonrpc.Reply(req, map[string]any{"sessionId": p.SessionID, "lastSequence": last, "resumeAfter": from}, nil); b != nil { // nil: a notification
				wc.enqueue(ctx, b)
			}
			started <- nil
		}, func(seq uint64, env *macpv1.Envelope, c *feedCharge) error {
			var msg []byte
			var err error
			if wc.binary {
				msg = envelopeFrame(seq, env) // ws_binary.go
			} else {
				var b []byte
				if b, err = wc.s.encodeFeed(ctx, seq, env, view); err == nil {
					msg = envelopeNotification(p.SessionID, seq, b)
				}
			}
			if err == nil {
				err = c.grow(ctx, int64(len(msg))) // what the queue holds
			}
			if err != nil {
				c.done(false)
				return err
			}
			queued := false
			if p.Batch && !wc.binary {
				queued = wc.enqueueBatchable(ctx, msg, c, p.SessionID)
			} else {
				queued = wc.enqueueCharged(ctx, msg, c)
			}
			if !queued {
				return ctx.Err()
			}
			wc.mu.Lock()
			sub.last = seq
			wc.mu.Unlock()
			return nil
		})
		if !didStart {
			wc.removeSub(p.SessionID, sub)
			started <- macpRPCError(followError(err))
			return
		}
		wc.mu.Lock()
		last := sub.last
		wc.mu.Unlock()
		if superseded.Load() && wc.ctx.Err() == nil {
			wc.removeSub(p.SessionID, sub)
			wc.enqueue(wc.ctx, jsonrpc.Notify(rpcDetached, map[string]any{"sessionId": p.SessionID, "reason": supersededReason, "lastSessionEventId": last}))
			return
		}
		if ctx.Err() != nil {
			return // unsubscribed or the connection ended
		}
		wc.removeSub(p.SessionID, sub)
		if ended {
			wc.enqueue(ctx, jsonrpc.Notify(rpcEnd, map[string]any{"sessionId": p.SessionID, "lastSequence": last}))
		} else if err != nil {
			wc.enqueue(ctx, jsonrpc.Notify(rpcError, map[string]any{"sessionId": p.SessionID, "lastSequence": last, "error": json.RawMessage(mustCompact(wire.ErrorOf(followError(err))))}))
		}
	}()
	if jerr := <-started; jerr != nil {
		return nil, jerr
	}
	return jsonrpc.Deferred, nil
}

func (wc *wsConn) removeSub(sessionID string, sub *wsSub) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.subs[sessionID] == sub {
		delete(wc.subs, sessionID)
	}
}

func (wc *wsConn) unsubscribe(_ context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	if jerr := jsonrpc.Params(req, &p); jerr != nil {
		return nil, jerr
	}
	wc.mu.Lock()
	sub, ok := wc.subs[p.SessionID]
	wc.mu.Unlock()
	if !ok {
		return nil, macpRPCError(coord.Errorf(coord.CodeInvalidEnvelope, "this connection does not follow session %s", p.SessionID))
	}
	sub.cancel()
	<-sub.done // no notification for it after this response
	wc.removeSub(p.SessionID, sub)
	wc.mu.Lock()
	last := sub.last
	wc.mu.Unlock()
	return map[string]any{"sessionId": p.SessionID, "lastSequence": last}, nil
}

func (wc *wsConn) unsubscribeAll() {
	wc.mu.Lock()
	subs := make([]*wsSub, 0, len(wc.subs))
	for _, s := range wc.subs {
		subs = append(subs, s)
	}
	wc.mu.Unlock()
	for _, s := range subs {
		s.cancel()
		<-s.done
	}
}

// acquireSessionSlot takes one of the session's feed slots and charges the
// subscription to id's message rate.
func (s *Server) acquireSessionSlot(id coord.Identity, sessionID string) (func(), *coord.Error) {
	if cerr := s.rt.ChargeCall(id); cerr != nil {
		return nil, cerr
	}
	rel, ok := s.perSess.Acquire(sessionID)
	if !ok {
		return nil, coord.Errorf(coord.CodeRateLimited, "session %s already has %d feeds open on the HTTP listener", sessionID, s.perSess.Max())
	}
	return rel, nil
}
