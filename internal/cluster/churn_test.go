package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
)

// sendInput is one client operation on a session: an envelope identified
// by its message_id, a Proposal or a Commitment.
type sendInput struct {
	sid, msgID string
	commit     bool
}

// sendOutput is its definite outcome: accepted (first time or as a
// duplicate) or refused because the session is no longer OPEN.
type sendOutput struct{ accepted bool }

// sessionState is the model of one session (RFC-MACP-0001 §7-8): the
// message ids accepted so far (sorted, joined) and whether a Commitment
// resolved it.
type sessionState struct {
	ids      string
	resolved bool
}

func (s sessionState) has(id string) bool {
	return slices.Contains(strings.Split(s.ids, ","), id)
}

func (s sessionState) with(id string) sessionState {
	ids := strings.Split(s.ids, ",")
	ids = append(ids, id)
	slices.Sort(ids)
	return sessionState{ids: strings.Join(ids, ","), resolved: s.resolved}
}

// bySession partitions a history by session, in the order sessions first
// appear (porcupine checks each partition on its own).
func bySession(sid func(input any) string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := sid(op.Input)
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	}
}

// sessionModel: a resend of an accepted message_id is accepted (a
// duplicate, DET idempotency); a new envelope is accepted while the
// session is OPEN and refused once it is resolved; the first accepted
// Commitment resolves it.
var sessionModel = porcupine.Model{
	Partition: bySession(func(in any) string { return in.(sendInput).sid }),
	Init:      func() any { return sessionState{ids: "m1"} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(sessionState), input.(sendInput), output.(sendOutput)
		switch {
		case s.has(in.msgID):
			return out.accepted, s
		case s.resolved:
			return !out.accepted, s
		case !out.accepted:
			return false, s
		}
		n := s.with(in.msgID)
		n.resolved = in.commit
		return true, n
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(sendInput), output.(sendOutput)
		return fmt.Sprintf("%s commit=%v -> %v", in.msgID, in.commit, out.accepted)
	},
}

