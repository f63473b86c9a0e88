package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/jsonrpc"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/wire"
)

// protoConn is one carrier of protocol-mode attachments (resume.go): a
// WebSocket connection, or an HTTP notification stream (rpc.go). The
// methods below are the one implementation both transports dispatch to.
type protoConn struct {
	s    *Server
	id   coord.Identity
	sink rpcSink // nil: no carrier (HTTP without a stream), nothing can attach
	// deferReply: the response to an attaching request goes through the
	// sink before any notification (WebSocket); otherwise it is returned
	// as the result (HTTP: the response body).
	deferReply bool
	// transportMode reports whether the carrier follows sid in transport
	// mode (WebSocket macp/subscribe); nil: never.
	transportMode func(sid string) bool
	others        func() int // sessions followed in transport mode

	mu  sync.Mutex
	att map[string]*attachment
}

func (s *Server) newProtoConn(id coord.Identity, sink rpcSink, deferReply bool) *protoConn {
	return &protoConn{s: s, id: id, sink: sink, deferReply: deferReply, att: make(map[string]*attachment)}
}

func (wc *wsConn) identity() coord.Identity { return wc.id }
func (wc *wsConn) connCtx() context.Context { return wc.ctx }

// enqueue queues msg for the writer, waiting while the queue is full,
// until ctx or the connection ends.
func (wc *wsConn) enqueue(ctx context.Context, msg []byte) bool {
	return enqueueOut(wc.out, ctx, wc.ctx, outMsg{b: msg})
}

// enqueueCharged is enqueue for a message charged to a feed window: done
// is called once it was written or dropped.
func (wc *wsConn) enqueueCharged(ctx context.Context, msg []byte, c *feedCharge) bool {
	return enqueueOut(wc.out, ctx, wc.ctx, outMsg{b: msg, charge: c})
}

// register adds the protocol-mode methods to d.
func (pc *protoConn) register(d *jsonrpc.Dispatcher) {
	d.Register("session/start", pc.sessionStart)
	d.Register("session/resume", pc.sessionResume)
	d.Register("session/end", pc.sessionEnd)
	d.Register("session/get", func(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
		p, jerr := parseProto(req, true)
		if jerr != nil {
			return nil, jerr
		}
		return pc.s.rpcGet(ctx, pc.id, p.SessionID)
	})
}

func (pc *protoConn) attachedTo(sid string) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.att[sid] != nil
}

func (pc *protoConn) count() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return len(pc.att)
}

func mixedModeError(sid string) *jsonrpc.Error {
	return macpRPCError(coord.Errorf(coord.CodeInvalidEnvelope, "this connection follows session %s in transport mode (macp/subscribe); unsubscribe before using protocol mode (session/resume) for it", sid))
}

// attachHere attaches the carrier to sid after `after`.
func (pc *protoConn) attachHere(req *jsonrpc.Request, sid string, after uint64, stateSeen, batch bool, result func(catchup bool, from uint64) any) (any, *jsonrpc.Error) {
	if pc.sink == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: req.Method + " over HTTP needs a notification stream: open GET /macp/rpc/stream and send its id in the " + HeaderRPCStream + " header"}
	}
	if pc.transportMode != nil && pc.transportMode(sid) {
		return nil, mixedModeError(sid)
	}
	pc.mu.Lock()
	prev := pc.att[sid]
	n := len(pc.att)
	pc.mu.Unlock()
	if pc.others != nil {
		n += pc.others()
	}
	if prev == nil && n >= pc.s.opts.MaxSubscriptions {
		return nil, macpRPCError(coord.Errorf(coord.CodeRateLimited, "this connection already follows %d sessions", pc.s.opts.MaxSubscriptions))
	}
	if prev != nil { // re-attaching on the same carrier replaces it silently
		prev.cancel()
		<-prev.done
	}
	release, cerr := pc.s.acquireSessionSlot(pc.id, sid)
	if cerr != nil {
		return nil, macpRPCError(cerr)
	}
	type outcome struct {
		res  any
		jerr *jsonrpc.Error
	}
	started := make(chan outcome, 1)
	pc.s.attach(pc.sink, sid, after, stateSeen, batch, func(a *attachment, catchup bool, from uint64) {
		pc.mu.Lock()
		pc.att[sid] = a
		pc.mu.Unlock()
		res := result(catchup, from)
		if pc.deferReply {
			if b := jsonrpc.Reply(req, res, nil); b != nil { // nil: a notification gets no response
				pc.sink.enqueue(pc.sink.connCtx(), b)
			}
			res = jsonrpc.Deferred
		}
		started <- outcome{res: res}
	}, func(cerr *coord.Error) {
		release()
		started <- outcome{jerr: macpRPCError(cerr)}
	}, func(a *attachment) {
		release()
		pc.mu.Lock()
		if pc.att[sid] == a {
			delete(pc.att, sid)
		}
		pc.mu.Unlock()
	})
	o := <-started
	return o.res, o.jerr
}

