package session_test

// Lifecycle, TTL and cancellation (RFC-MACP-0001 §7.2-7.3; RFC-MACP-0003 §2;
// checklist TERM-1..3, TTL-1..3, CANCEL-2..5, ADM-19, ADM-20).

import (
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// RFC-MACP-0001 §7.3 "A session transitions from OPEN to RESOLVED when the
// first Mode-defined terminal condition is accepted" and "Reject any
// subsequent session-scoped messages for this session with a non-OPEN
// session error"; checklist TERM-2 "First accepted terminal wins races".
func TestFirstCommitmentResolves(t *testing.T) {
	for _, order := range [][2]string{{"c1", "c2"}, {"c2", "c1"}} {
		t.Run(order[0]+" first", func(t *testing.T) {
			s, _ := mustStart(t)
			mustAccept(t, s, note("n1", alice), t0+1)
			cs := map[string]*macpv1.CommitmentPayload{"c1": commitPayload(), "c2": commitPayload()}
			cs["c2"].CommitmentId, cs["c2"].Action, cs["c2"].OutcomePositive = "c-2", "testing.rejected", false
			out := s.Step(commit(t, order[0], initiator, cs[order[0]]), t0+2, session.DefaultLimits())
			if !out.Accepted() || !out.Resolved || len(out.Records) != 1 {
				t.Fatalf("first Commitment: %+v", out)
			}
			rec := out.Records[0]
			if rec.Kind != session.KindMessage || rec.Seq != 3 || rec.AcceptedAtMs != t0+2 || rec.Envelope.MessageId != order[0] {
				t.Fatalf("commit record %+v", rec)
			}
			if s.Status != session.Resolved || s.ClosedAtMs != t0+2 || !proto.Equal(s.Resolution, cs[order[0]]) {
				t.Fatalf("status %s closed %d resolution %v", s.Status, s.ClosedAtMs, s.Resolution)
			}
			if s.Metadata().State != macpv1.SessionState(session.Resolved) {
				t.Fatalf("metadata state %v", s.Metadata().State)
			}
			// The loser of the race.
			wantStepErr(t, s, commit(t, order[1], initiator, cs[order[1]]), t0+2, coord.CodeSessionNotOpen)
			wantStepErr(t, s, note("n2", alice), t0+3, coord.CodeSessionNotOpen)
			if !proto.Equal(s.Resolution, cs[order[0]]) {
				t.Fatalf("resolution changed to %v", s.Resolution)
			}
		})
	}
}

// RFC-MACP-0001 §7.3 "A session transitions from OPEN to EXPIRED when: TTL
// elapses"; checklist ADM-19 "deadline passed → move to EXPIRED, reject
// SESSION_NOT_OPEN"; TTL-2 (lazily on access); Record doc: KindExpire "is
// always the last record and takes the sequence number after the last
// envelope".
func TestStepAfterDeadlineExpires(t *testing.T) {
	s, _ := mustStart(t)
	mustAccept(t, s, note("n1", alice), t0+1)
	dl := s.DeadlineMs
	before := snap(s)
	out := s.Step(note("n2", alice), dl+5, session.DefaultLimits())
	if out.Err == nil || out.Err.Code != coord.CodeSessionNotOpen || out.Duplicate || out.Resolved {
		t.Fatalf("Step after deadline = %+v", out)
	}
	if len(out.Records) != 1 {
		t.Fatalf("want exactly the Expire record, got %+v", out.Records)
	}
	rec := out.Records[0]
	if rec.Kind != session.KindExpire || rec.Seq != 3 || rec.AcceptedAtMs != dl+5 || rec.Envelope != nil || rec.Start != nil || rec.SessionID != sid {
		t.Fatalf("expire record %+v", rec)
	}
	if s.Status != session.Expired || s.Seq != 3 || s.ClosedAtMs != dl+5 || s.Resolution != nil || s.Cancellation != nil {
		t.Fatalf("after expiry: %s seq %d closed %d", s.Status, s.Seq, s.ClosedAtMs)
	}
	// Only the lifecycle moved: no dedup slot, activity or mode state.
	after := snap(s)
	if after.proj["digest"] != before.proj["digest"] || len(after.seen) != len(before.seen) || s.Seen("n2") {
		t.Fatalf("the rejected message left traces: %s", before.diff(after))
	}
	// Exactly one Expire record: later messages are plain rejections.
	wantStepErr(t, s, note("n3", alice), dl+6, coord.CodeSessionNotOpen)
	wantStepErr(t, s, commit(t, "c1", initiator, commitPayload()), dl+7, coord.CodeSessionNotOpen)
	if _, ok := s.ExpireIfDue(dl + 8); ok {
		t.Fatal("ExpireIfDue on an expired session produced a record")
	}
}

// The deadline instant itself is expired, for Step and ExpireIfDue alike
// (RFC-MACP-0003 §2 "absolute expiration deadline"); one millisecond
// before it the session is OPEN and accepts messages.
func TestDeadlineBoundary(t *testing.T) {
	s, _ := mustStart(t)
	dl := s.DeadlineMs
	if _, ok := s.ExpireIfDue(dl - 1); ok || s.Status != session.Open {
		t.Fatal("ExpireIfDue expired one ms before the deadline")
	}
	mustAccept(t, s, note("n1", alice), dl-1)
	mustAccept(t, s, commit(t, "c1", initiator, commitPayload()), dl-1)
	if s.Status != session.Resolved {
		t.Fatal("commitment just before the deadline did not resolve")
	}

	s, _ = mustStart(t)
	rec, ok := s.ExpireIfDue(dl)
	if !ok || rec.Kind != session.KindExpire || rec.Seq != 2 || rec.AcceptedAtMs != dl || s.Status != session.Expired || s.ClosedAtMs != dl {
		t.Fatalf("ExpireIfDue at the deadline: %+v %v status %s", rec, ok, s.Status)
	}
	if _, ok := s.ExpireIfDue(dl + 1000); ok {
		t.Fatal("second ExpireIfDue produced a record")
	}

	s, _ = mustStart(t)
	out := s.Step(note("n1", alice), dl, session.DefaultLimits())
	if out.Err == nil || out.Err.Code != coord.CodeSessionNotOpen || len(out.Records) != 1 || out.Records[0].Kind != session.KindExpire {
		t.Fatalf("Step at the deadline: %+v", out)
	}
}

// A session with ttl 1 ms is OPEN for exactly the timestamp's millisecond
// range [ts, ts+1) (RFC-MACP-0001 §7.1 ttl_ms > 0; RFC-MACP-0003 §2).
func TestTTLOne(t *testing.T) {
	p := startPayload()
	p.TtlMs = 1
	s, _ := mustStartWith(t, p)
	if s.DeadlineMs != t0+1 {
		t.Fatalf("deadline %d", s.DeadlineMs)
	}
	mustAccept(t, s, note("n1", alice), t0)
	wantStepErr(t, s, note("n2", alice), t0+1, coord.CodeSessionNotOpen)
	if s.Status != session.Expired {
		t.Fatal("not expired")
	}
}

// ExpireIfDue leaves RESOLVED sessions alone (TERM-1 monotonic).
func TestExpireIfDueResolved(t *testing.T) {
	s, _ := mustStart(t)
	mustAccept(t, s, note("n1", alice), t0+1)
	mustAccept(t, s, commit(t, "c1", initiator, commitPayload()), t0+2)
	if _, ok := s.ExpireIfDue(s.DeadlineMs + 1); ok || s.Status != session.Resolved {
		t.Fatalf("ExpireIfDue changed a resolved session to %s", s.Status)
	}
}

// RFC-MACP-0001 §7.3 "Upon accepting a CancelSession request, the runtime
// MUST append a SessionCancel envelope (with SessionCancelPayload) to the
// session's accepted history"; §6 "cancelled_by ... MUST match the
// authenticated sender of the originating CancelSession RPC"; checklist
// CANCEL-3 "OPEN → EXPIRED".
func TestCancelByInitiator(t *testing.T) {
	s, _ := mustStart(t)
	mustAccept(t, s, note("n1", alice), t0+1)
	activity := s.Activity()
	out := s.Cancel(initiator, "no longer needed", "cancel-1", t0+2)
	if out.Err != nil || out.Duplicate || out.Resolved || len(out.Records) != 1 {
		t.Fatalf("Cancel = %+v", out)
	}
	rec := out.Records[0]
	if rec.Kind != session.KindCancel || rec.Seq != 3 || rec.AcceptedAtMs != t0+2 || rec.SessionID != sid || rec.Start != nil {
		t.Fatalf("cancel record %+v", rec)
	}
	e := rec.Envelope
	want := &macpv1.Envelope{
		MacpVersion:     coord.ProtocolVersion,
		Mode:            testModeID,
		MessageType:     coord.TypeSessionCancel,
		MessageId:       "cancel-1",
		SessionId:       sid,
		Sender:          coord.RuntimeSender,
		TimestampUnixMs: t0 + 2,
	}
	payload := e.Payload
	e2 := proto.Clone(e).(*macpv1.Envelope)
	e2.Payload = nil
	if !proto.Equal(e2, want) {
		t.Fatalf("cancel envelope\n got  %v\n want %v", e2, want)
	}
	var p macpv1.SessionCancelPayload
	if err := proto.Unmarshal(payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.CancelledBy != initiator || p.Reason != "no longer needed" {
		t.Fatalf("cancel payload %v", &p)
	}
	if s.Status != session.Expired || s.ClosedAtMs != t0+2 || s.Seq != 3 || !proto.Equal(s.Cancellation, &p) || s.Resolution != nil {
		t.Fatalf("after cancel: %s closed %d seq %d cancellation %v", s.Status, s.ClosedAtMs, s.Seq, s.Cancellation)
	}
	if !s.Seen("cancel-1") {
		t.Fatal("the cancel envelope's message_id is not in the dedup set")
	}
	// Activity doc: "The runtime's own emitted envelopes are not
	// participant activity."
	if got := s.Activity(); len(got) != len(activity) {
		t.Fatalf("cancel changed activity: %v -> %v", activity, got)
	}
	if s.Metadata().State != macpv1.SessionState(session.Expired) {
		t.Fatal("metadata state")
	}
	wantStepErr(t, s, note("n2", alice), t0+3, coord.CodeSessionNotOpen)
	// CancelEnvelope builds the same envelope the record holds.
	if ce := s.CancelEnvelope("cancel-1", initiator, "no longer needed", t0+2); !proto.Equal(ce, e) {
		t.Fatalf("CancelEnvelope %v != record %v", ce, e)
	}
}

// RFC-MACP-0001 §7.3 "By default, only the accepted SessionStart sender
// (session initiator) is authorized to submit CancelSession"; "Mode-specific
// authorization rules ... do NOT apply"; checklist CANCEL-2 -> FORBIDDEN.
func TestCancelByOthersForbidden(t *testing.T) {
	for _, pol := range []string{"", policyAny} {
		p := startPayload()
		p.PolicyVersion = pol
		s, _ := mustStartWith(t, p)
		for _, caller := range []string{alice, bob, mallory, coord.RuntimeSender, ""} {
			before := snap(s)
			out := s.Cancel(caller, "r", "cancel-"+caller, t0+1)
			if out.Err == nil || out.Err.Code != coord.CodeForbidden || len(out.Records) != 0 {
				t.Fatalf("policy %q: Cancel by %q = %+v", pol, caller, out)
			}
			if d := before.diff(snap(s)); d != "" {
				t.Fatalf("forbidden cancel changed the session: %s", d)
			}
		}
	}
}

// checklist CANCEL-4 "Idempotent: already RESOLVED/EXPIRED → ok with
// current state" (no records).
func TestCancelTerminalIsIdempotent(t *testing.T) {
	resolved, _ := mustStart(t)
	mustAccept(t, resolved, note("n1", alice), t0+1)
	mustAccept(t, resolved, commit(t, "c1", initiator, commitPayload()), t0+2)

	expired, _ := mustStart(t)
	expired.ExpireIfDue(expired.DeadlineMs)

	cancelled, _ := mustStart(t)
	if out := cancelled.Cancel(initiator, "first", "cancel-1", t0+1); out.Err != nil {
		t.Fatal(out.Err)
	}
	for name, s := range map[string]*session.Session{"resolved": resolved, "expired": expired, "cancelled": cancelled} {
		before := snap(s)
		// Even reusing a known id is fine: nothing is emitted.
		for _, id := range []string{"cancel-2", "cancel-1", ""} {
			out := s.Cancel(initiator, "again", id, s.DeadlineMs+5)
			if out.Err != nil || len(out.Records) != 0 || out.Duplicate || out.Resolved {
				t.Fatalf("%s: Cancel = %+v", name, out)
			}
		}
		if d := before.diff(snap(s)); d != "" {
			t.Fatalf("%s: idempotent cancel changed the session: %s", name, d)
		}
	}
}

// Cancel of an OPEN session whose deadline has passed expires it by TTL
// (KindExpire record, no SessionCancel): the TTL elapsed first
// (RFC-MACP-0003 §2 "If the TTL has elapsed before a terminal condition is
// accepted, the session transitions to EXPIRED").
func TestCancelAfterDeadline(t *testing.T) {
	s, _ := mustStart(t)
	out := s.Cancel(initiator, "late", "cancel-1", s.DeadlineMs)
	if out.Err != nil || len(out.Records) != 1 || out.Records[0].Kind != session.KindExpire || out.Records[0].Seq != 2 {
		t.Fatalf("Cancel after deadline = %+v", out)
	}
	if s.Status != session.Expired || s.Cancellation != nil || s.Seen("cancel-1") {
		t.Fatalf("status %s cancellation %v", s.Status, s.Cancellation)
	}
}

// The shell must supply a fresh, non-empty message id for the runtime's
// SessionCancel; a reused or empty one is an internal error and changes
// nothing.
func TestCancelMessageIDMustBeUnique(t *testing.T) {
	s, _ := mustStart(t)
	mustAccept(t, s, note("n1", alice), t0+1)
	for _, id := range []string{"", "n1", "m-start"} {
		before := snap(s)
		out := s.Cancel(initiator, "r", id, t0+2)
		if out.Err == nil || out.Err.Code != coord.CodeInternalError || len(out.Records) != 0 {
			t.Fatalf("Cancel with id %q = %+v", id, out)
		}
		if d := before.diff(snap(s)); d != "" {
			t.Fatalf("changed: %s", d)
		}
	}
}

// RFC-MACP-0001 §7.2 "Sessions MUST transition monotonically. No transition
// from RESOLVED or EXPIRED back to OPEN is permitted"; checklist TERM-1.
func TestNeverBackToOpen(t *testing.T) {
	type mk func(t *testing.T) *session.Session
	makers := map[string]mk{
		"resolved": func(t *testing.T) *session.Session {
			s, _ := mustStart(t)
			mustAccept(t, s, note("n1", alice), t0+1)
			mustAccept(t, s, commit(t, "c1", initiator, commitPayload()), t0+2)
			return s
		},
		"expired": func(t *testing.T) *session.Session {
			s, _ := mustStart(t)
			s.ExpireIfDue(s.DeadlineMs)
			return s
		},
		"cancelled": func(t *testing.T) *session.Session {
			s, _ := mustStart(t)
			s.Cancel(initiator, "r", "cancel-1", t0+1)
			return s
		},
	}
	for name, make := range makers {
		t.Run(name, func(t *testing.T) {
			s := make(t)
			final := s.Status
			attempts := []*macpv1.Envelope{
				note("a1", alice), note("n1", alice),
				commit(t, "a2", initiator, commitPayload()),
				startEnv(t, startPayload()),
				msg(coord.TypeSessionCancel, "a3", initiator, nil),
				msg(typeBlock, "a4", alice, nil),
			}
			for _, at := range []int64{t0, t0 + 3, s.DeadlineMs - 1, s.DeadlineMs, s.DeadlineMs + 1} {
				for _, e := range attempts {
					out := s.Step(e, at, session.DefaultLimits())
					if out.Accepted() || len(out.Records) != 0 || s.Status != final {
						t.Fatalf("%s at %d: %+v, status %s", e.MessageId, at, out, s.Status)
					}
				}
				s.Cancel(initiator, "r", "cancel-x", at)
				s.ExpireIfDue(at)
				if s.Status != final {
					t.Fatalf("status moved %s -> %s", final, s.Status)
				}
			}
		})
	}
}

// Status vocabulary mirrors macp.v1.SessionState (checklist PROTO: OPEN=1,
// RESOLVED=2, EXPIRED=3).
func TestStatusEnum(t *testing.T) {
	for st, want := range map[session.Status]macpv1.SessionState{
		session.Open: macpv1.SessionState_SESSION_STATE_OPEN, session.Resolved: macpv1.SessionState_SESSION_STATE_RESOLVED,
		session.Expired: macpv1.SessionState_SESSION_STATE_EXPIRED,
	} {
		if st.Proto() != want {
			t.Fatalf("%s.Proto() = %v, want %v", st, st.Proto(), want)
		}
	}
	if session.Open.Terminal() || !session.Resolved.Terminal() || !session.Expired.Terminal() || session.Status(0).Terminal() {
		t.Fatal("Terminal()")
	}
	if session.Status(0).String() != "UNSPECIFIED" || session.Open.String() != "OPEN" {
		t.Fatal("String()")
	}
	for k, s := range map[session.Kind]string{session.KindStart: "start", session.KindMessage: "message",
		session.KindCancel: "cancel", session.KindExpire: "expire", 0: "unknown"} {
		if k.String() != s {
			t.Fatalf("Kind %d String %q", k, k.String())
		}
	}
}
