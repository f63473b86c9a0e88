package session

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"google.golang.org/protobuf/proto"
)

// Implicit acceptance (RFC-MACP-0010 §5.1, RFC-MACP-0012 §4.5): a mode
// state that implements mode.ImplicitAccepter has an action the runtime
// takes for a participant when the bound policy's timeout passes (the
// handoff mode's implicit HandoffAccept). The core keeps the time since
// which the current action has been pending: the acceptance time of the
// record that made it pending, a value of the history, so replay computes
// the same. The action is due at pendingSince + timeout while the session
// is OPEN; a TTL deadline that comes first expires the session instead,
// and a suspended session takes no action (one that came due during the
// suspension is taken at resume).
//
// The runtime appends it as a KindImplicit record: the mode's message
// (e.g. HandoffAccept{implicit: true, accepted_by: target}) in an envelope
// from coord.RuntimeSender, like the other runtime-emitted records, so no
// client can forge it (a client-sent implicit accept is refused by the
// mode) and it is not participant activity.

// trackImplicit updates the pending action after a change of the mode
// state at nowMs.
func (s *Session) trackImplicit(nowMs int64) {
	ia, ok := s.modeState.(mode.ImplicitAccepter)
	if !ok {
		return
	}
	m, pending := ia.PendingImplicitAccept()
	if !pending {
		s.implicitKey, s.implicitSince = "", 0
		return
	}
	if key := m.Type + "\x00" + string(m.Payload); key != s.implicitKey {
		s.implicitKey, s.implicitSince = key, nowMs
	}
}

// ImplicitDueMs is when the pending implicit action is due, if there is
// one and the session is OPEN. The shell arms its timer for it.
func (s *Session) ImplicitDueMs() (int64, bool) {
	ia, ok := s.modeState.(mode.ImplicitAccepter)
	if !ok || s.Status != Open || s.implicitKey == "" {
		return 0, false
	}
	t := ia.ImplicitAcceptTimeoutMs(&s.Binding)
	if t == 0 || t > uint64(maxInt64-s.implicitSince) {
		return 0, false
	}
	return s.implicitSince + int64(t), true
}

// ImplicitIfDue takes the pending implicit action when it is due at nowMs
// and the session is OPEN with its deadline ahead, and returns the
// KindImplicit record to append (no records otherwise; an expiry that is
// due is left to ExpireIfDue). messageID is the fresh id of the
// runtime-emitted envelope; the shell generates it.
func (s *Session) ImplicitIfDue(nowMs int64, messageID string) Outcome {
	due, ok := s.ImplicitDueMs()
	if !ok || nowMs < due {
		return Outcome{}
	}
	if _, expiring := s.ExpireIfDueAt(nowMs); expiring {
		return Outcome{}
	}
	if _, dup := s.seen[messageID]; dup || messageID == "" {
		return Outcome{Err: coord.Errorf(coord.CodeInternalError, "implicit action message id is not unique")}
	}
	ia := s.modeState.(mode.ImplicitAccepter)
	m, _ := ia.PendingImplicitAccept()
	env := &macpv1.Envelope{
		MacpVersion:     coord.ProtocolVersion,
		Mode:            s.Binding.Mode,
		MessageType:     m.Type,
		MessageId:       messageID,
		SessionId:       s.ID,
		Sender:          coord.RuntimeSender,
		TimestampUnixMs: nowMs,
		Payload:         m.Payload,
	}
	m.ID = messageID
	if err := ia.StepImplicit(&s.Binding, &m); err != nil {
		return Outcome{Err: coord.AsError(err)}
	}
	s.Seq++
	s.seen[messageID] = struct{}{}
	s.trackImplicit(nowMs)
	return Outcome{Records: []Record{{SessionID: s.ID, Seq: s.Seq, Kind: KindImplicit, AcceptedAtMs: nowMs, Envelope: env, Status: s.Status}}}
}

// ExpireIfDueAt reports whether ExpireIfDue would expire the session at
// nowMs, without changing it.
func (s *Session) ExpireIfDueAt(nowMs int64) (int64, bool) {
	due, ok := s.ExpiryMs()
	return due, ok && nowMs >= due
}

// applyImplicit replays a stored KindImplicit record by taking the action
// again with the recorded message id and time; the envelope must be the
// one that builds.
func (s *Session) applyImplicit(rec Record) error {
	env := rec.Envelope
	if env == nil || env.Sender != coord.RuntimeSender || env.SessionId != s.ID || env.Mode != s.Binding.Mode || env.MacpVersion != coord.ProtocolVersion {
		return diverged(rec, "not a runtime-emitted implicit action for this session")
	}
	out := s.ImplicitIfDue(rec.AcceptedAtMs, env.MessageId)
	if out.Err != nil || len(out.Records) != 1 {
		return diverged(rec, "no implicit action is due at %d: %v", rec.AcceptedAtMs, out.Err)
	}
	if !proto.Equal(out.Records[0].Envelope, env) {
		return diverged(rec, "the implicit action differs from the one replay builds")
	}
	return nil
}
