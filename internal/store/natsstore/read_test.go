package natsstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/natsstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// appendOneByOne stores records 1..n of id, one message each.
func appendOneByOne(tb testing.TB, s store.Store, id string, n uint64) {
	tb.Helper()
	for seq := uint64(1); seq <= n; seq++ {
		if err := s.Append(ctx, []session.Record{rec(id, seq)}); err != nil {
			tb.Fatalf("append %d: %v", seq, err)
		}
	}
}

func readFrom(t *testing.T, s store.Store, id string, from uint64) []uint64 {
	t.Helper()
	var seqs []uint64
	err := s.Read(ctx, id, from, func(r session.Record) error {
		if len(r.Hash) == 0 || len(r.PrevHash) == 0 {
			return fmt.Errorf("record %d without its chain", r.Seq)
		}
		seqs = append(seqs, r.Seq)
		return nil
	})
	if err != nil {
		t.Fatalf("Read %s from %d: %v", id, from, err)
	}
	return seqs
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// A session of ConsumerReadMin records or more is read through an
// ephemeral consumer: the same records as one request per message, from
// 1 and from the middle, records appended after the consumer's last
// message included; the consumer is deleted afterwards.
func TestReadLongSessionThroughConsumer(t *testing.T) {
	srv := natstest.Run(t)
	s := open(t, srv, "long", 1)
	perMsg, err := natsstore.Open(ctx, natsstore.Options{URL: srv.ClientURL(), Name: "long", Replicas: 1, ConsumerReadMin: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { perMsg.Close() })
	const n = 3 * natsstore.DefaultConsumerReadMin
	appendOneByOne(t, s, "l", n)
	// Two more records in one message, and a short session beside it.
	if err := s.Append(ctx, []session.Record{rec("l", n+1), rec("l", n+2), rec("short", 1)}); err != nil {
		t.Fatal(err)
	}
	for _, from := range []uint64{1, 2, n / 2, n + 1, n + 2} {
		want := seqRange(from, n+2)
		if got := readFrom(t, s, "l", from); !slices.Equal(got, want) {
			t.Fatalf("consumer read from %d: %v", from, got)
		}
		if got := readFrom(t, perMsg, "l", from); !slices.Equal(got, want) {
			t.Fatalf("per-message read from %d: %v", from, got)
		}
	}
	if got := readFrom(t, s, "short", 1); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("short session: %v", got)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// Messages the server received per read of the whole session (the
	// requests; the store's connection is the only busy one).
	received := func(s store.Store) int64 {
		t.Helper()
		before, _ := srv.Varz(nil)
		readFrom(t, s, "l", 1)
		after, _ := srv.Varz(nil)
		return after.InMsgs - before.InMsgs
	}
	c, p := received(s), received(perMsg)
	if c > 10 || p < n {
		t.Fatalf("requests per read: %d through the consumer, %d one per message (%d messages)", c, p, n+1)
	}
	for _, name := range s.StreamNames() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		lister := st.ConsumerNames(context.Background())
		var left []string
		for c := range lister.Name() {
			left = append(left, c)
		}
		if len(left) != 0 {
			t.Fatalf("stream %s keeps consumers %v after the reads", name, left)
		}
	}
}

// BenchmarkReadLongSession reads a session of 8, 16, 32 and 100 records, one
// message each, from a three-server R3 cluster through a consumer and
// with one request per message, alternating (the default switches to the
// consumer at DefaultConsumerReadMin records). ns/op is the pair; the
// ratio is per-message/consumer.
func BenchmarkReadLongSession(b *testing.B) {
	c := natstest.RunCluster(b, 3)
	open := func(min int) *natsstore.Store {
		s, err := natsstore.Open(ctx, natsstore.Options{URL: c.URLs(), Name: "bench", Replicas: 3, ConsumerReadMin: min})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	cons, perMsg := open(1), open(-1)
	for _, n := range []uint64{8, 16, 32, 100} {
		id := fmt.Sprintf("l%d", n)
		appendOneByOne(b, cons, id, n)
		read := func(s store.Store) {
			got := uint64(0)
			if err := s.Read(ctx, id, 1, func(session.Record) error { got++; return nil }); err != nil || got != n {
				b.Fatalf("read %d records: %v", got, err)
			}
		}
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			var consNs, perNs int64
			for i := 0; i < b.N; i++ {
				t0 := nowNs()
				read(cons)
				t1 := nowNs()
				read(perMsg)
				consNs += t1 - t0
				perNs += nowNs() - t1
			}
			b.ReportMetric(float64(perNs)/float64(consNs), "permsg/consumer")
			b.ReportMetric(float64(perNs)/float64(b.N)/1e6, "permsg-ms/read")
			b.ReportMetric(float64(consNs)/float64(b.N)/1e6, "consumer-ms/read")
		})
	}
}

func nowNs() int64 { return time.Now().UnixNano() }