func (pc *protoConn) sessionStart(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	p, jerr := parseProto(req, false)
	if jerr != nil {
		return nil, jerr
	}
	if len(p.Envelope) == 0 || p.SessionID != "" || len(p.LastSessionEventID) != 0 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `session/start takes {"envelope": <SessionStart envelope>}`}
	}
	env, cerr := wire.DecodeEnvelope(p.Envelope)
	if cerr != nil {
		e := macpRPCError(cerr)
		e.Code = jsonrpc.CodeInvalidParams
		return nil, e
	}
	if env.GetMessageType() != coord.TypeSessionStart {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "session/start takes a SessionStart envelope (got message_type " + env.GetMessageType() + "); use macp/send"}
	}
	if pc.sink == nil {
		return pc.attachHere(req, "", 0, false, false, nil) // the error naming the missing stream
	}
	ack := pc.s.rt.Send(ctx, pc.id, env)
	b, err := wire.Compact(ack)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the ack could not be encoded"}
	}
	res := map[string]any{"sessionId": env.GetSessionId(), "ack": json.RawMessage(b)}
	if !ack.GetOk() {
		return res, nil // nothing to attach to; the ack says why
	}
	return pc.attachHere(req, env.GetSessionId(), 0, false, false, func(bool, uint64) any { return res })
}

func (pc *protoConn) sessionResume(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	p, jerr := parseProto(req, true)
	if jerr != nil {
		return nil, jerr
	}
	if len(p.Envelope) != 0 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `session/resume takes {"sessionId", "lastSessionEventId"}`}
	}
	after, stateSeen, jerr := lastEventID(p.LastSessionEventID)
	if jerr != nil {
		return nil, jerr
	}
	// Refuse unknown sessions, non-observers and ended sessions before
	// superseding anything.
	md, cerr := pc.s.rt.GetSession(ctx, pc.id, p.SessionID)
	if cerr != nil {
		return nil, macpRPCError(cerr)
	}
	if !liveState(md.GetState()) { // a SUSPENDED session attaches like an OPEN one
		return nil, pc.s.endedError(ctx, md)
	}
	return pc.attachHere(req, p.SessionID, after, stateSeen, p.Batch, func(catchup bool, from uint64) any {
		return map[string]any{"resumed": true, "catchup": catchup, "sessionId": p.SessionID, "sessionEventId": from}
	})
}

func (pc *protoConn) sessionEnd(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	p, jerr := parseProto(req, true)
	if jerr != nil {
		return nil, jerr
	}
	// An unknown session, or one the caller may not observe, is an error
	// that changes nothing.
	if _, cerr := pc.s.rt.GetSession(ctx, pc.id, p.SessionID); cerr != nil {
		return nil, macpRPCError(cerr)
	}
	pc.mu.Lock()
	a := pc.att[p.SessionID]
	pc.mu.Unlock()
	if a != nil {
		a.cancel()
		<-a.done // nothing for this session after the response
	}
	cancelled := pc.s.endSession(ctx, pc.id, p.SessionID)
	return map[string]any{"sessionId": p.SessionID, "ended": true, "wasAttached": a != nil, "cancelled": cancelled}, nil
}

// detachAll ends every attachment of the carrier.
func (pc *protoConn) detachAll() {
	pc.mu.Lock()
	list := make([]*attachment, 0, len(pc.att))
	for _, a := range pc.att {
		list = append(list, a)
	}
	pc.mu.Unlock()
	for _, a := range list {
		a.cancel()
		<-a.done
	}
}

// endedError is session/resume's answer for an ended session: -32000 with a
// MACPError SESSION_NOT_OPEN naming the session, whose details are the
// JSON {"sessionEventId": <its last record>, "state": <its final state>},
// so the client can rehydrate with session/get or read the history over
// SSE or gRPC (docs/resume.md "Ended sessions").
func (s *Server) endedError(ctx context.Context, md *macpv1.SessionMetadata) *jsonrpc.Error {
	sid := md.GetSessionId()
	var last uint64
	_ = s.rt.Inspect(ctx, sid, func(ss *session.Session) { last = ss.Seq })
	details, _ := json.Marshal(map[string]any{"sessionEventId": last, "state": md.GetState().String()})
	me := &macpv1.MACPError{
		Code:      string(coord.CodeSessionNotOpen),
		Message:   fmt.Sprintf("session %s has ended (%s); its final sessionEventId is %d: read it with session/get, or its history over SSE or gRPC", sid, md.GetState(), last),
		SessionId: sid,
		Details:   details,
	}
	return &jsonrpc.Error{Code: wire.RPCMACPError, Message: me.Code + ": " + me.Message, Data: json.RawMessage(mustCompact(me))}
}
