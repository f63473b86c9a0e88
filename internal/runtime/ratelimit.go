package runtime

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
)

// Per-sender admission rates (limits.SenderRates). Every envelope an
// identity submits - by Send or on a StreamSession, valid or not,
// duplicates included - takes a token from that identity's bucket before
// anything else is checked. An empty bucket answers RATE_LIMITED
// (retryable) and changes nothing. Dev identities are limited like any
// other.

// RateLimits are the per-sender rates (Options.Rates). 0 disables a rate.
type RateLimits struct {
	// SessionStartsPerMinute limits SessionStart envelopes per sender.
	SessionStartsPerMinute int
	// MessagesPerMinute limits every other envelope per sender.
	MessagesPerMinute int
}

// admit is Send's first check after the sender is bound: the sender's
// rate, then, for ambient envelopes, that the sender may relate them to
// the session they name (authz.go).
func (r *Runtime) admit(ctx context.Context, id coord.Identity, env *macpv1.Envelope) *coord.Error {
	if cerr := r.takeRate(id.Sender, env.MessageType == coord.TypeSessionStart); cerr != nil {
		return cerr
	}
	switch env.MessageType {
	case coord.TypeSignal, coord.TypeProgress:
		return r.mayRelateAmbient(ctx, id, env)
	}
	return nil
}

func (r *Runtime) takeRate(sender string, start bool) *coord.Error {
	no := r.rates.Take(sender, start)
	if no == nil {
		return nil
	}
	return coord.Errorf(coord.CodeRateLimited, "%s exceeded %d %s per minute; retry in %d ms",
		sender, no.PerMinute, no.What, max(no.RetryAfter.Milliseconds(), 1))
}

// ChargeCall takes one token from the identity's message bucket for a call
// whose cost grows with the number of sessions or a session's history -
// ListSessions, and opening StreamSession, WatchSessions or WatchSignals -
// so that repeating it is limited like sending envelopes (RATE_LIMITED).
func (r *Runtime) ChargeCall(id coord.Identity) *coord.Error {
	return r.takeRate(id.Sender, false)
}
