package natsstore_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// Pipelined appends (store.Pipeliner), as pebblestore's
// TestAppendAsyncPipelined: appends started before the earlier ones are
// acknowledged continue each session's history from the queued records;
// after the waits, everything is stored once, in order, chained, and
// another connection reads it.
func TestAppendAsyncPipelined(t *testing.T) {
	srv := natstest.Run(t)
	s := open(t, srv, "pipe", 0)
	var waits []func() error
	for i := uint64(0); i < 8; i++ {
		// Each append continues "a" from the previous, still in flight,
		// and starts a new session.
		rs := []session.Record{rec("a", 2*i+1), rec("a", 2*i+2), rec(string(rune('b'+i))+"-s", 1)}
		w, err := s.AppendAsync(ctx, rs)
		if err != nil {
			t.Fatalf("AppendAsync %d: %v", i, err)
		}
		waits = append(waits, w)
	}
	// A validation error is immediate and writes nothing: "a" continues
	// from 16, not 3.
	if _, err := s.AppendAsync(ctx, []session.Record{rec("a", 3)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("out-of-order AppendAsync = %v, want ErrConflict", err)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
	}
	check := func(s store.Store, want int) {
		t.Helper()
		a := readAll(t, s, "a")
		if len(a) != want {
			t.Fatalf("a: %d records, want %d", len(a), want)
		}
		for i, r := range a {
			if r.Seq != uint64(i+1) {
				t.Fatalf("a record %d has seq %d", i, r.Seq)
			}
		}
		if n := len(listAll(t, s)); n != 9 {
			t.Fatalf("%d sessions listed, want 9", n)
		}
	}
	check(s, 16)
	if err := s.Append(ctx, []session.Record{rec("a", 17)}); err != nil { // Append continues after the pipelined ones
		t.Fatal(err)
	}
	check(open(t, srv, "pipe", 0), 17)
}

// Another node appends to a session while this one has appends of it in
// flight: the first append that expected the overtaken state is
// ErrConflict, and so is the one started behind it, which continued
// records that were not stored: refused at its wait if it was queued on
// the failed one (its other session, one message per session, is stored),
// or at once if the failed one had already settled (the session is
// fenced: nothing of the call is written). Which of the two happens is a
// race; the outcome of each is checked.
func TestAppendAsyncOvertakenByAnotherNode(t *testing.T) {
	srv := natstest.Run(t)
	s := open(t, srv, "race", 0)
	other := open(t, srv, "race", 0)
	if err := s.Append(ctx, recs("a", 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := other.Append(ctx, []session.Record{rec("a", 3)}); err != nil {
		t.Fatal(err)
	}
	// s's cached tip of "a" is 2: its append of 3 is refused by the
	// stream, reloaded, and found to conflict.
	w1, err := s.AppendAsync(ctx, []session.Record{rec("a", 3), rec("x", 1)})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := s.AppendAsync(ctx, []session.Record{rec("a", 4), rec("y", 1)})
	queued := err == nil
	if !queued && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("append started after the overtaken one = %v, want ErrConflict", err)
	}
	if err := w1(); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("overtaken append = %v, want ErrConflict", err)
	}
	if queued {
		if err := w2(); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("append queued on the overtaken one = %v, want ErrConflict", err)
		}
	}
	a := readAll(t, other, "a")
	if len(a) != 3 || a[2].AcceptedAtMs != 3 {
		t.Fatalf("a: %d records", len(a))
	}
	wantY := 0
	if queued {
		wantY = 1
	}
	if n := len(readAll(t, other, "x")); n != 1 {
		t.Fatalf("x: %d records, want 1", n)
	}
	if last, err := other.LastSeq(ctx, "y"); last != uint64(wantY) {
		t.Fatalf("y: last seq %d (%v), want %d (queued: %v)", last, err, wantY, queued)
	}
	unfenceThenContinue(t, s, other)
}

// The race above with its order fixed: the overtaken append has settled
// (its wait returned) before the next one of the session starts. The next
// one continues the stored tip by its sequence number, but it was decided
// on the record that was refused: it is ErrConflict at once and nothing of
// the call is written, its other session's records included.
func TestAppendAsyncAfterAFailedOneIsFenced(t *testing.T) {
	srv := natstest.Run(t)
	s := open(t, srv, "fence", 0)
	other := open(t, srv, "fence", 0)
	if err := s.Append(ctx, recs("a", 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := other.Append(ctx, []session.Record{rec("a", 3)}); err != nil {
		t.Fatal(err)
	}
	w1, err := s.AppendAsync(ctx, []session.Record{rec("a", 3)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w1(); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("overtaken append = %v, want ErrConflict", err)
	}
	if _, err := s.AppendAsync(ctx, []session.Record{rec("a", 4), rec("y", 1)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendAsync after the failed one = %v, want ErrConflict", err)
	}
	if err := s.Append(ctx, []session.Record{rec("a", 4)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Append after the failed one = %v, want ErrConflict", err)
	}
	if n := len(readAll(t, other, "a")); n != 3 {
		t.Fatalf("a: %d records, want 3", n)
	}
	if _, err := other.LastSeq(ctx, "y"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("y after the refused call: LastSeq = %v, want ErrNotFound (nothing written)", err)
	}
	// Another session of the same store is not fenced.
	if err := s.Append(ctx, []session.Record{rec("z", 1)}); err != nil {
		t.Fatalf("another session: %v", err)
	}
	unfenceThenContinue(t, s, other)
}

// unfenceThenContinue: once the caller has rebuilt "a" (three records
// stored) and unfenced it, its record 4 is stored.
func unfenceThenContinue(t *testing.T, s, other store.Store) {
	t.Helper()
	s.(store.Fencer).Unfence("a")
	if err := s.Append(ctx, []session.Record{rec("a", 4)}); err != nil {
		t.Fatalf("append after Unfence: %v", err)
	}
	if n := len(readAll(t, other, "a")); n != 4 {
		t.Fatalf("a: %d records, want 4", n)
	}
}

// A hot session: appends started while the session's first one is in
// flight queue behind it and go out together once it is acknowledged,
// so the session's 50 appends take fewer than 50 messages; every record
// is stored once, in order, chained.
func TestAppendAsyncHotSessionCoalesces(t *testing.T) {
	srv := natstest.Run(t)
	s := open(t, srv, "hot", 0)
	var waits []func() error
	for seq := uint64(1); seq <= 50; seq++ {
		w, err := s.AppendAsync(ctx, []session.Record{rec("h", seq)})
		if err != nil {
			t.Fatalf("AppendAsync %d: %v", seq, err)
		}
		waits = append(waits, w)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("wait %d: %v", i+1, err)
		}
	}
	got := readAll(t, open(t, srv, "hot", 0), "h")
	if len(got) != 50 {
		t.Fatalf("%d records, want 50", len(got))
	}
	js := s.JetStream()
	msgs := uint64(0)
	for _, name := range s.StreamNames() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.Subject("h")))
		if err != nil {
			t.Fatal(err)
		}
		msgs += info.State.Subjects[s.Subject("h")]
	}
	if msgs == 0 || msgs >= 50 {
		t.Fatalf("50 appends of one session took %d messages: not coalesced", msgs)
	}
	t.Logf("50 pipelined appends of one session: %d messages", msgs)
}