// Under concurrent load from clients spread over three macpd nodes, the
// nodes and then the JetStream servers are killed and restarted in turn
// (app.Kill: the in-process kill -9; a server Shutdown without lame-duck
// mode), repeatedly. Checked (issue 17 "Done when"; RFC-MACP-0001 §8.4,
// RFC-MACP-0003 §4):
//   - every acknowledged envelope is in the stored history, once;
//   - sequence numbers are 1..N without a repeat;
//   - a follower that reconnects to another node after each failure
//     resumes exactly after the last record it saw;
//   - the recorded operations are linearizable against sessionModel
//     (porcupine), including two Commitments raced at the end.
func TestChurnLinearizable(t *testing.T) {
	e := newEnv(t, 3, 3)
	sessions, rounds, perClient := 3, 2, 12
	if soak() {
		sessions, rounds, perClient = 6, 12, 60
	}
	sids := make([]string, sessions)
	for i := range sids {
		sids[i] = newSID()
		if a := e.send(i%3, initID, startEnv(sids[i], "m0", 600_000)); !a.GetOk() {
			t.Fatalf("start: %s", ackString(a))
		}
		if a := e.send((i+1)%3, aliceID, proposalEnv(sids[i], "m1")); !a.GetOk() {
			t.Fatalf("first proposal: %s", ackString(a))
		}
	}
	var (
		mu  sync.Mutex
		ops []porcupine.Operation
	)
	// do sends until the outcome is definite, moving to the next node on
	// a failure (a node down, an unacknowledged write).
	do := func(client int, id coord.Identity, in sendInput) bool {
		var env *macpv1.Envelope
		if in.commit {
			env = commitEnv(in.sid, in.msgID, "commit-"+in.msgID)
		} else {
			env = proposalEnv(in.sid, in.msgID)
		}
		call := time.Now().UnixNano()
		deadline := time.Now().Add(90 * time.Second)
		for attempt := client; ; attempt++ {
			ack := e.send(attempt%3, id, env)
			var out sendOutput
			switch {
			case ack == nil, !ack.Ok && ack.GetError().GetCode() == string(coord.CodeInternalError):
				if time.Now().After(deadline) {
					t.Errorf("%s: no definite answer in 90 s: %s", in.msgID, ackString(ack))
					return false
				}
				time.Sleep(50 * time.Millisecond)
				continue
			case ack.Ok:
				out.accepted = true
			case ack.GetError().GetCode() == string(coord.CodeSessionNotOpen):
			default:
				t.Errorf("%s: %s", in.msgID, ackString(ack))
				return false
			}
			mu.Lock()
			ops = append(ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: time.Now().UnixNano()})
			mu.Unlock()
			return out.accepted
		}
	}
	// A follower of session 0 that moves to the next node whenever its
	// node fails, resuming after the last record it received.
	var followed []uint64
	followDone := make(chan struct{})
	go func() {
		defer close(followDone)
		var last uint64
		for node := 1; ; node++ {
			a := e.node(node % 3)
			if a == nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			err := a.Runtime().Follow(context.Background(), aliceID, sids[0], last, runtime.FollowOptions{}, func(r session.Record) error {
				followed = append(followed, r.Seq)
				last = r.Seq
				return nil
			})
			if errors.Is(err, runtime.ErrFollowEnded) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var clients sync.WaitGroup
	stopChaos := make(chan struct{})
	for si, sid := range sids {
		for ci, id := range []coord.Identity{aliceID, bobID} {
			clients.Add(1)
			go func() {
				defer clients.Done()
				for k := 1; k <= perClient; k++ {
					if !do(si*2+ci, id, sendInput{sid: sid, msgID: fmt.Sprintf("%s-%d", id.Sender[8:], k)}) {
						return
					}
				}
			}()
		}
	}
	chaos := make(chan struct{})
	go func() {
		defer close(chaos)
		for r := 0; r < rounds; r++ {
			e.kill(r % 3)
			time.Sleep(300 * time.Millisecond)
			e.startNode(r % 3)
			e.nats.Kill((r + 1) % 3)
			time.Sleep(500 * time.Millisecond)
			e.nats.Restart((r + 1) % 3)
			e.nats.WaitReady()
			select {
			case <-stopChaos:
				return
			default:
			}
		}
	}()
	clients.Wait()
	close(stopChaos)
	<-chaos
	// Two Commitments raced through different nodes on every session.
	var racers sync.WaitGroup
	for si, sid := range sids {
		for c := 0; c < 2; c++ {
			racers.Add(1)
			go func() {
				defer racers.Done()
				do(100+si*2+c, initID, sendInput{sid: sid, msgID: fmt.Sprintf("c%d", c), commit: true})
			}()
		}
	}
	racers.Wait()
	select {
	case <-followDone:
	case <-time.After(60 * time.Second):
		for i := 0; i < 3; i++ {
			if a := e.node(i); a != nil {
				md, cerr := a.Runtime().GetSession(context.Background(), initID, sids[0])
				last, _ := a.Runtime().LastSeq(sids[0])
				t.Logf("node %d: %v %v last %d", i, md.GetState(), cerr, last)
			}
		}
		t.Fatalf("follower never saw the end of session 0 (followed up to %d)", len(followed))
	}
	if t.Failed() {
		return
	}
	ns := e.reader()
	for _, sid := range sids {
		recs := history(t, ns, sid)
		seen := map[string]bool{}
		for i, r := range recs {
			if r.Seq != uint64(i+1) {
				t.Fatalf("%s: record %d has seq %d", sid, i+1, r.Seq)
			}
			if r.Envelope != nil {
				if seen[r.Envelope.MessageId] {
					t.Fatalf("%s: message %s stored twice", sid, r.Envelope.MessageId)
				}
				seen[r.Envelope.MessageId] = true
			}
		}
		for _, op := range ops {
			in := op.Input.(sendInput)
			if in.sid == sid && op.Output.(sendOutput).accepted && !seen[in.msgID] {
				t.Fatalf("%s: acknowledged %s is not in the history", sid, in.msgID)
			}
		}
		// Exact delivery across churn: the follower resumed on another
		// node after each failure, possibly on a copy of the session that
		// was behind it (runtime.followShared; reproduced without timing
		// by TestSharedFollowResumesOnStaleCopy in internal/runtime).
		if sid == sids[0] {
			for i, s := range followed {
				if s != uint64(i+1) {
					t.Fatalf("follower: record %d delivered as %d (%v)", i+1, s, followed)
				}
			}
			if len(followed) != len(recs) {
				t.Fatalf("follower received %d records, history has %d", len(followed), len(recs))
			}
		}
	}
	res, info := porcupine.CheckOperationsVerbose(sessionModel, ops, time.Minute)
	if res != porcupine.Ok {
		_ = info
		t.Fatalf("history of %d operations is not linearizable (%v)", len(ops), res)
	}
	t.Logf("%d operations over %d sessions, %d failure rounds: linearizable", len(ops), sessions, rounds)
}
