package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/protobuf/proto"
)

// pipelinedStep is one envelope of a randomized script, sent as id.
type pipelinedStep struct {
	id  coord.Identity
	env *macpv1.Envelope
}

// randomScript is a session's SessionStart followed by n envelopes drawn
// at random: new proposals (accepted), resends (duplicates), votes on an
// unknown proposal and envelopes from a non-member (rejected), a signal,
// and, somewhere in the middle, a Commitment that resolves the session, so
// the envelopes after it are refused (SESSION_NOT_OPEN).
func randomScript(rng *rand.Rand, sid string, n int) []pipelinedStep {
	steps := []pipelinedStep{{initID, startEnv(sid, "m0", 60_000)}, {initID, proposalEnv(sid, "m1")}}
	var sent []pipelinedStep
	commitAt := n/4 + rng.IntN(n/2)
	for i := range n {
		var s pipelinedStep
		switch k := rng.IntN(10); {
		case i == commitAt:
			s = pipelinedStep{initID, commitEnv(sid, msgID("c", i), "c1")}
		case k < 4 || len(sent) == 0:
			s = pipelinedStep{[]coord.Identity{aliceID, bobID, initID}[rng.IntN(3)], proposalEnv(sid, msgID("p", i))}
		case k < 6:
			s = sent[rng.IntN(len(sent))] // a resend
		case k < 7:
			s = pipelinedStep{aliceID, voteEnv(sid, msgID("v", i), "no-such-proposal")}
		case k < 8:
			s = pipelinedStep{outsiderID, proposalEnv(sid, msgID("o", i))}
		case k < 9:
			s = pipelinedStep{bobID, voteEnv(sid, msgID("v", i), "p-m1")}
		default:
			s = pipelinedStep{aliceID, signalEnv(msgID("s", i), "progress")}
		}
		sent = append(sent, s)
		steps = append(steps, s)
	}
	return steps
}

// comparable returns a copy of ack without its acceptance time (each
// runtime reads its own clock).
func comparable(t *testing.T, ack *macpv1.Ack) *macpv1.Ack {
	t.Helper()
	if ack.Ok && ack.AcceptedAtUnixMs == 0 {
		t.Fatalf("ok Ack without acceptance time: %v", ack)
	}
	c := proto.Clone(ack).(*macpv1.Ack)
	c.AcceptedAtUnixMs = 0
	return c
}

// SendPipelined answers exactly what Send answers (RFC-MACP-0001 §7-8:
// ok, duplicate, error, session state), for a randomized script decided
// entirely while the first commit is held (every decision is made with
// earlier ones still in flight), and stores the same history.
func TestSendPipelinedAcksEqualSend(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			sid := newSID()
			script := randomScript(rand.New(rand.NewPCG(seed, 18)), sid, 120)

			plainStore, pipeStore := newFaultStore(), newFaultStore()
			plain, piped := newRT(t, plainStore, Options{}), newRT(t, pipeStore, Options{})
			ctx := context.Background()
			var want []*macpv1.Ack
			for _, s := range script {
				want = append(want, comparable(t, plain.Send(ctx, s.id, proto.Clone(s.env).(*macpv1.Envelope))))
			}

			// SessionStart and the first proposal synchronously, then hold
			// the next append while every other envelope is decided.
			waits := []func() *macpv1.Ack{
				piped.SendPipelined(ctx, script[0].id, proto.Clone(script[0].env).(*macpv1.Envelope)),
			}
			waits[0]()
			hold := pipeStore.block(sid, false)
			for _, s := range script[1:] {
				waits = append(waits, piped.SendPipelined(ctx, s.id, proto.Clone(s.env).(*macpv1.Envelope)))
			}
			waitEntered(t, hold)
			hold.release()
			resolvedSeen := false
			for i, w := range waits {
				got := comparable(t, w())
				if !proto.Equal(got, want[i]) {
					t.Fatalf("envelope %d (%s %s): pipelined %v, Send %v", i, script[i].env.MessageType, script[i].env.MessageId, got, want[i])
				}
				resolvedSeen = resolvedSeen || got.SessionState == macpv1.SessionState_SESSION_STATE_RESOLVED
			}
			if !resolvedSeen {
				t.Fatal("the script never resolved the session")
			}
			if a, b := storedIDs(t, plainStore, sid), storedIDs(t, pipeStore, sid); !slices.Equal(a, b) {
				t.Fatalf("stored histories differ:\nSend      %v\npipelined %v", a, b)
			}
		})
	}
}

// A commit that fails while later envelopes of the session are in flight
// (ADM-24: an acknowledgement means durable): the failed envelope and
// every envelope decided after it in the same epoch are answered
// INTERNAL_ERROR, none is stored, and the next envelope is decided on the
// session rebuilt from the store.
func TestSendPipelinedFailedCommitFailsLaterWaiters(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	sid := openSession(t, r, 0)
	ctx := context.Background()

	fail := st.block(sid, true)
	var waits []func() *macpv1.Ack
	var ids []string
	for i := range 10 {
		env := proposalEnv(sid, msgID("p", i))
		if i == 5 {
			env = proposalEnv(sid, "m1") // a resend of a durable message, behind the failure
		}
		ids = append(ids, env.MessageId)
		waits = append(waits, r.SendPipelined(ctx, aliceID, env))
	}
	waitEntered(t, fail)
	fail.release()
	for i, w := range waits {
		ack := w()
		if ack.Ok {
			t.Fatalf("envelope %d (%s) acknowledged after a failed commit of the session: %v", i, ids[i], ack)
		}
		wantCode(t, ack, coord.CodeInternalError)
	}
	if got := storedIDs(t, st, sid); !slices.Equal(got, []string{"m0", "m1"}) {
		t.Fatalf("store holds %v", got)
	}
	if ack := r.SendPipelined(ctx, aliceID, proposalEnv(sid, "p0"))(); !ack.Ok || ack.Duplicate {
		t.Fatalf("resend after the failure: %v", ack)
	}
	if got := storedIDs(t, st, sid); !slices.Equal(got, []string{"m0", "m1", "p0"}) {
		t.Fatalf("store holds %v", got)
	}
}

// Randomly failing appends under a full window: every ok Ack's message is
// stored (ADM-24), and the Acks of one session come in decision order.
func TestSendPipelinedRandomFailuresNeverAckUndurable(t *testing.T) {
	st := newFaultStore()
	r := newRT(t, st, Options{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(18, 2))
	for round := range 8 {
		sid := newSID()
		script := randomScript(rng, sid, 80)
		r.SendPipelined(ctx, script[0].id, script[0].env)()
		st.failRandomly(4)
		const window = 16
		var waits []func() *macpv1.Ack
		var acks []*macpv1.Ack
		for _, s := range script[1:] {
			if len(waits) == window {
				acks = append(acks, waits[0]())
				waits = waits[1:]
			}
			waits = append(waits, r.SendPipelined(ctx, s.id, s.env))
		}
		for _, w := range waits {
			acks = append(acks, w())
		}
		st.failRandomly(0)
		stored := storedIDs(t, st, sid)
		for i, ack := range acks {
			env := script[i+1].env
			if ack.Ok && env.MessageType != coord.TypeSignal && !slices.Contains(stored, env.MessageId) {
				t.Fatalf("round %d: %s acknowledged ok but not stored (store %v): %v", round, env.MessageId, stored, ack)
			}
			if ack.MessageId != env.MessageId {
				t.Fatalf("round %d: Ack %d names %s, want %s", round, i, ack.MessageId, env.MessageId)
			}
		}
	}
}
