package session_test

import (
	"strconv"
	"testing"

	"github.com/macpd/macpd/internal/session"
)

// BenchmarkStep measures one accepted message through Session.Step with the
// test mode: structure check, dedup, mode step, sequence, activity and the
// history record. Target: < 2µs/op.
func BenchmarkStep(b *testing.B) {
	lim := session.DefaultLimits()
	const perSession = 1 << 16
	ids := make([]string, perSession)
	for i := range ids {
		ids[i] = "msg-" + strconv.Itoa(i)
	}
	env := note("x", alice)
	var s *session.Session
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % perSession
		if k == 0 {
			// A fresh session every perSession messages, so the dedup set
			// stays at a realistic size.
			b.StopTimer()
			s, _ = mustStart(b)
			b.StartTimer()
		}
		env.MessageId = ids[k]
		out := s.Step(env, t0+1, lim)
		if out.Err != nil || out.Duplicate {
			b.Fatalf("step %d: %+v", i, out)
		}
	}
}

// BenchmarkStepDuplicate measures the duplicate fast path.
func BenchmarkStepDuplicate(b *testing.B) {
	lim := session.DefaultLimits()
	s, _ := mustStart(b)
	env := note("n1", alice)
	mustAccept(b, s, env, t0+1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if out := s.Step(env, t0+2, lim); !out.Duplicate {
			b.Fatal("not a duplicate")
		}
	}
}

// BenchmarkReplay10k measures replaying a 10,000-entry session into a fresh
// core (Restore + Apply of every record, each re-decided): the recovery and
// verification path (RFC-MACP-0003 §4). Target: < 4 ms per session.
func BenchmarkReplay10k(b *testing.B) {
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
