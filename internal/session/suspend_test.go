package session_test

// RFC-MACP-0001 §7.2 (states), §7.3 (CANCELLED), §7.5 (suspension and
// resume), §7.3.1 (supersedes); RFC-MACP-0003 §2 (TTL under suspension);
// the two profiles of docs/spec-decisions.md "Profiles".

import (
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

func depsWith(profile string, maxSuspend int64) session.Deps {
	d := deps()
	d.Limits.Profile = profile
	d.Limits.MaxSuspendMs = maxSuspend
	return d
}

func startProfile(t *testing.T, profile string, p *macpv1.SessionStartPayload) (*session.Session, session.Record) {
	t.Helper()
	s, rec, err := session.Start(startEnv(t, p), t0, depsWith(profile, 0))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s, rec
}

// replayRecords restores the first record and applies the rest, failing
// the test on any divergence, and returns the replayed session.
func replayRecords(t *testing.T, recs []session.Record) *session.Session {
	t.Helper()
	rs, err := session.Restore(recs[0], modes())
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	for _, r := range recs[1:] {
		if err := rs.Apply(r, session.DefaultLimits()); err != nil {
			t.Fatalf("Apply(%s %d): %v", r.Kind, r.Seq, err)
		}
	}
	return rs
}

// The profile is bound at start, recorded, and a restored session keeps it
// whatever the deployment's setting is now.
func TestProfileRecordedAtStart(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"", coord.ProfileApril}, {coord.ProfileApril, coord.ProfileApril},
		{coord.ProfileLatest, coord.ProfileLatest}, {coord.ProfileLatestAlias, coord.ProfileLatest},
	} {
		s, rec := startProfile(t, tc.set, startPayload())
		if s.Binding.Profile != tc.want || rec.Start.Profile != tc.want {
			t.Errorf("profile %q: session %q, record %q; want %q", tc.set, s.Binding.Profile, rec.Start.Profile, tc.want)
		}
		if rs := replayRecords(t, []session.Record{rec}); rs.Binding.Profile != tc.want {
			t.Errorf("profile %q: restored %q", tc.set, rs.Binding.Profile)
		}
	}
	// A start record written before profiles existed is an April session.
	_, rec := startProfile(t, coord.ProfileApril, startPayload())
	rec.Start.Profile = ""
	if rs := replayRecords(t, []session.Record{rec}); rs.Binding.Profile != coord.ProfileApril || rs.MaxSuspendMs != session.DefaultMaxSuspend {
		t.Errorf("legacy record: profile %q max_suspend %d", rs.Binding.Profile, rs.MaxSuspendMs)
	}
	// An unknown recorded profile is refused, not guessed.
	rec.Start.Profile = "2031-01"
	if _, err := session.Restore(rec, modes()); coord.CodeOf(err) != coord.CodeModeNotSupported {
		t.Errorf("unknown profile: %v", err)
	}
	if _, _, err := session.Start(startEnv(t, startPayload()), t0, depsWith("2031-01", 0)); err == nil {
		t.Error("Start accepted an unknown deployment profile")
	}
}

// CancelSession ends a session EXPIRED under 2026-04 and CANCELLED under
// latest, from OPEN and from SUSPENDED.
func TestCancelStatePerProfile(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    session.Status
	}{{coord.ProfileApril, session.Expired}, {coord.ProfileLatest, session.Cancelled}} {
		for _, suspended := range []bool{false, true} {
			s, start := startProfile(t, tc.profile, startPayload())
			recs := []session.Record{start}
			if suspended {
				out := s.Suspend(initiator, "hold", "sus-1", t0+5)
				if out.Err != nil {
					t.Fatal(out.Err)
				}
				recs = append(recs, out.Records...)
			}
			out := s.Cancel(initiator, "stop", "can-1", t0+10)
			if out.Err != nil || len(out.Records) != 1 {
				t.Fatalf("%s: Cancel = %+v", tc.profile, out)
			}
			rec := out.Records[0]
			if s.Status != tc.want || rec.Status != tc.want || rec.Final.GetState() != tc.want.Proto() || !s.Status.Terminal() {
				t.Errorf("%s suspended=%v: status %s, record %s, final %v; want %s", tc.profile, suspended, s.Status, rec.Status, rec.Final.GetState(), tc.want)
			}
			recs = append(recs, rec)
			if rs := replayRecords(t, recs); rs.Status != tc.want {
				t.Errorf("%s: replayed status %s", tc.profile, rs.Status)
			}
			// Terminal: no transition back (§7.2).
			if o := s.Resume(initiator, "", "res-1", t0+11); coord.CodeOf(o.Err) != coord.CodeSessionNotOpen {
				t.Errorf("resume after cancel: %v", o.Err)
			}
			if o := s.Suspend(initiator, "", "sus-2", t0+11); coord.CodeOf(o.Err) != coord.CodeSessionNotOpen {
				t.Errorf("suspend after cancel: %v", o.Err)
			}
		}
	}
}

