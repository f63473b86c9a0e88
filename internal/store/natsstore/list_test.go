package natsstore_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// List reads the sessions' summaries several at a time and in windows:
// across more sessions than one window, it still hands on every stored
// session once, in id order, with each one's own summary (its last
// record), skips one purged, and stops at fn's first error
// (store.Store's List contract).
func TestListManySessionsInIDOrder(t *testing.T) {
	srv := natstest.Run(t)
	s := open(t, srv, "list", 0)
	const n = 600 // more than two windows of summaries
	var want []string
	var batch []session.Record
	for i := range n {
		id := fmt.Sprintf("s-%04d", (i*7919)%n) // stored out of id order
		last := uint64(1 + i%3)
		batch = append(batch, recs(id, 1, last)...)
		if len(batch) >= 64 || i == n-1 {
			if err := s.Append(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	// One terminal session, then purged: not listed.
	end := rec("s-0300", 2)
	end.Kind, end.Status, end.Envelope = session.KindCancel, session.Expired, nil
	if err := s.Append(ctx, []session.Record{end}); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, "s-0300"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if id := fmt.Sprintf("s-%04d", i); id != "s-0300" {
			want = append(want, id)
		}
	}
	var got []string
	if err := s.List(ctx, func(info store.SessionInfo) error {
		got = append(got, info.SessionID)
		// Each session's summary is its own: it ends where its history does.
		if recs := readAll(t, s, info.SessionID); info.LastSeq != recs[len(recs)-1].Seq {
			t.Fatalf("%s: summary LastSeq %d, history ends at %d", info.SessionID, info.LastSeq, recs[len(recs)-1].Seq)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List handed on %d sessions, want %d in id order (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	stop := fmt.Errorf("stop")
	calls := 0
	if err := s.List(ctx, func(store.SessionInfo) error {
		calls++
		if calls == 300 {
			return stop
		}
		return nil
	}); err != stop || calls != 300 {
		t.Fatalf("List after fn's error at call 300: err %v, %d calls", err, calls)
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// BenchmarkList is what a node's boot pays to find the OPEN sessions
// (runtime recovery lists every stored session on this store):
// BENCH_LIST_SESSIONS stored sessions (default 2,000), one List.
//
//	go test -run '^$' -bench BenchmarkList -benchtime 3x ./internal/store/natsstore/
func BenchmarkList(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("BENCH_LIST_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	srv := natstest.Run(b)
	s := open(b, srv, "bench", 0)
	var batch []session.Record
	for i := range n {
		batch = append(batch, recs(fmt.Sprintf("b-%06d", i), 1, 2)...)
		if len(batch) >= 256 || i == n-1 {
			if err := s.Append(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = nil
		}
	}
	b.ResetTimer()
	for range b.N {
		listed := 0
		if err := s.List(ctx, func(store.SessionInfo) error { listed++; return nil }); err != nil {
			b.Fatal(err)
		}
		if listed != n {
			b.Fatalf("listed %d of %d", listed, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "us/session")
}
