package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
	"google.golang.org/protobuf/proto"
)

// collect follows sid from after and returns the first n records (n < 0:
// until the follow ends), cancelling the follow afterwards (a disconnect).
func collect(t *testing.T, r *Runtime, id coord.Identity, sid string, after uint64, n int, opts FollowOptions) ([]session.Record, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []session.Record
	errDone := errors.New("enough")
	if n == 0 {
		return nil, nil
	}
	err := r.Follow(ctx, id, sid, after, opts, func(rec session.Record) error {
		got = append(got, rec)
		if n > 0 && len(got) == n {
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) {
		err = nil
	}
	return got, err
}

// sameRecords checks that got is exactly want: same sequence numbers and
// byte-equal envelopes.
func sameRecords(t *testing.T, what string, want, got []session.Record) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: got %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		if want[i].Seq != got[i].Seq || !proto.Equal(want[i].Envelope, got[i].Envelope) {
			t.Fatalf("%s: record %d: got seq %d %v, want seq %d %v", what, i, got[i].Seq, got[i].Envelope, want[i].Seq, want[i].Envelope)
		}
	}
}

// Issue #5 acceptance: 1,000 disconnect/resume trials at random cut points
// while several senders keep writing: every trial receives exactly the
// accepted envelopes after its cursor, byte-equal to the stored ones, in
// order, no gap, no duplicate (RFC-MACP-0006 §3.2 after_sequence).
func TestFollowResumeTrials(t *testing.T) {
	st := memstore.New()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w, id := range []coord.Identity{initID, aliceID, bobID} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3000; i++ { // bounded history; paced so trials overlap the writes
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Microsecond):
				}
				ack := r.Send(context.Background(), id, proposalEnv(sid, fmt.Sprintf("w%d-%d", w, i)))
				if !ack.Ok {
					t.Errorf("sender %d: %v", w, ack.Error)
					return
				}
				sent.Add(1)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	trials := 1000
	if testing.Short() {
		trials = 200
	}
	for trial := 0; trial < trials; trial++ {
		last, _ := r.LastSeq(sid)
		cursor := uint64(rng.IntN(int(last) + 1))
		k := 1 + rng.IntN(20)
		part1, err := collect(t, r, participantID(trial), sid, cursor, k, FollowOptions{})
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		// Resume from the last delivered sequence number.
		resume := cursor
		if len(part1) > 0 {
			resume = part1[len(part1)-1].Seq
		}
		part2, err := collect(t, r, participantID(trial), sid, resume, 1+rng.IntN(5), FollowOptions{})
		if err != nil {
			t.Fatalf("trial %d resume: %v", trial, err)
		}
		got := append(part1, part2...)
		want := storedRange(t, st, sid, cursor+1, len(got))
		sameRecords(t, fmt.Sprintf("trial %d (cursor %d)", trial, cursor), want, got)
	}
	close(stop)
	wg.Wait()
	if sent.Load() == 0 {
		t.Fatal("senders sent nothing")
	}
	// End the session: a follower from 0 gets all of history and ends.
	mustOK(t, r, initID, commitEnv(sid, "final", "c1"))
	all, err := collect(t, r, aliceID, sid, 0, -1, FollowOptions{})
	if !errors.Is(err, ErrFollowEnded) {
		t.Fatalf("follow of a terminal session: %v", err)
	}
	sameRecords(t, "full history", stored(t, st, sid), all)
}

// storedRange reads n stored records from seq from.
func storedRange(t *testing.T, st *memstore.Store, sid string, from uint64, n int) []session.Record {
	t.Helper()
	var out []session.Record
	stopRead := errors.New("stop")
	err := st.Read(context.Background(), sid, from, func(rec session.Record) error {
		if len(out) == n {
			return stopRead
		}
		out = append(out, rec)
		return nil
	})
	if err != nil && !errors.Is(err, stopRead) {
		t.Fatal(err)
	}
	return out
}

func participantID(trial int) coord.Identity {
	if trial%2 == 0 {
		return aliceID
	}
	return bobID
}

