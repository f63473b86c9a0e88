package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/listpage"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/wire"
	"google.golang.org/protobuf/proto"
)

// Stream headers, as on gRPC (docs/resume.md).
const (
	HeaderSessionSeq  = "X-MACP-Session-Sequence"
	HeaderResumeAfter = "X-MACP-Resume-After"
)

// Media types (RFC-MACP-0005 registry).
const (
	mediaEnvelopeJSON = "application/macp-envelope+json"
	mediaManifestJSON = "application/macp-manifest+json"
)

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("POST /macp/envelope", s.postEnvelope(false))
	m.HandleFunc("POST /macp/session/start", s.postEnvelope(true))
	m.HandleFunc("GET /macp/session/{id}", s.getSession)
	m.HandleFunc("POST /macp/session/{id}/cancel", s.controlSession(s.rt.Cancel))
	m.HandleFunc("POST /macp/session/{id}/suspend", s.controlSession(s.rt.Suspend))
	m.HandleFunc("POST /macp/session/{id}/resume", s.controlSession(s.rt.Resume))
	m.HandleFunc("GET /macp/session/{id}/resolution", s.getResolution) // resolution.go
	m.HandleFunc("GET /macp/session/{id}/events", s.sse)
	m.HandleFunc("GET /macp/sessions", s.listSessions)
	m.HandleFunc("GET /macp/sessions/events", s.sessionEvents) // lifecycle.go
	m.HandleFunc("GET /macp/modes", s.listModes)
	m.HandleFunc("GET /macp/policies", s.listPolicies)
	m.HandleFunc("GET /.well-known/macp.json", s.manifest)
	m.HandleFunc("POST /macp/auth/ticket", s.issueTicket)
	m.HandleFunc("GET /macp/ws", s.websocket)
	m.HandleFunc("GET /sessions/{id}/events", s.poll)
	s.rpcRoutes()
}

// WriteError answers e: the registry's HTTP status for its code and a
// JSON MACPError body.
func WriteError(w http.ResponseWriter, e *coord.Error) {
	writeMACPError(w, wire.ErrorOf(e))
}