// §7.5 + RFC-MACP-0003 §2: suspension banks the TTL, messages are
// SESSION_NOT_OPEN while suspended, the pre-suspension deadline does not
// expire the session, resume moves the deadline by the suspended time and
// records banked_ms, and replay rebuilds the same deadline.
func TestSuspendResumeBanksTTL(t *testing.T) {
	for _, profile := range coord.Profiles {
		s, start := startProfile(t, profile, startPayload())
		recs := []session.Record{start}
		recs = append(recs, mustAccept(t, s, note("n1", alice), t0+1000))
		deadline := s.DeadlineMs // t0 + 60 s

		out := s.Suspend(initiator, "human review", "sus-1", t0+20_000)
		if out.Err != nil || len(out.Records) != 1 {
			t.Fatalf("Suspend = %+v", out)
		}
		rec := out.Records[0]
		if rec.Kind != session.KindSuspend || rec.Status != session.Suspended || rec.Envelope.MessageType != coord.TypeSessionSuspend ||
			rec.Envelope.Sender != coord.RuntimeSender || rec.Seq != 3 || rec.Final != nil {
			t.Fatalf("suspend record %+v", rec)
		}
		var sp macpv1.SessionSuspendPayload
		if err := proto.Unmarshal(rec.Envelope.Payload, &sp); err != nil || sp.SuspendedBy != initiator || sp.Reason != "human review" {
			t.Fatalf("suspend payload %v %v", &sp, err)
		}
		recs = append(recs, rec)
		if s.Metadata().State != macpv1.SessionState_SESSION_STATE_SUSPENDED {
			t.Fatalf("metadata state %v", s.Metadata().State)
		}
		// Messages, Commitments included, are not accepted while suspended.
		wantStepErr(t, s, note("n2", alice), t0+21_000, coord.CodeSessionNotOpen)
		wantStepErr(t, s, commit(t, "c1", initiator, commitPayload()), t0+21_000, coord.CodeSessionNotOpen)
		// Suspending again is SESSION_NOT_OPEN and changes nothing.
		if o := s.Suspend(initiator, "again", "sus-x", t0+22_000); coord.CodeOf(o.Err) != coord.CodeSessionNotOpen || len(o.Records) != 0 {
			t.Fatalf("double suspend %+v", o)
		}
		// Past the pre-suspension deadline, the session does not expire.
		if _, due := s.ExpireIfDue(deadline + 5_000); due {
			t.Fatal("a suspended session expired on its pre-suspension deadline")
		}
		wantStepErr(t, s, note("n3", alice), deadline+5_000, coord.CodeSessionNotOpen)
		if s.Status != session.Suspended {
			t.Fatalf("status %s", s.Status)
		}
		// Resume at deadline + 10 s: 40 s were left at suspension.
		resumeAt := deadline + 10_000
		out = s.Resume(initiator, "approved", "res-1", resumeAt)
		if out.Err != nil || len(out.Records) != 1 {
			t.Fatalf("Resume = %+v", out)
		}
		rec = out.Records[0]
		var rp macpv1.SessionResumePayload
		if err := proto.Unmarshal(rec.Envelope.Payload, &rp); err != nil || rp.BankedMs != 40_000 || rp.ResumedBy != initiator {
			t.Fatalf("resume payload %v %v", &rp, err)
		}
		if rec.Kind != session.KindResume || rec.Status != session.Open || s.Status != session.Open || s.DeadlineMs != resumeAt+40_000 {
			t.Fatalf("after resume: record %+v status %s deadline %d", rec, s.Status, s.DeadlineMs)
		}
		if s.SuspendedTotalMs != resumeAt-(t0+20_000) {
			t.Fatalf("suspended total %d", s.SuspendedTotalMs)
		}
		recs = append(recs, rec)
		recs = append(recs, mustAccept(t, s, note("n4", bob), resumeAt+1))
		// The moved deadline holds, and replay rebuilds it.
		rs := replayRecords(t, recs)
		if rs.DeadlineMs != s.DeadlineMs || rs.Status != session.Open || rs.SuspendedTotalMs != s.SuspendedTotalMs {
			t.Fatalf("replay: deadline %d (want %d) status %s", rs.DeadlineMs, s.DeadlineMs, rs.Status)
		}
		if _, due := s.ExpireIfDue(s.DeadlineMs - 1); due {
			t.Fatal("expired before the moved deadline")
		}
		exp, due := s.ExpireIfDue(s.DeadlineMs)
		if !due || exp.Status != session.Expired {
			t.Fatal("did not expire at the moved deadline")
		}
		recs = append(recs, exp)
		if rs := replayRecords(t, recs); rs.Status != session.Expired {
			t.Fatalf("replayed %s", rs.Status)
		}
		// A record claiming another banked_ms diverges on replay.
		bad := append([]session.Record(nil), recs[:4]...)
		forged := proto.Clone(recs[3].Envelope).(*macpv1.Envelope)
		rp.BankedMs++
		forged.Payload, _ = proto.Marshal(&rp)
		bad[3].Envelope = forged
		rs2, _ := session.Restore(bad[0], modes())
		var err error
		for _, r := range bad[1:] {
			if err = rs2.Apply(r, session.DefaultLimits()); err != nil {
				break
			}
		}
		if coord.CodeOf(err) != coord.CodeInternalError {
			t.Fatalf("forged banked_ms replayed: %v", err)
		}
	}
}