// Boundary cases of after_sequence (issue #5): 0 = from SessionStart,
// = N and > N = live only (from the stream's opening), terminal session =
// everything then the end, unauthorized, unknown session.
func TestFollowBoundaries(t *testing.T) {
	st := memstore.New()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0) // records 1 (start), 2 (proposal)

	got, err := collect(t, r, aliceID, sid, 0, 2, FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "after 0", stored(t, st, sid), got)
	if got[0].Envelope.MessageType != coord.TypeSessionStart {
		t.Fatalf("after_sequence 0 must start with SessionStart, got %s", got[0].Envelope.MessageType)
	}

	for _, after := range []uint64{2, 1 << 40} {
		ch := make(chan session.Record, 8)
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan uint64, 1)
		go func() {
			_ = r.Follow(ctx, aliceID, sid, after, FollowOptions{OnStart: func(last uint64) { started <- last }}, func(rec session.Record) error {
				ch <- rec
				return nil
			})
		}()
		if last := <-started; last != 2 {
			t.Fatalf("OnStart lastSeq = %d, want 2", last)
		}
		env := proposalEnv(sid, fmt.Sprintf("live-%d", after))
		mustOK(t, r, initID, env)
		select {
		case rec := <-ch:
			if rec.Envelope.MessageId != env.MessageId {
				t.Fatalf("after %d: first delivered %s, want the live %s", after, rec.Envelope.MessageId, env.MessageId)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("after %d: live envelope not delivered", after)
		}
		cancel()
		sid = openSession(t, r, 0) // next iteration: again 2 records
	}

	// Live since the stream opened: a record accepted between opening and
	// subscribing with after > N is still delivered.
	time.Sleep(2 * time.Millisecond) // history strictly before the opening
	opened := time.Now().UnixMilli()
	time.Sleep(2 * time.Millisecond)
	mustOK(t, r, initID, proposalEnv(sid, "between"))
	got, err = collect(t, r, aliceID, sid, 1<<40, 1, FollowOptions{LiveSinceMs: opened})
	if err != nil || len(got) != 1 || got[0].Envelope.MessageId != "between" {
		t.Fatalf("live-since: %v %v", got, err)
	}

	// Terminal: everything, then the end.
	mustOK(t, r, initID, commitEnv(sid, "end", "c"))
	got, err = collect(t, r, bobID, sid, 0, -1, FollowOptions{})
	if !errors.Is(err, ErrFollowEnded) {
		t.Fatalf("terminal: %v", err)
	}
	sameRecords(t, "terminal", stored(t, st, sid), got)

	// Unauthorized and unknown.
	if _, err := collect(t, r, coord.Identity{Sender: "mallory"}, sid, 0, -1, FollowOptions{}); coord.CodeOf(err) != coord.CodeForbidden {
		t.Fatalf("outsider: %v", err)
	}
	if _, err := collect(t, r, coord.Identity{Sender: "eve", Caps: coord.Capabilities{IsObserver: true}}, sid, 0, 1, FollowOptions{}); err != nil {
		t.Fatalf("observer: %v", err)
	}
	if _, err := collect(t, r, aliceID, newSID(), 0, -1, FollowOptions{}); coord.CodeOf(err) != coord.CodeSessionNotFound {
		t.Fatalf("unknown: %v", err)
	}
}

// A follower that stops reading while many records are committed is
// dropped from the live list, catches up from the store, and still sees
// every record exactly once and in order (issue #5 slow consumers).
func TestFollowSlowConsumer(t *testing.T) {
	st := memstore.New()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)
	gate := make(chan struct{})
	var got []session.Record
	done := make(chan error, 1)
	go func() {
		done <- r.Follow(context.Background(), aliceID, sid, 0, FollowOptions{}, func(rec session.Record) error {
			if rec.Seq == 3 {
				<-gate // stall after the first live record
			}
			got = append(got, rec)
			return nil
		})
	}()
	n := 3 * followerQueue
	mustOK(t, r, initID, proposalEnv(sid, "first"))
	for i := 0; i < n; i++ {
		mustOK(t, r, initID, proposalEnv(sid, fmt.Sprintf("m-%d", i)))
	}
	close(gate)
	mustOK(t, r, initID, commitEnv(sid, "end", "c"))
	select {
	case err := <-done:
		if !errors.Is(err, ErrFollowEnded) {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("slow follower never finished")
	}
	sameRecords(t, "slow follower", stored(t, st, sid), got)
}

// A record that the store already shows but whose append has not returned
// (Pebble makes a batch readable before its WAL sync completes) is not
// delivered by catch-up: a follower gets it only once it is durable
// (issue #4: never broadcast an entry before it is durable).
func TestFollowCatchUpStopsAtDurable(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0) // records 1, 2
	f := st.inject(&fault{session: sid, times: 1, gate: make(chan struct{}), early: true})
	defer st.releaseAll()
	var acked <-chan *macpv1.Ack
	ch := make(chan session.Record, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = r.Follow(ctx, aliceID, sid, 0, FollowOptions{OnStart: func(uint64) {
			// Before the first store read: record 3 becomes readable
			// but not durable.
			acked = sendAsync(r, context.Background(), initID, proposalEnv(sid, "in-flight"))
			waitEntered(t, f)
		}}, func(rec session.Record) error {
			ch <- rec
			return nil
		})
	}()
	for want := uint64(1); want <= 2; want++ {
		if rec := recv(t, ch, "durable record"); rec.Seq != want {
			t.Fatalf("delivered record %d, want %d", rec.Seq, want)
		}
	}
	if n := len(storedIDs(t, st, sid)); n != 3 {
		t.Fatalf("store shows %d records, want 3 (the in-flight one readable)", n)
	}
	nothingFor(t, ch, 100*time.Millisecond, "a record that is not durable")
	f.release()
	if ack := recv(t, acked, "ack"); !ack.Ok {
		t.Fatalf("in-flight proposal: %v", ack.Error)
	}
	if rec := recv(t, ch, "record 3 once durable"); rec.Seq != 3 || rec.Envelope.MessageId != "in-flight" {
		t.Fatalf("delivered %d %s, want 3 in-flight", rec.Seq, rec.Envelope.GetMessageId())
	}
}
