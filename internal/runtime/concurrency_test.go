package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// ackLog collects, per session, the message ids acked ok (not duplicate)
// and those rejected with INTERNAL_ERROR.
type ackLog struct {
	mu     sync.Mutex
	ok     map[string][]string
	failed map[string][]string
}

func newAckLog() *ackLog {
	return &ackLog{ok: make(map[string][]string), failed: make(map[string][]string)}
}

func (l *ackLog) add(t *testing.T, sid string, env *macpv1.Envelope, ack *macpv1.Ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case ack.Ok && !ack.Duplicate:
		l.ok[sid] = append(l.ok[sid], env.MessageId)
	case ack.Ok:
		t.Errorf("%s: unexpected duplicate ack", env.MessageId)
	case ack.Error.Code == string(coord.CodeInternalError):
		l.failed[sid] = append(l.failed[sid], env.MessageId)
	default:
		t.Errorf("%s: unexpected rejection %v", env.MessageId, ack.Error)
	}
}

// checkStore verifies ADM-24/IDEM-5 against the acks: every ok-acked
// message is stored exactly once, no message that got INTERNAL_ERROR is
// stored, the history is gapless in Seq order (storedIDs), and the
// in-memory session agrees with the store.
func (l *ackLog) checkStore(t *testing.T, r *Runtime, st store.Store, sid string) {
	t.Helper()
	ids := storedIDs(t, st, sid)
	have := make(map[string]bool, len(ids))
	for _, id := range ids {
		have[id] = true
	}
	for _, id := range l.ok[sid] {
		if !have[id] {
			t.Errorf("session %s: %s was acked ok but is not stored", sid, id)
		}
	}
	for _, id := range l.failed[sid] {
		if have[id] {
			t.Errorf("session %s: %s got INTERNAL_ERROR but is stored", sid, id)
		}
	}
	// Everything stored after the start was acked ok by someone.
	if want := len(l.ok[sid]) + 1; len(ids) != want {
		t.Errorf("session %s: %d stored envelopes, %d acked ok (+1 start)", sid, len(ids), want-1)
	}
	v := inspect(t, r, sid)
	if v.seq != uint64(len(stored(t, st, sid))) {
		t.Errorf("session %s: in-memory seq %d, stored %d", sid, v.seq, len(ids))
	}
	for _, id := range ids {
		if !slices.Contains(v.seen, id) {
			t.Errorf("session %s: stored %s is not in the dedup set", sid, id)
		}
	}
	if len(v.seen) != len(ids) {
		t.Errorf("session %s: dedup set has %d ids, store %d", sid, len(v.seen), len(ids))
	}
}

// Package doc steps 1-2 (pipelining, group commit) and ADM-31: many
// goroutines send to many sessions at once; every ok-acked message is in
// the store exactly once, in a gapless per-session sequence.
func TestConcurrentSendsManySessions(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	const sessions, senders, perSender = 16, 4, 25
	sids := make([]string, sessions)
	for i := range sids {
		sids[i] = newSID()
		mustOK(t, r, initID, startEnv(sids[i], "start", 60_000))
	}
	base := st.appends.Load()
	log := newAckLog()
	var wg sync.WaitGroup
	for s, sid := range sids {
		for g := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perSender {
					id := []coord.Identity{initID, aliceID, bobID}[(g+i)%3]
					env := proposalEnv(sid, fmt.Sprintf("s%d-g%d-%d", s, g, i))
					log.add(t, sid, env, r.Send(context.Background(), id, env))
				}
			}()
		}
	}
	wg.Wait()
	for _, sid := range sids {
		if n := len(log.ok[sid]); n != senders*perSender {
			t.Errorf("session %s: %d of %d acked ok", sid, n, senders*perSender)
		}
		log.checkStore(t, r, st, sid)
	}
	appends := st.appends.Load() - base
	t.Logf("group commit: %d records in %d appends (%.2f per append)",
		sessions*senders*perSender, appends, float64(sessions*senders*perSender)/float64(appends))
	if appends > int64(sessions*senders*perSender) {
		t.Errorf("%d appends for %d records", appends, sessions*senders*perSender)
	}
}

