package httpapi

import (
	"context"
	"encoding/json"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/jsonrpc"
	"github.com/macpd/macpd/internal/wire"
)

// Protocol-mode methods on a WebSocket connection (resume.go). A session
// is followed on one connection either in transport mode (macp/subscribe)
// or in protocol mode (session/start, session/resume), never both at once.

func (wc *wsConn) identity() coord.Identity { return wc.id }
func (wc *wsConn) connCtx() context.Context { return wc.ctx }

// enqueue queues msg for the writer, waiting while the queue is full,
// until ctx or the connection ends.
func (wc *wsConn) enqueue(ctx context.Context, msg []byte) bool {
	select {
	case wc.out <- msg:
		return true
	case <-ctx.Done():
		return false
	case <-wc.ctx.Done():
		return false
	}
}

func (wc *wsConn) registerProtocol(d *jsonrpc.Dispatcher) {
	d.Register("session/start", wc.sessionStart)
	d.Register("session/resume", wc.sessionResume)
	d.Register("session/end", wc.sessionEnd)
	d.Register("session/get", func(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
		p, jerr := parseProto(req, true)
		if jerr != nil {
			return nil, jerr
		}
		return wc.s.rpcGet(ctx, wc.id, p.SessionID)
	})
}

func mixedModeError(sid string) *jsonrpc.Error {
	return macpRPCError(coord.Errorf(coord.CodeInvalidEnvelope, "this connection follows session %s in transport mode (macp/subscribe); unsubscribe before using protocol mode (session/resume) for it", sid))
}

// attachHere attaches this connection to sid after `after`; the response
// to req (made by result) goes out before any notification.
func (wc *wsConn) attachHere(req *jsonrpc.Request, sid string, after uint64, result func(catchup bool, from uint64) any) (any, *jsonrpc.Error) {
	wc.mu.Lock()
	if _, dup := wc.subs[sid]; dup {
		wc.mu.Unlock()
		return nil, mixedModeError(sid)
	}
	prev := wc.att[sid]
	if prev == nil && len(wc.subs)+len(wc.att) >= wc.s.opts.MaxSubscriptions {
		wc.mu.Unlock()
		return nil, macpRPCError(coord.Errorf(coord.CodeRateLimited, "this connection already follows %d sessions", wc.s.opts.MaxSubscriptions))
	}
	wc.mu.Unlock()
	if prev != nil { // re-attaching on the same connection replaces it silently
		prev.cancel()
		<-prev.done
	}
	release, cerr := wc.s.acquireSessionSlot(wc.id, sid)
	if cerr != nil {
		return nil, macpRPCError(cerr)
	}
	started := make(chan *jsonrpc.Error, 1)
	wc.s.attach(wc, sid, after, func(a *attachment, catchup bool, from uint64) {
		wc.mu.Lock()
		wc.att[sid] = a
		wc.mu.Unlock()
		wc.enqueue(wc.ctx, jsonrpc.Reply(req, result(catchup, from), nil))
		started <- nil
	}, func(cerr *coord.Error) {
		release()
		started <- macpRPCError(cerr)
	}, func(a *attachment) {
		release()
		wc.mu.Lock()
		if wc.att[sid] == a {
			delete(wc.att, sid)
		}
		wc.mu.Unlock()
	})
	if jerr := <-started; jerr != nil {
		return nil, jerr
	}
	return jsonrpc.Deferred, nil
}

func (wc *wsConn) sessionStart(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
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
	ack := wc.s.rt.Send(ctx, wc.id, env)
	b, err := wire.Compact(ack)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the ack could not be encoded"}
	}
	res := map[string]any{"sessionId": env.GetSessionId(), "ack": json.RawMessage(b)}
	if !ack.GetOk() {
		return res, nil // nothing to attach to; the ack says why
	}
	return wc.attachHere(req, env.GetSessionId(), 0, func(bool, uint64) any { return res })
}

func (wc *wsConn) sessionResume(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	p, jerr := parseProto(req, true)
	if jerr != nil {
		return nil, jerr
	}
	if len(p.Envelope) != 0 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `session/resume takes {"sessionId", "lastSessionEventId"}`}
	}
	after, jerr := lastEventID(p.LastSessionEventID)
	if jerr != nil {
		return nil, jerr
	}
	// Refuse unknown sessions and non-observers before superseding anything.
	if _, cerr := wc.s.rt.GetSession(ctx, wc.id, p.SessionID); cerr != nil {
		return nil, macpRPCError(cerr)
	}
	return wc.attachHere(req, p.SessionID, after, func(catchup bool, from uint64) any {
		return map[string]any{"resumed": true, "catchup": catchup, "sessionId": p.SessionID, "sessionEventId": from}
	})
}

func (wc *wsConn) sessionEnd(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	p, jerr := parseProto(req, true)
	if jerr != nil {
		return nil, jerr
	}
	wc.mu.Lock()
	a := wc.att[p.SessionID]
	wc.mu.Unlock()
	if a != nil {
		a.cancel()
		<-a.done // nothing for this session after the response
	}
	cancelled := wc.s.endSession(ctx, wc.id, p.SessionID)
	return map[string]any{"sessionId": p.SessionID, "ended": true, "wasAttached": a != nil, "cancelled": cancelled}, nil
}

// detachAll ends every protocol-mode attachment of the connection.
func (wc *wsConn) detachAll() {
	wc.mu.Lock()
	list := make([]*attachment, 0, len(wc.att))
	for _, a := range wc.att {
		list = append(list, a)
	}
	wc.mu.Unlock()
	for _, a := range list {
		a.cancel()
		<-a.done
	}
}
