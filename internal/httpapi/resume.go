package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/jsonrpc"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/streambudget"
	"github.com/macpd/macpd/internal/wire"
)

// Resumable sessions, protocol mode (docs/resume.md "Protocol mode"):
// JSON-RPC methods that attach a connection to an MACP session, so that
// the session, not the connection, is what a client resumes.
//
//	session/start  {"envelope": <SessionStart>}           -> {"sessionId", "ack"}        attaches (from seq 0)
//	session/resume {"sessionId", "lastSessionEventId"?}   -> {"resumed": true, "catchup", "sessionId", "sessionEventId"}
//	session/end    {"sessionId"}                          -> {"sessionId", "ended", "cancelled"}
//	session/get    {"sessionId"}                          -> {"sessionId", "sessionEventId", "metadata"}
//
// Notifications per attachment:
//
//	notifications/macp/envelope {"sessionId", "sessionEventId", "envelope"}  every accepted envelope, in order, never coalesced
//	notifications/macp/session  {"sessionId", "sessionEventId": N.5, "metadata"}  the state after record N; coalesced
//	notifications/macp/detached {"sessionId", "reason", "lastSessionEventId"} final: superseded by a newer attachment
//	notifications/macp/end      {"sessionId", "lastSequence"}                 the session is terminal, all delivered
//
// The sessionEventId is the session's accepted-history sequence number,
// the cursor of every transport (gRPC after_sequence, SSE Last-Event-ID,
// WebSocket macp/subscribe afterSequence).
//
// One active connection per caller and session: a new attachment of the
// same identity ends its previous one (notifications/macp/detached, then
// nothing more) and its other follows of the session (gRPC, SSE,
// macp/subscribe), on this node and, in a cluster, on the others
// (runtime/attach.go).

const (
	rpcSession  = "notifications/macp/session"
	rpcDetached = "notifications/macp/detached"

	// ResumeCapability is the manifest / Initialize experimental feature
	// key of protocol-mode sessions; its value is the protocol version.
	ResumeCapability = "macp.session-resume"
	resumeVersion    = "1"
)

// rpcSink is a connection that carries protocol-mode notifications.
type rpcSink interface {
	// enqueue queues one message; false when ctx or the connection ended.
	enqueue(ctx context.Context, msg []byte) bool
	// enqueueCharged is enqueue for a message charged to a feed window
	// (feedwindow.go): done is called once it was written or dropped.
	enqueueCharged(ctx context.Context, msg []byte, c *feedCharge) bool
	// identity is the connection's authenticated caller.
	identity() coord.Identity
	// connCtx ends with the connection.
	connCtx() context.Context
}

type attachKey struct{ sender, session string }

// attachment is one connection's protocol-mode attachment to a session.
type attachment struct {
	key    attachKey
	sink   rpcSink
	cancel context.CancelFunc
	done   chan struct{} // closed when nothing more will be sent for it

	mu     sync.Mutex
	last   uint64 // last delivered sessionEventId
	reason string // set when superseded
}

func (a *attachment) lastSeq() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// attachments is the listener-wide registry enforcing one active
// attachment per caller and session.
type attachments struct {
	mu      sync.Mutex
	m       map[attachKey]*attachment
	streams *rpcStreams // HTTP notification streams (rpc.go), made on first use
}

func newAttachments() *attachments { return &attachments{m: make(map[attachKey]*attachment)} }

// put registers a and supersedes the previous attachment of its key.
func (r *attachments) put(a *attachment) {
	r.mu.Lock()
	prev := r.m[a.key]
	r.m[a.key] = a
	r.mu.Unlock()
	if prev != nil && prev != a {
		prev.mu.Lock()
		prev.reason = supersededReason
		prev.mu.Unlock()
		prev.cancel()
	}
}

func (r *attachments) remove(a *attachment) {
	r.mu.Lock()
	if r.m[a.key] == a {
		delete(r.m, a.key)
	}
	r.mu.Unlock()
}

// supersededReason is the reason of every follow ended because the same
// caller attached to the session elsewhere; clients recognise the prefix
// "superseded:" as final (sdk.SupersededPrefix).
const supersededReason = "superseded: the same caller resumed this session on another connection (session/resume or session/start); do not reconnect"