// ADM-31: one session, 16 concurrent senders. Acceptance is serialized:
// every acked message stored once, gapless, participant activity adds up.
func TestConcurrentSendersOneSession(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := newSID()
	mustOK(t, r, initID, startEnv(sid, "start", 60_000))
	log := newAckLog()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				env := proposalEnv(sid, fmt.Sprintf("g%d-%d", g, i))
				id := []coord.Identity{initID, aliceID, bobID}[g%3]
				log.add(t, sid, env, r.Send(context.Background(), id, env))
			}
		}()
	}
	wg.Wait()
	if n := len(log.ok[sid]); n != 320 {
		t.Fatalf("%d acked ok, want 320", n)
	}
	log.checkStore(t, r, st, sid)
	var total uint32
	for _, a := range inspect(t, r, sid).activity {
		total += a.MessageCount
	}
	if total != 321 {
		t.Fatalf("participant activity counts %d messages, want 321", total)
	}
}

// Durable-before-ack under concurrency with random append failures: the
// invariants of checkStore hold for every session, the runtime keeps
// healing, and after the faults stop every failed message can be resent and
// is then accepted as new (ADM-24, ADM-30, package doc heal).
func TestConcurrentSendsWithRandomFailures(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	const sessions, senders, perSender = 8, 4, 30
	sids := make([]string, sessions)
	for i := range sids {
		sids[i] = newSID()
		mustOK(t, r, initID, startEnv(sids[i], "start", 60_000))
	}
	st.failRandomly(3) // one append in three fails, at random
	log := newAckLog()
	var wg sync.WaitGroup
	for s, sid := range sids {
		for g := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perSender {
					env := proposalEnv(sid, fmt.Sprintf("s%d-g%d-%d", s, g, i))
					log.add(t, sid, env, r.Send(context.Background(), []coord.Identity{aliceID, bobID}[g%2], env))
				}
			}()
		}
	}
	wg.Wait()
	st.failRandomly(0)
	failed := 0
	for _, sid := range sids {
		log.checkStore(t, r, st, sid)
		failed += len(log.failed[sid])
	}
	t.Logf("%d of %d sends failed", failed, sessions*senders*perSender)
	// Resend every failed message: each is new (it consumed no slot).
	for _, sid := range sids {
		for _, id := range log.failed[sid] {
			env := proposalEnv(sid, id)
			ack := r.Send(context.Background(), aliceID, env)
			if !ack.Ok || ack.Duplicate {
				t.Fatalf("resend of failed %s: %v", id, ack)
			}
		}
		if ids := storedIDs(t, st, sid); len(ids) != 1+senders*perSender {
			t.Fatalf("session %s: %d stored after resends", sid, len(ids))
		}
	}
}

// TERM-2 "First accepted terminal wins races": N different valid
// Commitments at once: exactly one ok (RESOLVED), the others
// SESSION_NOT_OPEN, exactly one terminal record, and it is the last.
func TestConcurrentCommitmentsOneWins(t *testing.T) {
	for range 10 {
		st := newFaultStore()
		r := newRT(t, st, Options{})
		sid := openSession(t, r, 0)
		const n = 12
		acks := make([]*macpv1.Ack, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acks[i] = r.Send(context.Background(), initID, commitEnv(sid, msgID("c", i), msgID("cid", i)))
			}()
		}
		wg.Wait()
		wins := 0
		for _, ack := range acks {
			switch {
			case ack.Ok && !ack.Duplicate:
				wins++
				if ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
					t.Fatalf("winner ack %v", ack)
				}
			default:
				wantCode(t, ack, coord.CodeSessionNotOpen)
			}
		}
		if wins != 1 {
			t.Fatalf("%d Commitments won", wins)
		}
		recs := stored(t, st, sid)
		if countTerminal(recs) != 1 || !terminalRecord(recs[len(recs)-1]) {
			t.Fatalf("stored %d terminal records", countTerminal(recs))
		}
		storedIDs(t, st, sid)
	}
}

