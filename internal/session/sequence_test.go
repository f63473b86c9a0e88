package session_test

// Sequence numbers and participant activity (RFC-MACP-0001 §8.1, §8.3;
// checklist IDEM-5 "monotonic per-session sequence", ADM-24 "next sequence
// number, mark message_id, participant activity (count, last time)",
// OBS-1 "participant_activity for senders with ≥1 accepted message").

import (
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// Records are numbered 1..N without gaps, over accepted envelopes only:
// rejections and duplicates take no number (Record doc; RFC-MACP-0001 §8.3).
func TestSequenceGaplessOverAccepted(t *testing.T) {
	s, start := mustStart(t)
	history := []session.Record{start}
	type step struct {
		env    *macpv1.Envelope
		at     int64
		accept bool
	}
	steps := []step{
		{note("n1", alice), t0 + 10, true},
		{msg(typeBlock, "b1", alice, nil), t0 + 11, false},
		{note("n1", alice), t0 + 12, false}, // duplicate
		{note("n2", mallory), t0 + 13, false},
		{note("n2", bob), t0 + 14, true},
		{commit(t, "c0", alice, commitPayload()), t0 + 15, false},
		{note("n3", initiator), t0 + 16, true},
		{note("n4", alice), t0 + 17, true},
		{startEnv(t, startPayload()), t0 + 18, false}, // duplicate SessionStart
		{commit(t, "c1", initiator, commitPayload()), t0 + 19, true},
		{note("n5", alice), t0 + 20, false},
	}
	for i, st := range steps {
		out := s.Step(st.env, st.at, session.DefaultLimits())
		if out.Accepted() != st.accept {
			t.Fatalf("step %d (%s): accepted=%v, want %v (%v)", i, st.env.MessageId, out.Accepted(), st.accept, out.Err)
		}
		if !st.accept && len(out.Records) != 0 {
			t.Fatalf("step %d: rejection with records", i)
		}
		history = append(history, out.Records...)
	}
	for i, rec := range history {
		if rec.Seq != uint64(i+1) {
			t.Fatalf("record %d has Seq %d", i, rec.Seq)
		}
	}
	if s.Seq != uint64(len(history)) || s.Seq != 6 {
		t.Fatalf("Seq %d, %d records", s.Seq, len(history))
	}
	wantIDs := []string{"c1", "m-start", "n1", "n2", "n3", "n4"}
	if got := s.SeenIDs(); !equalStrings(got, wantIDs) {
		t.Fatalf("SeenIDs %v, want %v (sorted)", got, wantIDs)
	}
}

// Terminal records continue the numbering: Expire and Cancel take the next
// number after the last envelope (Record doc, KindExpire).
func TestSequenceTerminalRecords(t *testing.T) {
	s, _ := mustStart(t)
	mustAccept(t, s, note("n1", alice), t0+1)
	out := s.Cancel(initiator, "r", "cancel-1", t0+2)
	if len(out.Records) != 1 || out.Records[0].Seq != 3 {
		t.Fatalf("cancel record %+v", out.Records)
	}
	s, _ = mustStart(t)
	mustAccept(t, s, note("n1", alice), t0+1)
	mustAccept(t, s, note("n2", alice), t0+2)
	rec, _ := s.ExpireIfDue(s.DeadlineMs)
	if rec.Seq != 4 || s.Seq != 4 {
		t.Fatalf("expire record %d / Seq %d", rec.Seq, s.Seq)
	}
}

// ADM-24: participant activity counts accepted messages and keeps the last
// acceptance time; rejected messages, duplicates and the runtime's own
// SessionCancel do not count; OBS-1: only senders with ≥1 accepted message
// appear, sorted by id.
func TestParticipantActivity(t *testing.T) {
	p := startPayload()
	p.PolicyVersion = policyAny
	p.Participants = []string{bob, alice, "carol"}
	s, _ := mustStartWith(t, p)
	mustAccept(t, s, note("n1", alice), t0+100)
	mustAccept(t, s, note("n2", bob), t0+200)
	mustAccept(t, s, note("n3", alice), t0+300)
	wantStepErr(t, s, msg(typeBlock, "b1", alice, nil), t0+400, coord.CodeInvalidEnvelope)
	s.Step(note("n3", alice), t0+500, session.DefaultLimits()) // duplicate
	wantStepErr(t, s, note("m1", mallory), t0+600, coord.CodeForbidden)
	// Times are the runtime's acceptance times, not envelope timestamps,
	// and a clock that steps back is recorded as is.
	e := note("n4", alice)
	e.TimestampUnixMs = 42
	mustAccept(t, s, e, t0+250)
	mustAccept(t, s, commit(t, "c1", bob, commitPayload()), t0+700)
	s.Cancel(initiator, "r", "cancel-1", t0+800) // terminal: no-op
	want := []*macpv1.ParticipantActivity{
		{ParticipantId: alice, LastMessageAtUnixMs: t0 + 250, MessageCount: 3},
		{ParticipantId: bob, LastMessageAtUnixMs: t0 + 700, MessageCount: 2},
		{ParticipantId: initiator, LastMessageAtUnixMs: t0, MessageCount: 1},
	}
	got := s.Metadata().ParticipantActivity
	if len(got) != len(want) {
		t.Fatalf("activity %v, want %v", got, want)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("activity[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	// carol never sent anything: absent (OBS-1).
	for _, a := range s.Activity() {
		if a.ParticipantID == "carol" || a.ParticipantID == mallory {
			t.Fatalf("%s has activity without an accepted message", a.ParticipantID)
		}
	}
}

// The cancel envelope is not participant activity even though it is in
// history (Activity doc).
func TestCancelIsNotActivity(t *testing.T) {
	s, _ := mustStart(t)
	s.Cancel(initiator, "r", "cancel-1", t0+5)
	act := s.Activity()
	if len(act) != 1 || act[0].ParticipantID != initiator || act[0].MessageCount != 1 || act[0].LastMessageMs != t0 {
		t.Fatalf("activity after cancel %+v", act)
	}
	for _, a := range act {
		if a.ParticipantID == coord.RuntimeSender {
			t.Fatal("runtime sender counted")
		}
	}
}

// Random runs through the fuzz driver: sequence continuity, dedup set and
// activity are re-derived from the records after every run (see drive).
func TestSequenceRandomRuns(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		drive(t, seedBytes(seed, 400))
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
