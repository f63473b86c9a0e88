package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
	"google.golang.org/protobuf/proto"
)

// collect follows sid from after and returns the first n records (n < 0:
// until the follow ends), cancelling the follow afterwards (a disconnect).
func collect(t *testing.T, r *Runtime, id coord.Identity, sid string, after uint64, n int, opts FollowOptions) ([]session.Record, error) {
	t.Helper()
	// A bound against a hang, not a performance assertion.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
//
// The writers are paced by the trials, not by time: before each trial the
// test hands out one token per record the trial will ask for that does
// not exist yet, plus a few, so the trial's follow overlaps the writes and
// never waits for a record nobody will write, however slow the machine.
func TestFollowResumeTrials(t *testing.T) {
	st := memstore.New()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)
	stop := make(chan struct{})
	tokens := make(chan struct{}, 1<<16)
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w, id := range []coord.Identity{initID, aliceID, bobID} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tokens:
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
	issued, _ := r.LastSeq(sid) // records written or promised
	for trial := 0; trial < trials; trial++ {
		last, _ := r.LastSeq(sid)
		cursor := uint64(rng.IntN(int(last) + 1))
		k, k2 := 1+rng.IntN(20), 1+rng.IntN(5)
		more := rng.IntN(4) // written while the trial catches up
		if need := cursor + uint64(k+k2); need > issued {
			more += int(need - issued)
		}
		for range more {
			tokens <- struct{}{}
		}
		issued += uint64(more)
		part1, err := collect(t, r, participantID(trial), sid, cursor, k, FollowOptions{})
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		// Resume from the last delivered sequence number.
		resume := cursor
		if len(part1) > 0 {
			resume = part1[len(part1)-1].Seq
		}
		part2, err := collect(t, r, participantID(trial), sid, resume, k2, FollowOptions{})
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
	clk := clocktest.New()
	r := newRT(t, st, Options{Clock: clk})
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
	clk.Advance(2 * time.Millisecond) // history strictly before the opening
	opened := clk.NowMs()
	clk.Advance(2 * time.Millisecond)
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

// A follower that stops reading while many records are committed falls
// out of the shared tail, catches up from the store, and still sees every
// record exactly once and in order (issue #5 slow consumers).
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
	n := 2 * followTailMin
	mustOK(t, r, initID, proposalEnv(sid, "first"))
	for i := 0; i < n; i++ {
		mustOK(t, r, initID, proposalEnv(sid, fmt.Sprintf("m-%d", i)))
	}
	// The stalled follower is at record 3; the tail has moved past it, so
	// the rest must come from the store.
	if start, _, held := tailWindow(r.lookup(sid)); held > followTailMax || start <= 4 {
		t.Fatalf("tail holds %d records from %d; want at most %d, past 4", held, start, followTailMax)
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
	if tailActive(r.lookup(sid)) {
		t.Fatal("the tail is kept after its last follower left")
	}
}

// tailWindow reports the first sequence number the tail holds, its last,
// and how many records it holds.
func tailWindow(o *owner) (start, end uint64, n int) {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	return o.tail.window()
}

// window: the caller holds owner.durableMu (or owns the tail).
func (t *followTail) window() (start, end uint64, n int) {
	end = t.end.Load()
	if t.ring.Load() == nil || end == 0 || t.start > end {
		return 0, 0, 0
	}
	return t.start, end, int(end - t.start + 1)
}

func tailActive(o *owner) bool {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	return o.followers > 0 || o.tail.ring.Load() != nil
}

// The committer does no work per follower: with 1,000 registered
// followers that do not read (each stalls in its first delivery), 2,000
// records are accepted, the shared tail stays bounded, and once the
// followers read, every one of them receives every record exactly once,
// in order (from the tail or, having fallen out of it, from the store),
// then the terminal record and the end. Nothing here is timed: the
// senders finish only if acceptance never waits for a follower (else the
// test hangs and go test's -timeout reports where), and every count is
// exact.
func TestFollowStalledFollowersCostCommitterNothing(t *testing.T) {
	st := memstore.New()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)
	o := r.lookup(sid)
	first := o.durable()
	const followers, records = 1000, 2000
	gate := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type tally struct {
		next  uint64 // next sequence number expected
		count int
	}
	tallies := make([]*tally, followers)
	errs := make(chan error, followers)
	for i := range tallies {
		tl := &tally{next: first + 1}
		tallies[i] = tl
		go func() {
			errs <- r.Follow(ctx, observerID, sid, first, FollowOptions{}, func(rec session.Record) error {
				<-gate
				if rec.Seq != tl.next {
					return fmt.Errorf("record %d, want %d", rec.Seq, tl.next)
				}
				tl.next++
				tl.count++
				return nil
			})
		}()
	}
	eventually(t, 2*time.Minute, "followers registered", func() bool {
		o.durableMu.Lock()
		defer o.durableMu.Unlock()
		return o.followers == followers
	})

	start := time.Now()
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < records; i += 4 {
				if ack := r.Send(ctx, initID, proposalEnv(sid, fmt.Sprintf("s-%d", i))); !ack.Ok {
					t.Errorf("send %d: %v", i, ack.Error)
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait() // the followers are all stalled in their first delivery
	if sent.Load() != records {
		t.Fatalf("accepted %d of %d records", sent.Load(), records)
	}
	t.Logf("accepted %d records with %d stalled followers in %v", records, followers, time.Since(start))
	if _, end, held := tailWindow(o); held > followTailMax || end != first+records {
		t.Fatalf("tail holds %d records up to %d; want at most %d, up to %d", held, end, followTailMax, first+records)
	}

	close(gate)
	mustOK(t, r, initID, commitEnv(sid, "end", "c"))
	final := o.durable()
	for range followers {
		if err := <-errs; !errors.Is(err, ErrFollowEnded) {
			t.Fatalf("follower: %v", err)
		}
	}
	for i, tl := range tallies {
		if tl.next != final+1 || tl.count != int(final-first) {
			t.Fatalf("follower %d received %d records up to %d; want %d up to %d", i, tl.count, tl.next-1, final-first, final)
		}
	}
	if tailActive(o) {
		t.Fatal("the tail is kept after its last follower left")
	}
}

// The completer's work for a request does not depend on the number of
// followers: answeredWith allocates the same with 1 or 1,000 registered
// followers (its own copy of the records and the durability channel; the
// followers are woken by the relay, not started here), and the tail never
// holds more than followTailMax records. Allocations are counted, not
// timed; the fewest of several runs is taken, since another goroutine of
// the process can only add to the count.
func TestFollowAnswerCostIndependentOfFollowers(t *testing.T) {
	o := &owner{durableCh: make(chan struct{})}
	stopped := make(chan struct{})
	seq := uint64(0)
	recs := make([]session.Record, 1)
	answer := func() {
		seq++
		recs[0] = session.Record{Seq: seq}
		o.durableMu.Lock()
		o.pending++
		o.durableMu.Unlock()
		o.answeredWith(recs)
	}
	// The first follower, as addFollower registers it, but without the
	// relay goroutine: nothing else of this test runs while it counts.
	o.durableMu.Lock()
	o.followers = 1
	o.tail.reset()
	o.durableMu.Unlock()
	for range 2 * followTailMin { // the ring full
		answer()
	}
	allocs := func() float64 {
		fewest := testing.AllocsPerRun(200, answer)
		for range 4 {
			fewest = min(fewest, testing.AllocsPerRun(200, answer))
		}
		return fewest
	}
	one := allocs()
	for range 999 {
		o.addFollower(stopped) // a tail is active: no relay is started
	}
	many := allocs()
	if one != many || one > 2 {
		t.Fatalf("answeredWith allocates %v with 1 follower and %v with 1,000; want the same, at most 2", one, many)
	}
	if start, end, n := tailWindow(o); n != followTailMin || end != seq || start != seq-followTailMin+1 {
		t.Fatalf("tail holds %d records %d..%d; want %d up to %d", n, start, end, followTailMin, seq)
	}
}

// The tail against a model: random batches (sometimes a jump in sequence
// numbers, as after a rebuild; sometimes large payloads; sometimes a
// follower asks for a larger ring); after each, the tail holds exactly the
// model's window (bounded by the ring's size, at most followTailMax, and
// by followTailMaxBytes), a follower finds every record of the window and
// no record outside it, and the followers are woken.
func TestFollowTailModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var tl followTail
	// No relay goroutine: the test plays it (below), so that waking the
	// followers is checked step by step, without waiting on a scheduler.
	tl.reset()
	var model []session.Record // the window: consecutive, newest last
	cost := 0
	seq := uint64(0)
	big := make([]byte, 1<<20) // shared by the large payloads
	capacity := followTailMin
	for step := 0; step < 20000; step++ {
		if rng.IntN(400) == 0 {
			tl.wantGrow.Store(true) // as a follower half a ring behind
			capacity = min(2*capacity, followTailMax)
		}
		if rng.IntN(50) == 0 {
			seq += uint64(1 + rng.IntN(5)) // a jump: the tail starts over
			model, cost = nil, 0
		}
		batch := make([]session.Record, 1+rng.IntN(8))
		for i := range batch {
			seq++
			payload := big[:10]
			if rng.IntN(20) == 0 {
				payload = big[:1+rng.IntN(len(big))]
			}
			batch[i] = session.Record{Seq: seq, Envelope: &macpv1.Envelope{MessageId: fmt.Sprint(seq), Payload: payload}}
			model = append(model, batch[i])
			cost += recordCost(&batch[i])
		}
		for len(model) > capacity || (cost > followTailMaxBytes && len(model) > len(batch)) {
			cost -= recordCost(&model[0])
			model = model[1:]
		}
		wake := tl.wake.Load()
		tl.append(batch)
		select {
		case <-tl.notify: // the relay's poke: it broadcasts
			tl.broadcast()
		default:
			t.Fatalf("step %d: append did not poke the relay", step)
		}
		if !closed(*wake) {
			t.Fatalf("step %d: the waiting followers were not woken", step)
		}
		ring := tl.ring.Load()
		if start, end, n := tl.window(); n != len(model) || start != model[0].Seq || end != seq || tl.bytes != cost || len(ring.slots) != capacity {
			t.Fatalf("step %d: tail %d..%d (%d records, %d bytes, %d slots), model %d..%d (%d, %d, %d)", step, start, end, n, tl.bytes, len(ring.slots), model[0].Seq, seq, len(model), cost, capacity)
		}
		// Every slot now and then; otherwise the edges and a sample.
		lo := model[0].Seq - min(model[0].Seq-1, uint64(capacity)+5)
		probe := []uint64{}
		if step%500 == 0 {
			for s := lo; s <= seq+2; s++ {
				probe = append(probe, s)
			}
		} else {
			for d := range uint64(3) {
				probe = append(probe, model[0].Seq+d, seq+d, model[0].Seq-min(d, model[0].Seq-1), seq-d)
			}
			for range 16 {
				probe = append(probe, lo+uint64(rng.IntN(int(seq+3-lo))))
			}
		}
		for _, s := range probe {
			p := ring.get(s)
			if s < model[0].Seq || s > seq {
				if p != nil {
					t.Fatalf("step %d: record %d found outside the window %d..%d", step, s, model[0].Seq, seq)
				}
				continue
			}
			if want := &model[s-model[0].Seq]; p == nil || p.Envelope != want.Envelope {
				t.Fatalf("step %d: record %d: found %v, want %v", step, s, p, want)
			}
		}
	}
}

// A failed append and the rebuild that follows (heal) do not disturb a
// live follower: the record that failed is never delivered, and the
// follower continues with the records accepted after the rebuild, exactly
// as stored.
func TestFollowAcrossFailedAppend(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0) // records 1, 2
	ch := make(chan session.Record, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- r.Follow(ctx, aliceID, sid, 0, FollowOptions{}, func(rec session.Record) error {
			ch <- rec
			return nil
		})
	}()
	for want := uint64(1); want <= 2; want++ {
		if rec := recv(t, ch, "stored record"); rec.Seq != want {
			t.Fatalf("delivered %d, want %d", rec.Seq, want)
		}
	}
	eventually(t, 5*time.Second, "follower registered", func() bool { return tailActive(r.lookup(sid)) })
	st.failNext(sid, 1)
	wantCode(t, r.Send(context.Background(), aliceID, proposalEnv(sid, "lost")), coord.CodeInternalError)
	nothingFor(t, ch, 50*time.Millisecond, "a record whose append failed")
	for i := range 5 {
		mustOK(t, r, aliceID, proposalEnv(sid, fmt.Sprintf("after-%d", i)))
	}
	mustOK(t, r, initID, commitEnv(sid, "end", "c"))
	want := stored(t, st, sid)[2:]
	var got []session.Record
	for range want {
		got = append(got, recv(t, ch, "record after the rebuild"))
	}
	sameRecords(t, "after a failed append", want, got)
	if got[0].Envelope.MessageId != "after-0" {
		t.Fatalf("first record after the failure is %s, want after-0", got[0].Envelope.MessageId)
	}
	if err := recv(t, done, "end of follow"); !errors.Is(err, ErrFollowEnded) {
		t.Fatalf("follow ended with %v", err)
	}
}

// A follower of an ended session that was evicted from memory follows the
// reloaded owner: the whole history, then the end. A registered follower
// keeps its session resident.
func TestFollowEvictedSession(t *testing.T) {
	st := memstore.New()
	clk := clocktest.New()
	r := newRT(t, st, Options{EvictAfter: 20 * time.Millisecond, Clock: clk})
	sid := openSession(t, r, 0)
	gate := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- r.Follow(context.Background(), bobID, sid, 0, FollowOptions{}, func(rec session.Record) error {
			if rec.Seq == 1 {
				<-gate
			}
			return nil
		})
	}()
	eventually(t, 5*time.Second, "follower registered", func() bool { return tailActive(r.lookup(sid)) })
	mustOK(t, r, initID, commitEnv(sid, "end", "c"))
	clk.Advance(time.Minute) // long past EvictAfter: the session is idle but followed
	r.evictIdle()            // what housekeeping runs at each tick, run here to know it ran
	if !resident(r, sid) {
		t.Fatal("a session with a registered follower was evicted")
	}
	close(gate)
	if err := recv(t, held, "end of the held follow"); !errors.Is(err, ErrFollowEnded) {
		t.Fatalf("held follow: %v", err)
	}
	// The housekeeping ticks evict it now. Each poll moves the clock a tick
	// on: a tick the loop was still busy with when the follow ended (the
	// fake ticker drops ticks, as a real one does) is not a lost eviction.
	eventually(t, 10*time.Second, "eviction", func() bool {
		clk.Advance(20 * time.Millisecond)
		return !resident(r, sid)
	})
	got, err := collect(t, r, aliceID, sid, 0, -1, FollowOptions{})
	if !errors.Is(err, ErrFollowEnded) {
		t.Fatalf("follow of an evicted session: %v", err)
	}
	sameRecords(t, "evicted session", stored(t, st, sid), got)
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

// Closing the runtime ends live followers (INTERNAL_ERROR, shutting down)
// and leaves no goroutine behind (the tail's relay ends too); so does
// cancelling a follower's context.
func TestFollowEndsOnCloseAndCancel(t *testing.T) {
	base := goruntime.NumGoroutine()
	st := memstore.New()
	r := New(st, testModes(), defaultPolicies, Options{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sid := openSession(t, r, 0)
	follow := func(ctx context.Context) (<-chan error, <-chan session.Record) {
		errc, recs := make(chan error, 1), make(chan session.Record, 16)
		go func() {
			errc <- r.Follow(ctx, aliceID, sid, 2, FollowOptions{}, func(rec session.Record) error {
				recs <- rec
				return nil
			})
		}()
		return errc, recs
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancelled, _ := follow(ctx)
	live, recs := follow(context.Background())
	eventually(t, 5*time.Second, "followers registered", func() bool {
		o := r.lookup(sid)
		o.durableMu.Lock()
		defer o.durableMu.Unlock()
		return o.followers == 2
	})
	cancel()
	if err := recv(t, cancelled, "cancelled follow"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled follow ended with %v", err)
	}
	mustOK(t, r, initID, proposalEnv(sid, "m2"))
	if rec := recv(t, recs, "live record"); rec.Seq != 3 {
		t.Fatalf("live record %d, want 3", rec.Seq)
	}
	r.Close()
	if err := recv(t, live, "follow at close"); coord.CodeOf(err) != coord.CodeInternalError {
		t.Fatalf("follow at close ended with %v", err)
	}
	eventually(t, 2*time.Second, "goroutines to return to the baseline", func() bool {
		return goruntime.NumGoroutine() <= base
	})
}