// Only the initiator suspends or resumes (§7.5); others are FORBIDDEN and
// change nothing.
func TestSuspendResumeAuthority(t *testing.T) {
	s, _ := mustStart(t)
	for _, who := range []string{alice, mallory, coord.RuntimeSender} {
		if o := s.Suspend(who, "", "sus-"+who, t0+1); coord.CodeOf(o.Err) != coord.CodeForbidden || len(o.Records) != 0 {
			t.Fatalf("suspend by %s: %+v", who, o)
		}
	}
	if o := s.Resume(initiator, "", "res-0", t0+1); coord.CodeOf(o.Err) != coord.CodeSessionNotOpen {
		t.Fatalf("resume of an OPEN session: %v", o.Err)
	}
	if o := s.Suspend(initiator, "", "sus-1", t0+2); o.Err != nil {
		t.Fatal(o.Err)
	}
	if o := s.Resume(alice, "", "res-a", t0+3); coord.CodeOf(o.Err) != coord.CodeForbidden || s.Status != session.Suspended {
		t.Fatalf("resume by alice: %+v", o)
	}
	// The control message id must be fresh.
	if o := s.Resume(initiator, "", "sus-1", t0+3); coord.CodeOf(o.Err) != coord.CodeInternalError {
		t.Fatalf("reused message id: %v", o.Err)
	}
}