// attach starts delivering session sid to sink after `after` (catch-up
// within the replay window, else none of the missed envelopes). stateSeen:
// the client resumed from the state notification after `after` (after.5),
// so that state is not sent again. reply is
// called once, before any notification, with the outcome; on a refusal
// it gets the error and nothing is attached.
func (s *Server) attach(sink rpcSink, sid string, after uint64, stateSeen, batch bool, onStart func(a *attachment, catchup bool, from uint64), onFail func(*coord.Error), onExit func(*attachment)) {
	id := sink.identity()
	ctx, cancel := context.WithCancel(sink.connCtx())
	a := &attachment{key: attachKey{id.Sender, sid}, sink: sink, cancel: cancel, done: make(chan struct{}), last: after}
	openedMs := s.nowMs()
	go func() {
		defer close(a.done)
		defer cancel()
		fw := s.newFeedWindow() // feedwindow.go
		defer fw.end()
		started, catchup, registered := false, true, false
		untrack := func() {}
		// sendState sends the session's state as of record `at`, the last
		// record this attachment delivered, labelled with the state event
		// id "at.5" (stateEventID), when it differs from the last state
		// sent. It runs on the delivery goroutine, so it is ordered after
		// envelope `at` and before envelope at+1 by construction. The
		// state is read together with its sequence number: when records
		// after `at` exist it sends nothing, since it will run again after
		// the last of them is delivered.
		var lastState []byte
		sendState := func(at uint64) {
			if stateSeen && at == after {
				return // the client has it: it resumed from after.5
			}
			if l, ok := s.rt.LastSeq(sid); ok && l != at {
				return
			}
			var md *macpv1.SessionMetadata
			if cerr := s.rt.Inspect(ctx, sid, func(ss *session.Session) {
				if ss.Seq == at {
					md = ss.Metadata()
				}
			}); cerr != nil || md == nil {
				return
			}
			b, err := wire.Compact(md)
			if err != nil || bytes.Equal(b, lastState) {
				return
			}
			if sink.enqueue(ctx, jsonrpc.Notify(rpcSession, map[string]any{"sessionId": sid, "sessionEventId": stateEventID(at), "metadata": json.RawMessage(b)})) {
				lastState = b
			}
		}
		deliver := func(rec session.Record) error {
			cost := streambudget.Cost(rec)
			if rec.Envelope == nil {
				fw.w.Release(cost)
			} else {
				c := fw.queued(cost)
				var msg []byte
				var err error
				if bs, ok := sink.(interface{ binaryFeed() bool }); ok && bs.binaryFeed() {
					msg = envelopeFrame(rec.Seq, rec.Envelope) // ws_binary.go
				} else {
					var b []byte
					if b, err = s.encodeFeed(ctx, rec.Seq, rec.Envelope, false); err == nil {
						msg = envelopeNotification(sid, rec.Seq, b)
					}
				}
				if err == nil {
					err = c.grow(ctx, int64(len(msg))) // what the queue holds
				}
				if err != nil {
					c.done(false)
					return err
				}
				if bs, ok := sink.(batchSink); ok && batch && !isFrame(msg) {
					if !bs.enqueueBatchable(ctx, msg, c, sid) {
						return ctx.Err()
					}
				} else if !sink.enqueueCharged(ctx, msg, c) {
					return ctx.Err()
				}
			}
			a.mu.Lock()
			a.last = rec.Seq
			a.mu.Unlock()
			sendState(rec.Seq)
			return nil
		}
		opts := runtime.FollowOptions{LiveSinceMs: openedMs, Window: fw.w, ReplayWindow: uint64(s.opts.ReplayWindow),
			// Outside the replay window the follow starts at the
			// session's end (from = last): catchup false.
			OnReplayCut: func(uint64) { catchup = false },
		}
		opts.OnStartAfter = func(_, from uint64) {
			started = true
			a.mu.Lock()
			a.last = from
			a.mu.Unlock()
			s.attached.put(a)
			// ... and the caller's other follows of sid end: gRPC, SSE,
			// macp/subscribe, here and on the other nodes of a cluster
			// (runtime/attach.go). Then this attachment is tracked, so that
			// a later resume elsewhere (another node too) ends it.
			s.rt.Attachments().Supersede(id.Sender, sid)
			untrack = s.rt.Attachments().Track(id.Sender, sid, func() {
				a.mu.Lock()
				a.reason = supersededReason
				a.mu.Unlock()
				a.cancel()
			})
			registered = true
			onStart(a, catchup, from)
			// The latest state follows the response even when nothing
			// was missed (when records follow, it follows the last of
			// them instead).
			sendState(from)
		}
		err := s.rt.Follow(ctx, id, sid, after, opts, deliver)
		if !started {
			onFail(followError(err))
			return
		}
		if registered {
			s.attached.remove(a)
			untrack()
		}
		a.mu.Lock()
		reason := a.reason
		a.mu.Unlock()
		cctx := sink.connCtx()
		switch {
		case reason != "":
			sink.enqueue(cctx, jsonrpc.Notify(rpcDetached, map[string]any{"sessionId": sid, "reason": reason, "lastSessionEventId": a.lastSeq()}))
		case ctx.Err() != nil:
			// detached (session/end) or the connection ended: nothing more
		case errors.Is(err, runtime.ErrFollowEnded):
			sendState(a.lastSeq())
			sink.enqueue(cctx, jsonrpc.Notify(rpcEnd, map[string]any{"sessionId": sid, "lastSequence": a.lastSeq()}))
		case err != nil:
			sink.enqueue(cctx, jsonrpc.Notify(rpcError, map[string]any{"sessionId": sid, "lastSequence": a.lastSeq(), "error": json.RawMessage(mustCompact(wire.ErrorOf(followError(err))))}))
		}
		if onExit != nil {
			onExit(a)
		}
	}()
}

