package pebblestore_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// BenchmarkAppend: durable appends on a real directory, one WAL sync per
// Append. records-per-sync=1 is one session's record per Append (no group
// commit); records-per-sync=64 is one record each of 64 sessions per Append
// (the runtime's group commit). Reports records/s and syncs/s.
func BenchmarkAppend(b *testing.B) {
	for _, per := range []int{1, 64} {
		b.Run(fmt.Sprintf("records-per-sync=%d", per), func(b *testing.B) {
			s := mustOpen(b, b.TempDir(), pebblestore.Options{})
			defer s.Close()
			ids := make([]string, per)
			next := make([]uint64, per)
			for j := range ids {
				ids[j] = fmt.Sprintf("3f2b8c1e-9a4d-4f6b-8c2e-%012d", j)
			}
			payload := bytes.Repeat([]byte{'p'}, 256)
			batch := make([]session.Record, per)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range ids {
					next[j]++
					r := rec(ids[j], next[j], int64(i))
					r.Envelope.Payload = payload
					batch[j] = r
				}
				if err := s.Append(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "syncs/s")
		})
	}
}

// BenchmarkReplay10k: reading one 10,000-record session back from a real
// directory (decode, self hash and chain checks), as recovery and verify
// do before the core's replay (measured separately in internal/session).
func BenchmarkReplay10k(b *testing.B) {
	const n = 10_000
	dir := b.TempDir()
	s := mustOpen(b, dir, pebblestore.Options{})
	payload := bytes.Repeat([]byte{'p'}, 256)
	var batch []session.Record
	for seq := uint64(1); seq <= n; seq++ {
		r := rec("replay-session", seq, int64(seq))
		r.Envelope.Payload = payload
		batch = append(batch, r)
		if len(batch) == 500 {
			if err := s.Append(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	_ = s.Close()
	s = mustOpen(b, dir, pebblestore.Options{}) // read from the files, not the writer's memtable
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		count := 0
		if err := s.Read(ctx, "replay-session", 1, func(session.Record) error { count++; return nil }); err != nil {
			b.Fatal(err)
		}
		if count != n {
			b.Fatalf("%d records", count)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkInfoUnknown: Info and LastSeq for session ids that are not
// stored (every new SessionStart asks whether its id is taken), on a store
// holding 20,000 sessions of 10 records each, some flushed to sstables.
func BenchmarkInfoUnknown(b *testing.B) {
	s := mustOpen(b, b.TempDir(), pebblestore.Options{})
	defer s.Close()
	payload := bytes.Repeat([]byte{'p'}, 256)
	var batch []session.Record
	for i := range 20_000 {
		id := fmt.Sprintf("7c9e6679-7425-40de-944b-%012d", i)
		for seq := uint64(1); seq <= 10; seq++ {
			r := rec(id, seq, int64(seq))
			r.Envelope.Payload = payload
			batch = append(batch, r)
		}
		if len(batch) >= 1000 {
			if err := s.Append(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	for name, probe := range map[string]func(string) error{
		"Info":    func(id string) error { _, err := s.Info(ctx, id); return err },
		"LastSeq": func(id string) error { _, err := s.LastSeq(ctx, id); return err },
	} {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := probe(fmt.Sprintf("0e4f1c2a-1111-4aaa-8bbb-%012d", i)); err == nil {
					b.Fatal("unknown session found")
				}
			}
		})
	}
}