// max_suspend_ms: 0 binds the deployment default, a negative value or one
// above the deployment cap is refused, and cumulative suspension past the
// cap expires the session (SUSPENDED -> EXPIRED), on the timer and on resume.
func TestMaxSuspend(t *testing.T) {
	p := startPayload()
	p.MaxSuspendMs = -1
	if _, _, err := session.Start(startEnv(t, p), t0, deps()); coord.CodeOf(err) != coord.CodeInvalidEnvelope {
		t.Fatalf("negative max_suspend_ms: %v", err)
	}
	p.MaxSuspendMs = 2_000
	if _, _, err := session.Start(startEnv(t, p), t0, depsWith("", 1_000)); coord.CodeOf(err) != coord.CodeInvalidEnvelope {
		t.Fatalf("max_suspend_ms above the cap: %v", err)
	}
	p.MaxSuspendMs = 0
	s, rec, err := session.Start(startEnv(t, p), t0, depsWith("", 1_000))
	if err != nil || rec.Start.MaxSuspendMs != 1_000 || s.MaxSuspendMs != 1_000 {
		t.Fatalf("default cap: %v %d", err, rec.Start.MaxSuspendMs)
	}
	s, rec = mustStartWith(t, p)
	if rec.Start.MaxSuspendMs != session.DefaultMaxSuspend {
		t.Fatalf("default %d", rec.Start.MaxSuspendMs)
	}

	p.MaxSuspendMs = 3_000
	s, start := mustStartWith(t, p)
	recs := []session.Record{start}
	// Two suspensions: 1 s, then 2 s more reaches the cap exactly (not
	// exceeded), 1 ms more exceeds it.
	o := s.Suspend(initiator, "", "s1", t0+1_000)
	recs = append(recs, o.Records...)
	o = s.Resume(initiator, "", "r1", t0+2_000)
	recs = append(recs, o.Records...)
	o = s.Suspend(initiator, "", "s2", t0+3_000)
	recs = append(recs, o.Records...)
	at, ok := s.ExpiryMs()
	if !ok || at != t0+5_001 {
		t.Fatalf("ExpiryMs = %d, want %d", at, t0+5_001)
	}
	if _, due := s.ExpireIfDue(t0 + 5_000); due {
		t.Fatal("expired at the cap, before exceeding it")
	}
	// Resume after the cap: the session expires instead.
	o = s.Resume(initiator, "", "r2", t0+5_001)
	if coord.CodeOf(o.Err) != coord.CodeSessionNotOpen || len(o.Records) != 1 || o.Records[0].Kind != session.KindExpire || s.Status != session.Expired {
		t.Fatalf("resume past the cap: %+v status %s", o, s.Status)
	}
	recs = append(recs, o.Records...)
	if rs := replayRecords(t, recs); rs.Status != session.Expired || rs.SuspendedTotalMs != 3_001 {
		t.Fatalf("replay: %s %d", rs.Status, rs.SuspendedTotalMs)
	}
	// A forged expire record before the cap is divergence.
	forged := append([]session.Record(nil), recs...)
	forged[len(forged)-1].AcceptedAtMs = t0 + 4_000
	rs, _ := session.Restore(forged[0], modes())
	var err2 error
	for _, r := range forged[1:] {
		if err2 = rs.Apply(r, session.DefaultLimits()); err2 != nil {
			break
		}
	}
	if err2 == nil {
		t.Fatal("an expire record before the suspension cap replayed")
	}
}

// Clients never send the runtime's control envelopes (§7.5: "the runtime
// is the sole emitter"): FORBIDDEN under latest and for new April
// sessions; stored April histories replay as they were decided.
func TestControlTypesFromClients(t *testing.T) {
	for _, profile := range coord.Profiles {
		s, _ := startProfile(t, profile, startPayload())
		for _, typ := range []string{coord.TypeSessionSuspend, coord.TypeSessionResume} {
			wantStepErr(t, s, msg(typ, "x-"+typ, initiator, nil), t0+1, coord.CodeForbidden)
		}
	}
}

// §7.3.1: supersedes is checked structurally only; under latest the hash
// must be a canonical RFC-MACP-0013 hash.
func TestSupersedesStructural(t *testing.T) {
	good := "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		profile string
		ref     *macpv1.CommitmentRef
		ok      bool
	}{
		{coord.ProfileLatest, &macpv1.CommitmentRef{}, false},
		{coord.ProfileLatest, &macpv1.CommitmentRef{SessionId: sid2}, false},
		{coord.ProfileLatest, &macpv1.CommitmentRef{CommitmentHash: good}, false},
		{coord.ProfileLatest, &macpv1.CommitmentRef{SessionId: sid2, CommitmentHash: "sha256:XYZ"}, false},
		{coord.ProfileLatest, &macpv1.CommitmentRef{SessionId: sid2, CommitmentHash: good}, true},
		{coord.ProfileApril, &macpv1.CommitmentRef{}, false},
		{coord.ProfileApril, &macpv1.CommitmentRef{SessionId: sid2, CommitmentHash: good}, true},
	} {
		s, _ := startProfile(t, tc.profile, startPayload())
		mustAccept(t, s, note("n1", alice), t0+1)
		c := commitPayload()
		c.Supersedes = tc.ref
		env := commit(t, "c1", initiator, c)
		if tc.ok {
			mustAccept(t, s, env, t0+2)
			if s.Status != session.Resolved || !proto.Equal(s.Resolution.Supersedes, tc.ref) {
				t.Errorf("%s %v: status %s", tc.profile, tc.ref, s.Status)
			}
		} else {
			wantStepErr(t, s, env, t0+2, coord.CodeInvalidEnvelope)
		}
	}
}
