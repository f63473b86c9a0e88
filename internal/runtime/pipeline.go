package runtime

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// SendPipelined is Send split in two, for a caller that admits many
// envelopes in order and observes their outcomes later (the StreamSession
// handler): the call admits env, has its session's owner decide it and
// submits the records to the group committer, exactly as Send does, and
// returns as soon as they are submitted; wait then waits for the commit
// and returns the Ack Send would have returned. Calling it again before
// waiting lets the owner decide the next envelope while this one's commit
// is in flight. Only the waiting is deferred:
//
//   - the Ack is Send's (ok, duplicate, the error, the session state), and
//     ok means durable: wait answers ok only after the group commit made
//     the envelope's records durable (commit.go, contract 4);
//   - a failed commit fails every later request of the session decided in
//     the same epoch (commit.go, contract 3): their waits answer
//     INTERNAL_ERROR, never ok, and the next decision rebuilds the session
//     from the store first (heal, owner.go), as for concurrent Sends;
//   - envelopes of one session are decided in call order, so waiting in
//     call order yields the Acks in that order.
//
// Signal, Progress and SessionStart envelopes, and every envelope when the
// store is shared with other nodes (where a decision that lost a race is
// made again, retryShared in cluster.go), are handled synchronously: the
// call runs Send's whole path and wait returns the Ack already computed.
// wait must be called once; ctx bounds both halves as it bounds Send.
func (r *Runtime) SendPipelined(ctx context.Context, id coord.Identity, env *macpv1.Envelope) (wait func() *macpv1.Ack) {
	if env == nil || env.MessageType == coord.TypeSignal || env.MessageType == coord.TypeProgress ||
		env.MessageType == coord.TypeSessionStart || r.shared.Load() {
		ack := r.Send(ctx, id, env)
		return func() *macpv1.Ack { return ack }
	}
	env.Sender = id.Sender
	if cerr := r.admit(ctx, id, env); cerr != nil { // as Send
		return answered(nackFor(env, cerr, 0))
	}
	if err := session.CheckNewEnvelope(env, r.opts.Limits); err != nil {
		return answered(nackFor(env, err, 0))
	}
	p := r.stepSubmit(ctx, env)
	return func() *macpv1.Ack {
		ack, retry := p.finish(ctx, r)
		if retry {
			// Only with a shared store, which never takes this path; if the
			// store became shared meanwhile, decide again as step would.
			return r.step(ctx, env)
		}
		return ack
	}
}

func answered(ack *macpv1.Ack) func() *macpv1.Ack {
	return func() *macpv1.Ack { return ack }
}
