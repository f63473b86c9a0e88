package session

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/protobuf/proto"
)

// Suspension and resumption (RFC-MACP-0001 §7.5, RFC-MACP-0003 §2). Both
// are Core control-plane operations served to sessions of both profiles:
// they did not exist in the April spec, so no April verdict changes.
//
// TTL accounting follows the RFC text: on suspend at t_s the remaining TTL
// banked = deadline - t_s is kept; on resume at t_r the deadline becomes
// t_r + banked, and SessionResumePayload.banked_ms records banked. A
// SUSPENDED session never expires on its pre-suspension deadline; it
// expires when its cumulative suspended time exceeds MaxSuspendMs.

// ControlEnvelope builds a runtime-emitted control envelope
// (SessionCancel, SessionSuspend or SessionResume) for this session.
func (s *Session) ControlEnvelope(messageType, messageID string, payload proto.Message, nowMs int64) *macpv1.Envelope {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(payload)
	return &macpv1.Envelope{
		MacpVersion:     coord.ProtocolVersion,
		Mode:            s.Binding.Mode,
		MessageType:     messageType,
		MessageId:       messageID,
		SessionId:       s.ID,
		Sender:          coord.RuntimeSender,
		TimestampUnixMs: nowMs,
		Payload:         b,
	}
}

// Suspend moves an OPEN session to SUSPENDED on behalf of caller, who must
// be the initiator (FORBIDDEN otherwise). A session that is not OPEN is
// SESSION_NOT_OPEN; a session whose deadline passed expires instead (the
// Outcome carries the Expire record and the error). messageID must be
// unique within the session; the shell generates it.
func (s *Session) Suspend(caller, reason, messageID string, nowMs int64) Outcome {
	if caller != s.Binding.Initiator {
		return Outcome{Err: coord.Errorf(coord.CodeForbidden, "only the initiator may suspend session %s", s.ID)}
	}
	if rec, ok := s.ExpireIfDue(nowMs); ok {
		return Outcome{Records: []Record{rec}, Err: coord.Errorf(coord.CodeSessionNotOpen, "session %s expired", s.ID)}
	}
	if s.Status != Open {
		return Outcome{Err: coord.Errorf(coord.CodeSessionNotOpen, "session %s is %s; only an OPEN session can be suspended", s.ID, s.Status)}
	}
	if _, dup := s.seen[messageID]; dup || messageID == "" {
		return Outcome{Err: coord.Errorf(coord.CodeInternalError, "suspend message id is not unique")}
	}
	env := s.ControlEnvelope(coord.TypeSessionSuspend, messageID, &macpv1.SessionSuspendPayload{Reason: reason, SuspendedBy: caller}, nowMs)
	s.Seq++
	s.seen[messageID] = struct{}{}
	s.BankedMs = s.DeadlineMs - nowMs
	s.SuspendedAtMs = nowMs
	s.Status = Suspended
	return Outcome{Records: []Record{{SessionID: s.ID, Seq: s.Seq, Kind: KindSuspend, AcceptedAtMs: nowMs, Envelope: env, Status: Suspended}}}
}

// Resume moves a SUSPENDED session back to OPEN on behalf of caller, who
// must be the initiator. A session that is not SUSPENDED is
// SESSION_NOT_OPEN. When the suspension cap is exceeded the session expires
// instead (the Outcome carries the Expire record and SESSION_NOT_OPEN).
func (s *Session) Resume(caller, reason, messageID string, nowMs int64) Outcome {
	if caller != s.Binding.Initiator {
		return Outcome{Err: coord.Errorf(coord.CodeForbidden, "only the initiator may resume session %s", s.ID)}
	}
	if rec, ok := s.ExpireIfDue(nowMs); ok {
		return Outcome{Records: []Record{rec}, Err: coord.Errorf(coord.CodeSessionNotOpen, "session %s expired: suspended longer than max_suspend_ms %d", s.ID, s.MaxSuspendMs)}
	}
	if s.Status != Suspended {
		return Outcome{Err: coord.Errorf(coord.CodeSessionNotOpen, "session %s is %s; only a SUSPENDED session can be resumed", s.ID, s.Status)}
	}
	if _, dup := s.seen[messageID]; dup || messageID == "" {
		return Outcome{Err: coord.Errorf(coord.CodeInternalError, "resume message id is not unique")}
	}
	banked := s.BankedMs
	env := s.ControlEnvelope(coord.TypeSessionResume, messageID, &macpv1.SessionResumePayload{Reason: reason, ResumedBy: caller, BankedMs: banked}, nowMs)
	s.Seq++
	s.seen[messageID] = struct{}{}
	s.endSuspension(nowMs)
	s.DeadlineMs = satAdd(nowMs, banked)
	s.BankedMs = 0
	s.Status = Open
	return Outcome{Records: []Record{{SessionID: s.ID, Seq: s.Seq, Kind: KindResume, AcceptedAtMs: nowMs, Envelope: env, Status: Open}}}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > maxInt64-b {
		return maxInt64
	}
	return a + b
}

const maxInt64 = 1<<63 - 1

// applyControl replays a stored SessionSuspend or SessionResume record by
// re-deciding it with Suspend/Resume's own rules.
func (s *Session) applyControl(rec Record) error {
	env := rec.Envelope
	want := coord.TypeSessionSuspend
	if rec.Kind == KindResume {
		want = coord.TypeSessionResume
	}
	if env == nil || env.MessageType != want || env.Sender != coord.RuntimeSender ||
		env.SessionId != s.ID || env.Mode != s.Binding.Mode || env.MacpVersion != coord.ProtocolVersion {
		return diverged(rec, "not a runtime %s envelope for this session", want)
	}
	var out Outcome
	if rec.Kind == KindSuspend {
		var p macpv1.SessionSuspendPayload
		if err := proto.Unmarshal(env.Payload, &p); err != nil {
			return diverged(rec, "payload is not a SessionSuspendPayload")
		}
		out = s.Suspend(p.SuspendedBy, p.Reason, env.MessageId, rec.AcceptedAtMs)
	} else {
		var p macpv1.SessionResumePayload
		if err := proto.Unmarshal(env.Payload, &p); err != nil {
			return diverged(rec, "payload is not a SessionResumePayload")
		}
		if p.BankedMs != s.BankedMs {
			return diverged(rec, "banked_ms %d, replay banked %d", p.BankedMs, s.BankedMs)
		}
		out = s.Resume(p.ResumedBy, p.Reason, env.MessageId, rec.AcceptedAtMs)
	}
	if out.Err != nil || len(out.Records) != 1 || out.Records[0].Kind != rec.Kind {
		return diverged(rec, "the %s would not be accepted: %v", rec.Kind, out.Err)
	}
	if !proto.Equal(out.Records[0].Envelope, env) {
		return diverged(rec, "the %s envelope differs from the one replay builds", rec.Kind)
	}
	return nil
}
