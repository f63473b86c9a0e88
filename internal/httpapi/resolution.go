package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/jsonrpc"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/wire"
)

// Resolution is the JSON of GET /macp/session/{id}/resolution: what a
// session is bound to and how it ended, beyond SessionMetadata (whose
// proto3 JSON stays exactly the proto message):
//
//	{"session_id", "state", "profile",
//	 "commitment": <CommitmentPayload proto3 JSON>,   only when RESOLVED
//	 "commitment_sequence": N,                          the Commitment's sequence number
//	 "commitment_hash": "sha256:...",                   RFC-MACP-0013 (internal/cmthash)
//	 "supersedes_ref": {"session_id", "commitment_hash"}}  a ready CommitmentPayload.supersedes
//
// profile is the profile the session was bound to at SessionStart
// ("2026-04" or "2026-09"; docs/spec-decisions.md "Profiles"). The hash
// is absent (and commitment_hash_error says why) when the payload is
// outside the frozen field set of macp-commitment-hash/1.
type Resolution struct {
	SessionID          string          `json:"session_id"`
	State              string          `json:"state"`
	Profile            string          `json:"profile"`
	Commitment         json.RawMessage `json:"commitment,omitempty"`
	CommitmentSequence uint64          `json:"commitment_sequence,omitempty"`
	CommitmentHash     string          `json:"commitment_hash,omitempty"`
	CommitmentHashErr  string          `json:"commitment_hash_error,omitempty"`
	SupersedesRef      *CommitmentRef  `json:"supersedes_ref,omitempty"`
}

// CommitmentRef is the JSON of macp.v1.CommitmentRef (proto field names).
type CommitmentRef struct {
	SessionID      string `json:"session_id"`
	CommitmentHash string `json:"commitment_hash"`
}

// resolution reads sid's Resolution for id: GetSession decides whether id
// may observe it (SESSION_NOT_FOUND, FORBIDDEN), then the durable session
// gives its bound profile and its Commitment.
func (s *Server) resolution(ctx context.Context, id coord.Identity, sid string) (*Resolution, *coord.Error) {
	md, cerr := s.rt.GetSession(ctx, id, sid)
	if cerr != nil {
		return nil, cerr
	}
	return s.resolutionOf(ctx, md)
}

// resolutionOf is resolution for a session whose metadata the caller was
// allowed to read.
func (s *Server) resolutionOf(ctx context.Context, md *macpv1.SessionMetadata) (*Resolution, *coord.Error) {
	sid := md.GetSessionId()
	res := &Resolution{SessionID: sid, State: md.GetState().String(), Profile: coord.ProfileApril}
	var commit *macpv1.CommitmentPayload
	if cerr := s.rt.Inspect(ctx, sid, func(ss *session.Session) {
		res.Profile = coord.StoredProfile(ss.Binding.Profile)
		if ss.Status == session.Resolved && ss.Resolution != nil {
			commit = ss.Resolution // never modified once set
			res.CommitmentSequence = ss.Seq
		}
	}); cerr != nil {
		return nil, cerr
	}
	if commit != nil {
		if b, err := wire.Compact(commit); err == nil {
			res.Commitment = b
		}
		h, err := cmthash.Hash(commit)
		if err != nil {
			res.CommitmentHashErr = err.Error()
		} else {
			res.CommitmentHash = h
			res.SupersedesRef = &CommitmentRef{SessionID: sid, CommitmentHash: h}
		}
	}
	return res, nil
}

func (s *Server) getResolution(w http.ResponseWriter, r *http.Request) {
	id, _, cerr := s.Identify(r, true, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	ctx, cancel := s.unaryCtx(r)
	defer cancel()
	res, cerr := s.resolution(ctx, id, r.PathValue("id"))
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	b, err := json.Marshal(res)
	if err != nil {
		WriteError(w, coord.Errorf(coord.CodeInternalError, "the response could not be encoded"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(append(b, '\n'))
}

// registerControl adds the control-plane methods to d for id, on both
// JSON-RPC carriers (/macp/ws and POST /macp/rpc):
//
//	macp/cancelSession  {"sessionId", "reason"?} -> <Ack JSON>
//	macp/suspendSession {"sessionId", "reason"?} -> <Ack JSON>
//	macp/resumeSession  {"sessionId", "reason"?} -> <Ack JSON>
//
// They are gRPC CancelSession, SuspendSession and ResumeSession (the
// initiator only). A refusal is -32000 with the MACPError (FORBIDDEN,
// SESSION_NOT_FOUND, SESSION_NOT_OPEN). macp/resumeSession reopens a
// SUSPENDED session (RFC-MACP-0001 §7.5); it is not session/resume, which
// re-attaches a connection to a session (docs/resume.md).
func (s *Server) registerControl(d *jsonrpc.Dispatcher, id coord.Identity) {
	for method, op := range map[string]controlOp{
		"macp/cancelSession":  s.rt.Cancel,
		"macp/suspendSession": s.rt.Suspend,
		"macp/resumeSession":  s.rt.Resume,
	} {
		d.Register(method, func(ctx context.Context, req *jsonrpc.Request) (any, *jsonrpc.Error) {
			var p struct {
				SessionID string `json:"sessionId"`
				Reason    string `json:"reason"`
			}
			if jerr := jsonrpc.Params(req, &p); jerr != nil {
				return nil, jerr
			}
			if p.SessionID == "" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: req.Method + ` needs {"sessionId": "...", "reason"?: "..."}`}
			}
			ack, cerr := op(ctx, id, p.SessionID, p.Reason)
			if cerr != nil {
				return nil, macpRPCError(cerr)
			}
			if !ack.GetOk() && ack.GetError() != nil {
				me := ack.GetError()
				return nil, &jsonrpc.Error{Code: wire.RPCMACPError, Message: me.GetCode() + ": " + me.GetMessage(), Data: json.RawMessage(mustCompact(me))}
			}
			b, err := wire.Compact(ack)
			if err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the ack could not be encoded"}
			}
			return json.RawMessage(b), nil
		})
	}
}
