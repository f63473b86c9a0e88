package session_test

// Idempotency and the accepted-history discipline (RFC-MACP-0001 §8.2-8.3;
// checklist IDEM-1..5, ADM-15..18, ADM-30, START-7, C1, C2).

import (
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// wantDuplicate offers env and checks it is a side-effect-free duplicate.
func wantDuplicate(t *testing.T, s *session.Session, env *macpv1.Envelope, now int64) {
	t.Helper()
	before := snap(s)
	out := s.Step(env, now, session.DefaultLimits())
	if !out.Duplicate || out.Err != nil || len(out.Records) != 0 || out.Resolved || out.Accepted() {
		t.Fatalf("Step(%s %s) = %+v (err %v), want a duplicate with no records", env.MessageType, env.MessageId, out, out.Err)
	}
	if d := before.diff(snap(s)); d != "" {
		t.Fatalf("duplicate changed the session: %s", d)
	}
}

// RFC-MACP-0001 §8.2 "If an Envelope with a previously accepted message_id
// is received within the same session, the runtime MUST treat it as a
// duplicate and MUST NOT create side effects"; checklist IDEM-1, IDEM-2
// (Ack ok=true, duplicate=true).
func TestDuplicateHasNoSideEffects(t *testing.T) {
	s, _ := mustStart(t)
	mustAccept(t, s, note("n1", alice), t0+1)
	wantDuplicate(t, s, note("n1", alice), t0+2)
	// Same message_id, different content and sender: still the same message.
	other := msg(typeNote, "n1", bob, []byte("completely different"))
	wantDuplicate(t, s, other, t0+3)
	// A duplicate of a message type that would now be rejected.
	wantDuplicate(t, s, msg(typeBlock, "n1", alice, nil), t0+4)
	// A duplicate from a non-participant (authority is not re-checked).
	wantDuplicate(t, s, note("n1", mallory), t0+5)
	// Activity did not count the duplicates (IDEM-1 "no side effects").
	for _, a := range s.Activity() {
		if a.ParticipantID == alice && (a.MessageCount != 1 || a.LastMessageMs != t0+1) {
			t.Fatalf("duplicate counted as activity: %+v", a)
		}
	}
}

// checklist IDEM-2 "[RT] dedups before the OPEN check, so a retried final
// Commitment gets ok+duplicate"; C1 (dedup before state); ADM-17 before
// ADM-19/20.
func TestDuplicateAfterTerminal(t *testing.T) {
	t.Run("resolved", func(t *testing.T) {
		s, _ := mustStart(t)
		mustAccept(t, s, note("n1", alice), t0+1)
		c := commit(t, "c1", initiator, commitPayload())
		mustAccept(t, s, c, t0+2)
		wantDuplicate(t, s, c, t0+3)                           // retried final Commitment
		wantDuplicate(t, s, note("n1", alice), t0+4)           // earlier message
		wantDuplicate(t, s, startEnv(t, startPayload()), t0+5) // the SessionStart
		wantStepErr(t, s, note("n2", alice), t0+6, coord.CodeSessionNotOpen)
	})
	t.Run("expired by TTL", func(t *testing.T) {
		s, _ := mustStart(t)
		mustAccept(t, s, note("n1", alice), t0+1)
		if _, ok := s.ExpireIfDue(s.DeadlineMs); !ok {
			t.Fatal("not expired at deadline")
		}
		wantDuplicate(t, s, note("n1", alice), s.DeadlineMs+1)
		wantStepErr(t, s, note("n2", alice), s.DeadlineMs+1, coord.CodeSessionNotOpen)
	})
	t.Run("cancelled", func(t *testing.T) {
		s, _ := mustStart(t)
		mustAccept(t, s, note("n1", alice), t0+1)
		if out := s.Cancel(initiator, "stop", "cancel-1", t0+2); out.Err != nil {
			t.Fatal(out.Err)
		}
		wantDuplicate(t, s, note("n1", alice), t0+3)
		// The runtime's cancel message_id occupies a slot too.
		wantDuplicate(t, s, note("cancel-1", alice), t0+3)
	})
	t.Run("deadline passed, not yet expired", func(t *testing.T) {
		// Dedup (step 2) precedes the deadline check (step 4): the
		// duplicate is answered without expiring the session.
		s, _ := mustStart(t)
		mustAccept(t, s, note("n1", alice), t0+1)
		wantDuplicate(t, s, note("n1", alice), s.DeadlineMs+10)
		if s.Status != session.Open {
			t.Fatalf("duplicate expired the session")
		}
	})
}

// RFC-MACP-0001 §8.3 "Rejected Envelopes MUST NOT ... consume message_id
// deduplication slots"; checklist ADM-30 "don't consume the message_id (may
// be re-sent)".
func TestRejectedMessageIDIsReusable(t *testing.T) {
	s, _ := mustStart(t)
	// Mode rejection (INVALID_ENVELOPE), then the same id is accepted.
	wantStepErr(t, s, msg(typeBlock, "x1", alice, nil), t0+1, coord.CodeInvalidEnvelope)
	if s.Seen("x1") {
		t.Fatal("rejected message consumed its id")
	}
	mustAccept(t, s, note("x1", alice), t0+2)
	// Authority rejection (FORBIDDEN), then accepted from a participant.
	wantStepErr(t, s, note("x2", mallory), t0+3, coord.CodeForbidden)
	mustAccept(t, s, note("x2", bob), t0+4)
	// Commitment rejections (FORBIDDEN, INVALID_ENVELOPE), then accepted.
	wantStepErr(t, s, commit(t, "x3", alice, commitPayload()), t0+5, coord.CodeForbidden)
	bad := commitPayload()
	bad.Reason = ""
	wantStepErr(t, s, commit(t, "x3", initiator, bad), t0+6, coord.CodeInvalidEnvelope)
	// Structural rejection.
	big := note("x3", alice)
	big.Payload = make([]byte, session.DefaultLimits().MaxPayloadBytes+1)
	wantStepErr(t, s, big, t0+6, coord.CodePayloadTooLarge)
	wrongMode := note("x3", alice)
	wrongMode.Mode = "macp.mode.decision.v1"
	wantStepErr(t, s, wrongMode, t0+6, coord.CodeInvalidEnvelope)
	mustAccept(t, s, commit(t, "x3", initiator, commitPayload()), t0+7)
	if s.Status != session.Resolved {
		t.Fatalf("status %s", s.Status)
	}
}

// A message rejected because the session is not OPEN does not consume its id
// either (RFC-MACP-0001 §8.3): it stays a SESSION_NOT_OPEN rejection on
// every resend rather than turning into a duplicate.
func TestNotOpenRejectionDoesNotConsumeID(t *testing.T) {
	s, _ := mustStart(t)
	out := wantStepErr(t, s, note("late", alice), s.DeadlineMs, coord.CodeSessionNotOpen)
	if len(out.Records) != 1 || out.Records[0].Kind != session.KindExpire {
		t.Fatalf("first late message should carry the Expire record: %+v", out.Records)
	}
	if s.Seen("late") {
		t.Fatal("rejected late message consumed its id")
	}
	out = wantStepErr(t, s, note("late", alice), s.DeadlineMs+1, coord.CodeSessionNotOpen)
	if len(out.Records) != 0 {
		t.Fatalf("second late message produced records: %+v", out.Records)
	}
}

// checklist START-7 / C2: "architecture.md §7.2 and [RT] answer a
// same-message_id resend as duplicate"; RFC-MACP-0001 §8.2 "a SessionStart
// ... for a session_id that already has an accepted SessionStart ... MUST
// [be rejected] with SESSION_ALREADY_EXISTS, regardless of message_id"
// for every other message_id.
func TestSessionStartResend(t *testing.T) {
	s, _ := mustStart(t)
	wantDuplicate(t, s, startEnv(t, startPayload()), t0+1)
	// Same message_id with a different payload is still the same message.
	p := startPayload()
	p.TtlMs = 5
	wantDuplicate(t, s, startEnv(t, p), t0+1)
	again := startEnv(t, startPayload())
	again.MessageId = "m-start-2"
	wantStepErr(t, s, again, t0+2, coord.CodeSessionAlreadyExists)
	// Also after the session ended.
	mustAccept(t, s, note("n1", alice), t0+3)
	mustAccept(t, s, commit(t, "c1", initiator, commitPayload()), t0+4)
	wantStepErr(t, s, again, t0+5, coord.CodeSessionAlreadyExists)
	wantDuplicate(t, s, startEnv(t, startPayload()), t0+5)
}

// RFC-MACP-0001 §7.3 "SessionCancel envelopes MUST NOT be submitted
// directly via the Send RPC; the runtime is the sole emitter"; checklist
// CANCEL-5, ADM-15 (FORBIDDEN or INVALID_ENVELOPE; this runtime: FORBIDDEN).
func TestClientSessionCancelForbidden(t *testing.T) {
	s, _ := mustStart(t)
	for _, sender := range []string{initiator, alice, mallory, coord.RuntimeSender} {
		env := msg(coord.TypeSessionCancel, "sc-"+sender, sender,
			marshal(t, &macpv1.SessionCancelPayload{Reason: "r", CancelledBy: sender}))
		wantStepErr(t, s, env, t0+1, coord.CodeForbidden)
	}
	if s.Status != session.Open {
		t.Fatal("client SessionCancel ended the session")
	}
}

// checklist SIG-5 "Session-scoped Signals are invalid"; SIG-2 Signals never
// mutate sessions; SIG-6 Progress never enters history.
func TestSignalAndProgressOnSession(t *testing.T) {
	s, _ := mustStart(t)
	sig := msg(coord.TypeSignal, "s1", alice, marshal(t, &macpv1.SignalPayload{SignalType: "x"}))
	wantStepErr(t, s, sig, t0+1, coord.CodeInvalidEnvelope)
	prog := msg(coord.TypeProgress, "p1", alice, marshal(t, &macpv1.ProgressPayload{ProgressToken: "t"}))
	wantStepErr(t, s, prog, t0+1, coord.CodeInvalidEnvelope)
}

// checklist ADM-18 "envelope.mode ≠ session mode → INVALID_ENVELOPE ([RT];
// blocks cross-mode injection)", and an envelope for another session.
func TestModeAndSessionMismatch(t *testing.T) {
	s, _ := mustStart(t)
	e := note("n1", alice)
	e.Mode = "macp.mode.decision.v1"
	wantStepErr(t, s, e, t0+1, coord.CodeInvalidEnvelope)
	c := commit(t, "c1", initiator, commitPayload())
	c.Mode = "ext.other.v1"
	wantStepErr(t, s, c, t0+1, coord.CodeInvalidEnvelope)
	other := note("n1", alice)
	other.SessionId = sid2
	wantStepErr(t, s, other, t0+1, coord.CodeInvalidEnvelope)
	// A known id with a mismatched mode is still a duplicate: dedup is
	// step 2, the mode check step 3 (ADM-17 before ADM-18).
	mustAccept(t, s, note("n1", alice), t0+2)
	wantDuplicate(t, s, e, t0+3)
}

// checklist IDEM-3 / RFC-MACP-0001 §8.3 "Ambient Signals carry a message_id
// ... but do NOT consume session-scoped deduplication slots": a Signal with
// the same id as a later session message leaves the id free.
func TestSignalDoesNotConsumeSlot(t *testing.T) {
	s, _ := mustStart(t)
	sig := msg(coord.TypeSignal, "shared", alice, marshal(t, &macpv1.SignalPayload{SignalType: "x"}))
	sig.SessionId, sig.Mode = "", ""
	if err := session.CheckEnvelope(sig, session.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if err := session.CheckAmbient(sig); err != nil {
		t.Fatal(err)
	}
	mustAccept(t, s, note("shared", alice), t0+1)
}

// Message ids are per session (RFC-MACP-0001 §8.2 "within the same
// session"): the same id is independent in two sessions.
func TestDedupIsPerSession(t *testing.T) {
	a, _ := mustStart(t)
	e := startEnv(t, startPayload())
	e.SessionId = sid2
	b, _, err := session.Start(e, t0, deps())
	if err != nil {
		t.Fatal(err)
	}
	mustAccept(t, a, note("same", alice), t0+1)
	n := note("same", alice)
	n.SessionId = sid2
	mustAccept(t, b, n, t0+1)
}
