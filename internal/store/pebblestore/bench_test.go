package pebblestore_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

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
	run := func(b *testing.B, layout string) {
		for _, name := range []string{"Info", "LastSeq"} {
			probe := func(id string) error { _, err := s.Info(ctx, id); return err }
			if name == "LastSeq" {
				probe = func(id string) error { _, err := s.LastSeq(ctx, id); return err }
			}
			b.Run(layout+"/"+name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if err := probe(fmt.Sprintf("0e4f1c2a-1111-4aaa-8bbb-%012d", i)); err == nil {
						b.Fatal("unknown session found")
					}
				}
			})
		}
	}
	run(b, "fresh")
	// Everything compacted into the last level, where Pebble reads no
	// bloom filter unless asked to (IterOptions.UseL6Filters).
	if err := pebblestore.CompactAll(s); err != nil {
		b.Fatal(err)
	}
	run(b, "compacted")
}

// hotPathVariants are the option sets BenchmarkHotPath compares: the
// production defaults first (L0 thresholds 8 and 24; l0=4-12 is Pebble's
// defaults, used before).
var hotPathVariants = []struct {
	name string
	opts pebblestore.Options
}{
	{"default", pebblestore.Options{}},
	{"memtable=4MiB", pebblestore.Options{MemTableSize: 4 << 20}},
	{"memtable=8MiB", pebblestore.Options{MemTableSize: 8 << 20}},
	{"memtable=16MiB", pebblestore.Options{MemTableSize: 16 << 20}},
	{"memtable=64MiB", pebblestore.Options{MemTableSize: 64 << 20}},
	{"compression=none", pebblestore.WithTune(pebblestore.Options{}, func(o *pebble.Options) {
		o.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	})},
	{"l0=4-12", pebblestore.WithTune(pebblestore.Options{}, func(o *pebble.Options) {
		o.L0CompactionThreshold, o.L0StopWritesThreshold = 4, 12 // Pebble's defaults
	})},
	{"l0=16-48", pebblestore.WithTune(pebblestore.Options{}, func(o *pebble.Options) {
		o.L0CompactionThreshold, o.L0StopWritesThreshold = 16, 48
	})},
}

// BenchmarkHotPath models the runtime's write path under load: 64 open
// sessions with random ids, each of 50 records (a SessionStart, messages
// with 256-byte payloads, an expiry), replaced by a new one (asking Info
// first, as SessionStart does) when it ends; batches of 16 records, each
// from a different session, appended with AppendAsync and waited for by a
// second goroutine, two batches in flight, on a real directory. One op is
// one record, so ns/op and allocs/op are per record (allocs counted
// process-wide, Pebble's background work included); cpu-ns/rec is the
// process's user+system CPU time per record (getrusage), which is what to
// compare, as wall time on a real disk is mostly the WAL fsync. Every
// variant does the same work (fixed seed): run it with a fixed
// -benchtime=Nx, large enough for several memtable flushes and L0
// compaction cycles (1600000x: about 30 s, 33 flushes of 32 MiB), and
// compare variants over several alternating runs, each variant in its own
// process (-count repeats one variant before the next), e.g.
//
//	go test -c -o /tmp/pbs.test ./internal/store/pebblestore
//	for r in 1 2 3 4 5; do for v in default l0=4-12; do
//		/tmp/pbs.test -test.run '^$' -test.bench "HotPath/^$v\$" -test.benchtime 1600000x -test.benchmem
//	done; done
func BenchmarkHotPath(b *testing.B) {
	for _, v := range hotPathVariants {
		b.Run(v.name, func(b *testing.B) { benchHotPath(b, v.opts) })
	}
}

func benchHotPath(b *testing.B, o pebblestore.Options) {
	const (
		open      = 64 // sessions open at once
		perBatch  = 16 // records per AppendAsync, one per session
		perSess   = 50 // records per session
		inFlight  = 2  // batches appended but not yet waited for
		payloadSz = 256
	)
	s := mustOpen(b, b.TempDir(), o)
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	newID := func() string {
		return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.Uint32()&0xffff,
			rng.Uint32()&0xfff, rng.Uint32()&0xfff, rng.Uint64()&0xffffffffffff)
	}
	type sess struct {
		id   string
		next uint64
		msg  session.Record // template of its messages
	}
	payload := bytes.Repeat([]byte{'p'}, payloadSz)
	start := func(ss *sess) {
		ss.id, ss.next = newID(), 1
		ss.msg = rec(ss.id, 2, 0)
		ss.msg.Envelope.Payload = payload
	}
	pool := make([]sess, open)
	for i := range pool {
		start(&pool[i])
		// Stagger the sessions so that they do not all end together.
		ss := &pool[i]
		ss.next = uint64(1 + i*perSess/open)
		if ss.next > 1 {
			first := rec(ss.id, 1, 0)
			var recs []session.Record
			recs = append(recs, first)
			for seq := uint64(2); seq < ss.next; seq++ {
				r := ss.msg
				r.Seq = seq
				recs = append(recs, r)
			}
			if err := s.Append(ctx, recs); err != nil {
				b.Fatal(err)
			}
		}
	}
	waits := make(chan func() error, inFlight-1)
	waited := make(chan error, 1)
	go func() {
		var first error
		for w := range waits {
			if err := w(); err != nil && first == nil {
				first = err
			}
		}
		waited <- first
	}()
	batch := make([]session.Record, 0, perBatch)
	cursor := 0
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; {
		batch = batch[:0]
		for j := 0; j < perBatch && n < b.N; j, n = j+1, n+1 {
			ss := &pool[cursor]
			cursor = (cursor + 1) % open
			if ss.next > perSess {
				start(ss)
				if _, err := s.Info(ctx, ss.id); err == nil {
					b.Fatalf("new session %s found", ss.id)
				}
			}
			var r session.Record
			switch ss.next {
			case 1:
				r = rec(ss.id, 1, int64(n))
			case perSess:
				r = expired(ss.id, perSess, int64(n))
			default:
				r = ss.msg
				r.Seq, r.AcceptedAtMs = ss.next, int64(n)
			}
			ss.next++
			batch = append(batch, r)
		}
		w, err := s.AppendAsync(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		waits <- w
	}
	close(waits)
	if err := <-waited; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/rec")
	m := pebblestore.PebbleMetrics(s)
	b.ReportMetric(float64(m.Flush.Count), "flushes")
	b.ReportMetric(float64(m.Compact.Count), "compactions")
	// What compaction still owes at the end (deferred work, not counted
	// in cpu-ns/rec): compare with care across L0 thresholds.
	b.ReportMetric(float64(m.Levels[0].TablesCount), "L0-tables")
	b.ReportMetric(float64(m.Compact.EstimatedDebt)/(1<<20), "debt-MiB")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
