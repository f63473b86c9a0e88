package runtime

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// Session-level authorization (RFC-MACP-0004 §4; docs/security.md
// "Authorization matrix").
//
// Members of a session are its initiator and its declared participants.
// They may send session messages (which ones is the mode's rule), read it
// (GetSession, ListSessions, WatchSessions, subscribe) and see the
// Signals related to it. Observer identities may read every session and
// see every Signal but send nothing they could not send otherwise. A
// policy's designated commitment authority may also send the Commitment.
//
// Outsiders learn that a session id they already hold exists (FORBIDDEN
// instead of SESSION_NOT_FOUND; the conformance fixtures require FORBIDDEN
// for an outsider's message, and SESSION_ALREADY_EXISTS on SessionStart
// reveals existence to anyone anyway) and nothing else: no state, mode,
// participants, message ids or history, and their envelopes have no
// effect - they are refused before deduplication, the deadline check and
// the mode. Session ids are unguessable (coord.ValidSessionID: at least
// 122 random bits), so probing ids finds nothing.

// mayAct authorizes a session-scoped envelope for its session; the caller
// holds the session's lock. nil means "let the session and the mode
// decide". It runs before deduplication, so an outsider cannot learn
// which message ids were accepted (a duplicate answer) or the session's
// state (SESSION_NOT_OPEN, the Ack's session_state).
func mayAct(s *session.Session, env *macpv1.Envelope) *coord.Error {
	b := &s.Binding
	sender := env.Sender
	if env.MessageType == coord.TypeSessionStart && sender != b.Initiator {
		// A SessionStart for an existing id fails so, whoever sends it;
		// only the initiator's resend can be a duplicate.
		return coord.Errorf(coord.CodeSessionAlreadyExists, "session %s already exists", s.ID)
	}
	if sender == b.Initiator || b.IsParticipant(sender) {
		return nil
	}
	if env.MessageType == coord.TypeCommitment && b.Policy != nil && b.Policy.MayCommit(sender, b.Initiator, b.Participants) {
		return nil // a designated commitment authority outside the participants
	}
	return coord.Errorf(coord.CodeForbidden, "%s is not a participant of session %s", sender, s.ID)
}

// authorizeStep is step's hook: mayAct, logged when it refuses (RFC-MACP-0004
// §8: authorization failures are audited).
func (r *Runtime) authorizeStep(s *session.Session, env *macpv1.Envelope) *coord.Error {
	cerr := mayAct(s, env)
	if cerr != nil && cerr.Code == coord.CodeForbidden {
		r.log.Info("authorization denied", "sender", env.Sender, "session_id", s.ID, "message_type", env.MessageType)
	}
	return cerr
}

// ambientSession is the session an ambient envelope relates to: its
// session_id (Progress may carry one) or a Signal's
// correlation_session_id; "" if none. A payload that does not parse
// relates to nothing (CheckAmbient refuses it later).
func ambientSession(env *macpv1.Envelope) string {
	if env.GetSessionId() != "" {
		return env.SessionId
	}
	if env.GetMessageType() != coord.TypeSignal {
		return ""
	}
	var p macpv1.SignalPayload
	if proto.Unmarshal(env.GetPayload(), &p) != nil {
		return ""
	}
	return p.CorrelationSessionId
}

// mayRelateAmbient refuses (FORBIDDEN) a Signal or Progress that names a
// session its sender may not read: outsiders cannot push Signals at a
// session's members. A session that does not exist (yet) may be named.
func (r *Runtime) mayRelateAmbient(ctx context.Context, id coord.Identity, env *macpv1.Envelope) *coord.Error {
	if id.Caps.IsObserver || len(env.GetPayload()) > r.opts.Limits.MaxPayloadBytes {
		return nil // oversized: CheckEnvelope refuses it without parsing
	}
	sid := ambientSession(env)
	if sid == "" {
		return nil
	}
	if known, ok := r.mayRead(ctx, id, sid); known && !ok {
		r.log.Info("authorization denied", "sender", id.Sender, "session_id", sid, "message_type", env.MessageType)
		return coord.Errorf(coord.CodeForbidden, "%s may not relate a %s to session %s", id.Sender, env.MessageType, sid)
	}
	return nil
}

// mayRead reports whether the session exists (resident, or terminal in
// the store) and whether id may read it. It never loads a session.
func (r *Runtime) mayRead(ctx context.Context, id coord.Identity, sessionID string) (known, allowed bool) {
	if o := r.lookup(sessionID); o != nil {
		if sender := id.Sender; sender == o.initiator || id.Caps.IsObserver {
			return true, true
		}
		o.mu.Lock()
		s := o.sess
		if s != nil {
			allowed = visible(id, s)
		}
		o.mu.Unlock()
		if s != nil {
			return true, allowed
		}
	}
	if md, ok := r.storedMetadata(ctx, sessionID); ok {
		return true, MayObserveMetadata(id, md)
	}
	return false, false
}

// MaySeeSignal reports whether a WatchSignals subscriber id may receive
// the ambient envelope env (RFC-MACP-0004 §4.1; docs/security.md):
//
//   - observers receive every Signal and Progress;
//   - the sender receives its own;
//   - one related to an existing session (Progress with a session_id, a
//     Signal with correlation_session_id) goes to that session's initiator
//     and declared participants only;
//   - any other (unrelated, or naming a session that does not exist) goes
//     to every authenticated subscriber: there is nothing to protect, and
//     only members can send one related to an existing session.
func (r *Runtime) MaySeeSignal(ctx context.Context, id coord.Identity, env *macpv1.Envelope) bool {
	if id.Caps.IsObserver || (id.Sender != "" && env.GetSender() == id.Sender) {
		return true
	}
	if id.Sender == "" {
		return false
	}
	sid := ambientSession(env)
	if sid == "" {
		return true
	}
	known, ok := r.mayRead(ctx, id, sid)
	return ok || !known
}

// MayRead reports whether a session exists (in memory, or terminal in the
// store) and whether id may read it (initiator, declared participant,
// observer). It never loads a session; transports use it to decide what
// to count against a session before the runtime answers.
func (r *Runtime) MayRead(ctx context.Context, id coord.Identity, sessionID string) (known, allowed bool) {
	return r.mayRead(ctx, id, sessionID)
}
