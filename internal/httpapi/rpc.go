package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/jsonrpc"
	"github.com/macpd/macpd/internal/wire"
)

// JSON-RPC over HTTP (docs/resume.md "Protocol mode"): the same methods
// as /macp/ws (macp/send, macp/cancelSession, macp/suspendSession,
// macp/resumeSession, session/start, session/resume, session/end,
// session/get), one request per POST, with server-to-client notifications
// on a separate Server-Sent Events stream:
//
//	GET  /macp/rpc/stream   SSE; the first event is "stream" with {"streamId"},
//	                        then one "message" event per JSON-RPC notification
//	POST /macp/rpc          a JSON-RPC request -> its JSON-RPC response (200;
//	                        204 for a notification); session/start, session/resume
//	                        and session/end act on the stream named by the
//	                        X-MACP-RPC-Stream header (same identity only)
//
// The stream is protocol mode: a Last-Event-ID header on either route is
// the transport-mode resume of the SSE feed and is refused (mixed modes).
// The stream ends when the client closes it; its attachments end with it.

// HeaderRPCStream names the notification stream of a POST /macp/rpc.
const HeaderRPCStream = "X-MACP-RPC-Stream"

type rpcStream struct {
	key    string
	owner  coord.Identity
	ctx    context.Context
	cancel context.CancelFunc
	out    chan outMsg
	pc     *protoConn
}

func (st *rpcStream) identity() coord.Identity { return st.owner }
func (st *rpcStream) connCtx() context.Context { return st.ctx }
func (st *rpcStream) enqueue(ctx context.Context, msg []byte) bool {
	return enqueueOut(st.out, ctx, st.ctx, outMsg{b: msg})
}
func (st *rpcStream) enqueueCharged(ctx context.Context, msg []byte, c *feedCharge) bool {
	return enqueueOut(st.out, ctx, st.ctx, outMsg{b: msg, charge: c})
}

type rpcStreams struct {
	mu sync.Mutex
	m  map[string]*rpcStream
}

func (s *Server) rpcStreamTable() *rpcStreams {
	s.attached.mu.Lock()
	defer s.attached.mu.Unlock()
	if s.attached.streams == nil {
		s.attached.streams = &rpcStreams{m: make(map[string]*rpcStream)}
	}
	return s.attached.streams
}

func (s *Server) rpcRoutes() {
	s.mux.HandleFunc("GET /macp/rpc/stream", s.rpcStream)
	s.mux.HandleFunc("POST /macp/rpc", s.rpcPost)
}

// transportCursor names the transport-mode cursor r carries, if any: a
// Last-Event-ID header (even empty or repeated) or an after_sequence,
// after or afterSequence query parameter. Routes that speak protocol mode
// (/macp/rpc, /macp/rpc/stream, /macp/ws) refuse such a request whole, so
// one attempt never mixes the two modes (docs/resume.md "Mixing modes").
func transportCursor(r *http.Request) string {
	if len(r.Header.Values("Last-Event-ID")) > 0 {
		return "the Last-Event-ID header"
	}
	q := r.URL.Query()
	for _, k := range []string{"after_sequence", "after", "afterSequence"} {
		if _, ok := q[k]; ok {
			return "the query parameter " + k
		}
	}
	return ""
}

func mixedModeCursorError(route, what string) *coord.Error {
	return coord.Errorf(coord.CodeInvalidEnvelope, "%s is a transport-mode cursor (SSE, polling); %s is protocol mode, which resumes with session/resume and lastSessionEventId: send one or the other, not both", what, route)
}

func (s *Server) rpcStream(w http.ResponseWriter, r *http.Request) {
	id, _, cerr := s.Identify(r, true, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	if what := transportCursor(r); what != "" {
		WriteError(w, mixedModeCursorError("/macp/rpc/stream", what))
		return
	}
	release, cerr := s.acquireStream(id, "")
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	defer release()
	var kb [16]byte
	_, _ = rand.Read(kb[:])
	ctx, cancel := contextWithDrain(r.Context(), s.drain)
	defer cancel()
	st := &rpcStream{key: hex.EncodeToString(kb[:]), owner: id, ctx: ctx, cancel: cancel, out: make(chan outMsg, wsOutQueue)}
	st.pc = s.newProtoConn(id, st, false)
	tab := s.rpcStreamTable()
	tab.mu.Lock()
	tab.m[st.key] = st
	tab.mu.Unlock()
	defer func() {
		tab.mu.Lock()
		delete(tab.m, st.key)
		tab.mu.Unlock()
		cancel()
		st.pc.detachAll()
		drainOut(st.out) // every attachment has ended: what is left was never written
	}()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	first, _ := json.Marshal(map[string]string{"streamId": st.key})
	if !write([]byte("event: stream\ndata: " + string(first) + "\n\n")) {
		return
	}
	t := s.rt.Clock().NewTicker(s.opts.KeepAlive)
	defer t.Stop()
	for {
		select {
		case msg := <-st.out:
			ok := write([]byte("event: message\ndata: " + string(msg.b) + "\n\n"))
			msg.finish(ok)
			if !ok {
				return
			}
		case <-t.C():
			if !write([]byte(": keep-alive\n\n")) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) rpcPost(w http.ResponseWriter, r *http.Request) {
	id, _, cerr := s.Identify(r, false, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	if what := transportCursor(r); what != "" {
		WriteError(w, mixedModeCursorError("/macp/rpc", what))
		return
	}
	b, cerr := s.readBody(w, r)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	pc := s.newProtoConn(id, nil, false)
	if key := r.Header.Get(HeaderRPCStream); key != "" {
		tab := s.rpcStreamTable()
		tab.mu.Lock()
		st := tab.m[key]
		tab.mu.Unlock()
		if st == nil || st.owner.Sender != id.Sender {
			WriteError(w, coord.Errorf(coord.CodeInvalidEnvelope, "%s names no open notification stream of %s", HeaderRPCStream, id.Sender))
			return
		}
		pc = st.pc
	}
	d := jsonrpc.New()
	d.Register("macp/send", func(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
		return s.rpcSend(ctx, id, req)
	})
	s.registerControl(d, id)
	pc.register(d)
	ctx, cancel := s.unaryCtx(r)
	defer cancel()
	resp := d.Handle(ctx, b)
	if resp == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(append(resp, '\n'))
}

// rpcSend is macp/send: runtime.Send, the admission of gRPC Send.
func (s *Server) rpcSend(ctx context.Context, id coord.Identity, req *jsonrpc.Request) (any, *jsonrpc.Error) {
	env, jerr := sendParams(req)
	if jerr != nil {
		return nil, jerr
	}
	return ackResult(s.rt.Send(ctx, id, env)), nil // the result is the Ack itself (issue #14; docs/resume.md)
}

// sendParams decodes macp/send's params: {"envelope": <Envelope JSON>}.
func sendParams(req *jsonrpc.Request) (*macpv1.Envelope, *jsonrpc.Error) {
	var p struct {
		Envelope json.RawMessage `json:"envelope"`
	}
	if jerr := jsonrpc.Params(req, &p); jerr != nil {
		return nil, jerr
	}
	if len(p.Envelope) == 0 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `macp/send needs {"envelope": {...}}`}
	}
	env, cerr := wire.DecodeEnvelope(p.Envelope)
	if cerr != nil {
		e := macpRPCError(cerr)
		e.Code = jsonrpc.CodeInvalidParams
		return nil, e
	}
	return env, nil
}
