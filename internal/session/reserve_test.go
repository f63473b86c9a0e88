package session_test

import (
	"strconv"
	"testing"

	"github.com/macpd/macpd/internal/session"
)

// Reserve only sizes the dedup set: the start's message id stays a
// duplicate, replay and later decisions are unchanged, whatever the hint.
func TestReserveChangesNoDecision(t *testing.T) {
	for _, hint := range []int{-1, 0, 1, 3, 1000, 1 << 30} {
		s, start := mustStart(t)
		recs := []session.Record{start}
		for i := 1; i <= 3; i++ {
			recs = append(recs, mustAccept(t, s, note("n"+strconv.Itoa(i), alice), t0+int64(i)))
		}
		r, err := session.Restore(start, modes())
		if err != nil {
			t.Fatal(err)
		}
		r.Reserve(hint)
		for _, rec := range recs[1:] {
			if err := r.Apply(rec, session.DefaultLimits()); err != nil {
				t.Fatalf("hint %d: %v", hint, err)
			}
		}
		if d := snap(r).diff(snap(s)); d != "" {
			t.Fatalf("hint %d: replayed state differs: %s", hint, d)
		}
		if out := r.Step(startEnv(t, startPayload()), t0+10, session.DefaultLimits()); !out.Duplicate {
			t.Fatalf("hint %d: the SessionStart resend is %+v, want a duplicate", hint, out)
		}
		if out := r.Step(note("n2", alice), t0+10, session.DefaultLimits()); !out.Duplicate {
			t.Fatalf("hint %d: a replayed message id is %+v, want a duplicate", hint, out)
		}
		mustAccept(t, r, note("n4", alice), t0+10)
	}
}

// BenchmarkReplay10kReserved is BenchmarkReplay10k with the dedup set
// sized from the history length first, as the runtime does when it knows
// the length from the store's summary (recovery at boot, on-demand loads).
func BenchmarkReplay10kReserved(b *testing.B) {
	lim := session.DefaultLimits()
	s, start := mustStart(b)
	recs := []session.Record{start}
	env := note("x", alice)
	for i := 1; i < 10_000; i++ {
		env.MessageId = "msg-" + strconv.Itoa(i)
		out := s.Step(env, t0+int64(i), lim)
		if !out.Accepted() {
			b.Fatalf("step %d: %+v", i, out)
		}
		recs = append(recs, out.Records...)
	}
	reg := modes()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := session.Restore(recs[0], reg)
		if err != nil {
			b.Fatal(err)
		}
		r.Reserve(len(recs))
		for _, rec := range recs[1:] {
			if err := r.Apply(rec, lim); err != nil {
				b.Fatal(err)
			}
		}
		if r.Seq != 10_000 {
			b.Fatalf("replayed %d records", r.Seq)
		}
	}
}