func writeMACPError(w http.ResponseWriter, me *macpv1.MACPError) {
	b, err := wire.Compact(me)
	if err != nil {
		b = []byte(`{"code":"INTERNAL_ERROR"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(wire.HTTPStatus(me.GetCode()))
	_, _ = w.Write(append(b, '\n'))
}

// WriteJSON answers 200 with m's proto3 JSON (proto field names).
func WriteJSON(w http.ResponseWriter, m proto.Message) {
	writeJSONType(w, m, "application/json")
}

func writeJSONType(w http.ResponseWriter, m proto.Message, ctype string) {
	b, err := wire.Compact(m)
	if err != nil {
		WriteError(w, coord.Errorf(coord.CodeInternalError, "the response could not be encoded"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(append(b, '\n'))
}

// readBody reads a JSON request body within the size limit. A missing or
// non-JSON content type, an oversized body and invalid UTF-8 are errors.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, types ...string) ([]byte, *coord.Error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	ok := err == nil && mt == "application/json"
	for _, t := range types {
		ok = ok || mt == t
	}
	if !ok {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "Content-Type must be application/json (got %q)", r.Header.Get("Content-Type"))
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody()))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, coord.Errorf(coord.CodePayloadTooLarge, "the request body exceeds %d bytes", mbe.Limit)
		}
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "reading the request body: %v", err)
	}
	return b, nil
}

// postEnvelope admits one envelope through runtime.Send, like gRPC Send.
func (s *Server) postEnvelope(startOnly bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _, cerr := s.Identify(r, false, false)
		if cerr != nil {
			WriteError(w, cerr)
			return
		}
		b, cerr := s.readBody(w, r, mediaEnvelopeJSON)
		if cerr != nil {
			WriteError(w, cerr)
			return
		}
		env, cerr := wire.DecodeEnvelope(b)
		if cerr != nil {
			WriteError(w, cerr)
			return
		}
		if startOnly && env.GetMessageType() != coord.TypeSessionStart {
			WriteError(w, coord.Errorf(coord.CodeInvalidEnvelope, "/macp/session/start takes a SessionStart envelope (got message_type %q); use /macp/envelope", env.GetMessageType()))
			return
		}
		ctx, cancel := s.unaryCtx(r)
		defer cancel()
		s.writeAck(w, s.rt.Send(ctx, id, env))
	}
}

// writeAck answers an Ack: 200 when ok (duplicates included), else the
// error's status with the MACPError (session and message ids filled in).
func (s *Server) writeAck(w http.ResponseWriter, ack *macpv1.Ack) {
	if ack.GetOk() {
		WriteJSON(w, ack)
		return
	}
	me := proto.Clone(ack.GetError()).(*macpv1.MACPError)
	if me.GetCode() == "" {
		me.Code = string(coord.CodeInternalError)
	}
	if me.SessionId == "" {
		me.SessionId = ack.GetSessionId()
	}
	if me.MessageId == "" {
		me.MessageId = ack.GetMessageId()
	}
	writeMACPError(w, me)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id, _, cerr := s.Identify(r, true, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	ctx, cancel := s.unaryCtx(r)
	defer cancel()
	md, cerr := s.rt.GetSession(ctx, id, r.PathValue("id"))
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	WriteJSON(w, md)
}

// controlOp is one of the runtime's control-plane operations on a session
// (runtime.Cancel, Suspend, Resume): the initiator only, a runtime-emitted
// record on success.
type controlOp func(ctx context.Context, id coord.Identity, sessionID, reason string) (*macpv1.Ack, *coord.Error)

// controlSession serves POST /macp/session/{id}/cancel, /suspend and
// /resume: body {"reason": "..."} (may be {}), answer the operation's Ack
// (200), or its refusal with the registry's status (FORBIDDEN 403,
// SESSION_NOT_FOUND 404, SESSION_NOT_OPEN 409, ...), as gRPC
// CancelSession, SuspendSession and ResumeSession.
func (s *Server) controlSession(op controlOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _, cerr := s.Identify(r, false, false)
		if cerr != nil {
			WriteError(w, cerr)
			return
		}
		var body struct {
			Reason string `json:"reason"`
		}
		b, cerr := s.readBody(w, r)
		if cerr != nil {
			WriteError(w, cerr)
			return
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || dec.More() {
			WriteError(w, coord.Errorf(coord.CodeInvalidEnvelope, `the body must be {"reason": "..."}`))
			return
		}
		if !validUTF8(b) {
			WriteError(w, coord.Errorf(coord.CodeInvalidEnvelope, "the body is not valid UTF-8"))
			return
		}
		ctx, cancel := s.unaryCtx(r)
		defer cancel()
		ack, cerr := op(ctx, id, r.PathValue("id"), body.Reason)
		if cerr != nil {
			WriteError(w, cerr)
			return
		}
		s.writeAck(w, ack)
	}
}

// listSessions is gRPC ListSessions: every session the caller may see in
// one answer, or one page of them with ?page_size=N and/or
// ?page_token=T (runtime.ListSessionsPage, the same pages and tokens as
// gRPC); next_page_token is "" on the last page. A negative or
// non-numeric page_size, or a token this runtime did not issue, is
// INVALID_ENVELOPE (400).
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	id, _, cerr := s.Identify(r, true, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	q := r.URL.Query()
	var size int32
	if v, ok, cerr := queryValue(q, "page_size"); cerr != nil {
		WriteError(w, cerr)
		return
	} else if ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			WriteError(w, coord.Errorf(coord.CodeInvalidEnvelope, "page_size=%q: use 0..%d (0: the server's maximum)", v, listpage.MaxSize))
			return
		}
		size = int32(n)
	}
	token, _, cerr := queryValue(q, "page_token")
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	if cerr := s.rt.ChargeCall(id); cerr != nil { // like gRPC ListSessions
		WriteError(w, cerr)
		return
	}
	ctx, cancel := s.unaryCtx(r)
	defer cancel()
	page, next, err := s.rt.ListSessionsPage(ctx, id, size, token)
	if err != nil {
		WriteError(w, coord.Errorf(coord.CodeInvalidEnvelope, "%s", strings.TrimPrefix(err.Error(), "runtime: ")))
		return
	}
	WriteJSON(w, &macpv1.ListSessionsResponse{Sessions: page, NextPageToken: next})
}

// listModes is discovery: no credentials needed (as gRPC ListModes), but
// bad credentials are refused.
func (s *Server) listModes(w http.ResponseWriter, r *http.Request) {
	if _, _, cerr := s.Identify(r, false, true); cerr != nil {
		WriteError(w, cerr)
		return
	}
	WriteJSON(w, &macpv1.ListModesResponse{Modes: s.opts.Registry.Modes().Descriptors(mode.Standard)})
}

func (s *Server) listPolicies(w http.ResponseWriter, r *http.Request) {
	if _, _, cerr := s.Identify(r, true, false); cerr != nil {
		WriteError(w, cerr)
		return
	}
	WriteJSON(w, &macpv1.ListPoliciesResponse{Descriptors: s.opts.Registry.Policies(r.URL.Query().Get("mode"))})
}

// manifest is the runtime's AgentManifest with this listener's endpoints
// (RFC-MACP-0005 §well-known; transport registry ids).
func (s *Server) manifest(w http.ResponseWriter, r *http.Request) {
	if _, _, cerr := s.Identify(r, false, true); cerr != nil {
		WriteError(w, cerr)
		return
	}
	m := &macpv1.AgentManifest{}
	if s.opts.Manifest != nil {
		m = proto.Clone(s.opts.Manifest()).(*macpv1.AgentManifest)
	}
	if !containsString(m.InputContentTypes, mediaEnvelopeJSON) {
		m.InputContentTypes = append(m.InputContentTypes, mediaEnvelopeJSON)
		m.OutputContentTypes = append(m.OutputContentTypes, mediaEnvelopeJSON)
	}
	if m.Metadata == nil {
		m.Metadata = map[string]string{}
	}
	resume := ResumeFeatures(s.opts.ReplayWindow)
	for k, v := range resume {
		m.Metadata["experimental."+k] = v
	}
	base := s.opts.BaseURL
	if s.opts.BaseURLFunc != nil {
		base = s.opts.BaseURLFunc()
	}
	if base != "" {
		ws := "ws" + strings.TrimPrefix(base, "http") + "/macp/ws"
		m.TransportEndpoints = append(m.TransportEndpoints,
			&macpv1.TransportEndpoint{Transport: "macp.transport.http.v1", Uri: base + "/macp", ContentTypes: []string{mediaEnvelopeJSON, "application/json", "text/event-stream"}},
			&macpv1.TransportEndpoint{Transport: "macp.transport.websocket.v1", Uri: ws, ContentTypes: []string{mediaEnvelopeJSON}, Metadata: map[string]string{"framing": "jsonrpc-2.0", ResumeCapability: resume[ResumeCapability], ResumeCapability + ".replay_window": resume[ResumeCapability+".replay_window"]}},
		)
	}
	writeJSONType(w, m, mediaManifestJSON)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// issueTicket returns a single-use ticket for the caller's identity. It
// needs header credentials (a ticket cannot buy another).
func (s *Server) issueTicket(w http.ResponseWriter, r *http.Request) {
	id, _, cerr := s.Identify(r, false, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	tok, cerr := s.tickets.issue(id)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"ticket": tok, "expires_in_ms": s.opts.TicketTTL.Milliseconds(), "sender": id.Sender})
}

func validUTF8(b []byte) bool { return utf8.Valid(b) }

// queryValue returns the single value of key, or "" and false if absent;
// a repeated key is an error.
func queryValue(q url.Values, key string) (string, bool, *coord.Error) {
	v, ok := q[key]
	if !ok {
		return "", false, nil
	}
	if len(v) != 1 {
		return "", false, coord.Errorf(coord.CodeInvalidEnvelope, "query parameter %s is repeated", key)
	}
	return v[0], true, nil
}
