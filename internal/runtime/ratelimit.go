package runtime

import (
	"context"
	"sync"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/limits"
)

// Per-sender admission rates (RFC-MACP-0004 §7 "rate limits for
// SessionStart"; docs/security.md "Limits"). Every envelope an identity
// submits - by Send or on a StreamSession, valid or not, duplicates
// included - takes a token from that identity's bucket before anything
// else is checked: SessionStarts from the session-start bucket, everything
// else (session messages, Signals, Progress) from the message bucket. An
// empty bucket answers RATE_LIMITED (retryable) and changes nothing. Dev
// identities are limited like any other.

// RateLimits are the per-sender rates (Options.Rates). 0 disables a rate.
type RateLimits struct {
	// SessionStartsPerMinute limits SessionStart envelopes per sender.
	SessionStartsPerMinute int
	// MessagesPerMinute limits every other envelope per sender.
	MessagesPerMinute int
}

// rateLogEvery is how often a sender's rate-limit rejections are logged
// (the first one, then at most one per interval), so a flood does not
// flood the log too.
const rateLogEvery = 10 * time.Second

type senderRates struct {
	starts, messages *limits.Rate

	logMu  sync.Mutex
	logged map[string]time.Time
}

func newSenderRates(o Options) *senderRates {
	return &senderRates{
		starts:   limits.NewRate(o.Rates.SessionStartsPerMinute, o.Clock.Now),
		messages: limits.NewRate(o.Rates.MessagesPerMinute, o.Clock.Now),
		logged:   make(map[string]time.Time),
	}
}

// admit is Send's first check after the sender is bound: the sender's
// rate, then, for ambient envelopes, that the sender may relate them to
// the session they name (authz.go).
func (r *Runtime) admit(ctx context.Context, id coord.Identity, env *macpv1.Envelope) *coord.Error {
	if cerr := r.rates.take(r, id.Sender, env.MessageType == coord.TypeSessionStart); cerr != nil {
		return cerr
	}
	switch env.MessageType {
	case coord.TypeSignal, coord.TypeProgress:
		return r.mayRelateAmbient(ctx, id, env)
	}
	return nil
}

func (sr *senderRates) take(r *Runtime, sender string, start bool) *coord.Error {
	l, what := sr.messages, "messages"
	if start {
		l, what = sr.starts, "session starts"
	}
	ok, retry := l.Allow(sender)
	if ok {
		return nil
	}
	now := r.opts.Clock.Now()
	sr.logMu.Lock()
	if last, seen := sr.logged[sender]; !seen || now.Sub(last) >= rateLogEvery {
		sr.logged[sender] = now
		for k, t := range sr.logged { // forget senders that calmed down
			if now.Sub(t) >= time.Minute {
				delete(sr.logged, k)
			}
		}
		r.log.Info("rate limit exceeded", "sender", sender, "limit", what, "per_minute", l.PerMinute())
	}
	sr.logMu.Unlock()
	retryMs := max(retry.Milliseconds(), 1)
	return coord.Errorf(coord.CodeRateLimited, "%s exceeded %d %s per minute; retry in %d ms", sender, l.PerMinute(), what, retryMs)
}

// ChargeCall takes one token from the identity's message bucket for a call
// whose cost grows with the number of sessions or a session's history -
// ListSessions, and opening StreamSession, WatchSessions or WatchSignals -
// so that repeating it is limited like sending envelopes (RATE_LIMITED).
func (r *Runtime) ChargeCall(id coord.Identity) *coord.Error {
	return r.rates.take(r, id.Sender, false)
}