// TERM-2 and CANCEL-3/4: a Commitment racing CancelSession: exactly one
// terminal record; the loser sees SESSION_NOT_OPEN (Commitment) or an
// idempotent ok with the winner's state (Cancel).
func TestCommitmentRacesCancel(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	wins := map[string]int{}
	for range 40 {
		sid := openSession(t, r, 0)
		var wg sync.WaitGroup
		var commitAck, cancelAck *macpv1.Ack
		var cancelErr *coord.Error
		wg.Add(2)
		go func() { defer wg.Done(); commitAck = r.Send(context.Background(), initID, commitEnv(sid, "c", "c1")) }()
		go func() { defer wg.Done(); cancelAck, cancelErr = r.Cancel(context.Background(), initID, sid, "race") }()
		wg.Wait()
		if cancelErr != nil || !cancelAck.Ok {
			t.Fatalf("cancel: %v %v", cancelAck, cancelErr)
		}
		recs := stored(t, st, sid)
		if countTerminal(recs) != 1 {
			t.Fatalf("%d terminal records", countTerminal(recs))
		}
		last := recs[len(recs)-1]
		switch last.Kind {
		case session.KindCancel:
			wins["cancel"]++
			wantCode(t, commitAck, coord.CodeSessionNotOpen)
			if cancelAck.SessionState != macpv1.SessionState_SESSION_STATE_EXPIRED {
				t.Fatalf("cancel ack %v", cancelAck)
			}
		case session.KindMessage:
			wins["commit"]++
			if !commitAck.Ok || commitAck.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
				t.Fatalf("commit ack %v", commitAck)
			}
			if cancelAck.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED || cancelAck.MessageId != "" {
				t.Fatalf("late cancel ack %v", cancelAck)
			}
		default:
			t.Fatalf("last record %s", last.Kind)
		}
	}
	t.Logf("winners: %v", wins)
}

// RFC-MACP-0001 §8.2, IDEM-2: concurrent SessionStarts for one session id
// with different message ids: exactly one ok, the rest
// SESSION_ALREADY_EXISTS; concurrent resends of the winning message id are
// duplicates; one session stored.
func TestConcurrentStartsSameSession(t *testing.T) {
	for range 10 {
		st := newFaultStore()
		r := newRT(t, st, Options{})
		sid := newSID()
		const n = 12
		acks := make([]*macpv1.Ack, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acks[i] = r.Send(context.Background(), initID, startEnv(sid, msgID("start", i), 60_000))
			}()
		}
		wg.Wait()
		winner := ""
		for i, ack := range acks {
			if ack.Ok {
				if winner != "" || ack.Duplicate {
					t.Fatalf("second winner %v", ack)
				}
				winner = msgID("start", i)
				continue
			}
			wantCode(t, ack, coord.CodeSessionAlreadyExists)
		}
		if winner == "" {
			t.Fatal("no start won")
		}
		if ids := storedIDs(t, st, sid); !slices.Equal(ids, []string{winner}) {
			t.Fatalf("stored %v", ids)
		}

		// Same message id, concurrently: duplicates.
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acks[i] = r.Send(context.Background(), initID, startEnv(sid, winner, 60_000))
			}()
		}
		wg.Wait()
		for _, ack := range acks {
			if !ack.Ok || !ack.Duplicate {
				t.Fatalf("resend of the start: %v", ack)
			}
		}
	}
	// Concurrent first starts with the same message id: one new, the rest
	// duplicates, whichever goroutine wins.
	st := newFaultStore()
	r := newRT(t, st, Options{})
	for range 10 {
		sid := newSID()
		var wg sync.WaitGroup
		acks := make([]*macpv1.Ack, 8)
		for i := range acks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acks[i] = r.Send(context.Background(), initID, startEnv(sid, "m0", 60_000))
			}()
		}
		wg.Wait()
		fresh := 0
		for _, ack := range acks {
			if !ack.Ok {
				t.Fatalf("same-id start: %v", ack)
			}
			if !ack.Duplicate {
				fresh++
			}
		}
		if fresh != 1 {
			t.Fatalf("%d fresh acks for one SessionStart", fresh)
		}
	}
}

// Close while sends are in flight: every Send returns (no goroutine stays
// blocked on an unanswered commit), and Sends after Close fail cleanly.
func TestCloseWithInFlightSends(t *testing.T) {
	for range 20 {
		st := newFaultStore()
		r := New(st, testModes(), policy.DefaultOnly{}, Options{})
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		sid := newSID()
		mustOK(t, r, initID, startEnv(sid, "start", 60_000))
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					ack := r.Send(context.Background(), aliceID, proposalEnv(sid, fmt.Sprintf("g%d-%d", g, i)))
					if !ack.Ok && ack.Error.Code != string(coord.CodeInternalError) {
						t.Errorf("send during close: %v", ack)
					}
				}
			}()
		}
		r.Close()
		waitGroupOrFail(t, &wg)
		wantCode(t, r.Send(context.Background(), aliceID, proposalEnv(sid, "after")), coord.CodeInternalError)
	}
}