// protoParams are the protocol-mode methods' params.
type protoParams struct {
	SessionID          string          `json:"sessionId"`
	LastSessionEventID json.RawMessage `json:"lastSessionEventId"`
	// Batch (session/resume on a WebSocket): envelope notifications that
	// are queued together leave as one notifications/macp/envelopes
	// (wsbatch.go).
	Batch    bool            `json:"batch"`
	Envelope json.RawMessage `json:"envelope"`
}

func parseProto(req *jsonrpc.Request, needSession bool) (protoParams, *jsonrpc.Error) {
	var p protoParams
	if jerr := jsonrpc.Params(req, &p); jerr != nil {
		return p, jerr
	}
	if needSession && p.SessionID == "" {
		return p, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: req.Method + ` needs {"sessionId": "..."}`}
	}
	return p, nil
}

// stateEventID is the sessionEventId of a notifications/macp/session that
// carries the state as of record seq: the JSON number seq.5. It sorts
// after envelope seq and before envelope seq+1, no envelope has it, and
// its integer part is the cursor it resumes from (docs/resume.md "Event
// ids").
func stateEventID(seq uint64) json.Number {
	return json.Number(strconv.FormatUint(seq, 10) + ".5")
}

// lastEventID parses lastSessionEventId: absent, null, or a sessionEventId
// as notifications carry it: an envelope's N or a state notification's
// N.5 (a JSON number or a decimal string). It returns the sequence
// number to resume after, N in both cases.
func lastEventID(raw json.RawMessage) (n uint64, state bool, jerr *jsonrpc.Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	v := string(raw)
	if v[0] == '"' {
		if err := json.Unmarshal(raw, &v); err != nil {
			v = ""
		}
	}
	w := strings.TrimSuffix(v, ".5")
	n, err := strconv.ParseUint(w, 10, 64)
	if err != nil {
		return 0, false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "lastSessionEventId must be a sessionEventId: N (an envelope's) or N.5 (a state notification's), N = 0, 1, 2, ..."}
	}
	return n, w != v, nil
}

// rpcGet answers session/get: the metadata and the current sequence
// number (read first, so the metadata is at least that recent).
func (s *Server) rpcGet(ctx context.Context, id coord.Identity, sid string) (any, *jsonrpc.Error) {
	last, _ := s.rt.LastSeq(sid)
	md, cerr := s.rt.GetSession(ctx, id, sid)
	if cerr != nil {
		return nil, macpRPCError(cerr)
	}
	b, err := wire.Compact(md)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the metadata could not be encoded"}
	}
	out := map[string]any{"sessionId": sid, "sessionEventId": last, "metadata": json.RawMessage(b)}
	// The session's bound profile and, once RESOLVED, its commitment hash
	// (the supersedes reference a later Commitment names), as
	// GET /macp/session/{id}/resolution has them.
	if res, cerr := s.resolutionOf(ctx, md); cerr == nil {
		out["profile"] = res.Profile
		if res.CommitmentHash != "" {
			out["commitmentHash"] = res.CommitmentHash
		}
	}
	return out, nil
}

// endSession cancels sid when id is its initiator and it is live, OPEN or
// SUSPENDED (session/end): it ends EXPIRED under profile 2026-04 and
// CANCELLED under latest, as CancelSession. Anyone else only detaches.
func (s *Server) endSession(ctx context.Context, id coord.Identity, sid string) bool {
	md, cerr := s.rt.GetSession(ctx, id, sid)
	if cerr != nil || md.GetInitiator() != id.Sender || !liveState(md.GetState()) {
		return false
	}
	ack, cerr := s.rt.Cancel(ctx, id, sid, "session/end by the initiator")
	return cerr == nil && ack.GetOk()
}

// liveState reports whether a session in state st may still change: OPEN
// or SUSPENDED (RESOLVED, EXPIRED and CANCELLED are terminal).
func liveState(st macpv1.SessionState) bool {
	return st == macpv1.SessionState_SESSION_STATE_OPEN || st == macpv1.SessionState_SESSION_STATE_SUSPENDED
}

// ResumeFeatures is the advertisement of protocol-mode sessions: the
// manifest's metadata and the WebSocket endpoint's metadata carry it, and
// Initialize's experimental features should too (docs/resume.md). The
// replay window is a number of records per session; "0" means the whole
// retained history.
func ResumeFeatures(replayWindow int) map[string]string {
	return map[string]string{
		ResumeCapability:                    resumeVersion,
		ResumeCapability + ".replay_window": strconv.Itoa(replayWindow),
	}
}
