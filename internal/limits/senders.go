package limits

import (
	"log/slog"
	"sync"
	"time"
)

// SenderRates are the per-sender admission rates (RFC-MACP-0004 §7 "rate
// limits for SessionStart"; docs/security.md "Limits"): one bucket per
// sender for SessionStarts and one for every other envelope (session
// messages, Signals, Progress) and for calls charged like one. Refusals
// are logged, per sender at most once per SenderLogEvery.
type SenderRates struct {
	starts, messages *Rate
	now              func() time.Time
	log              *slog.Logger

	mu     sync.Mutex
	logged map[string]time.Time // sender -> last refusal logged
}

// SenderLogEvery is how often one sender's refusals are logged (the first
// one, then at most one per interval), so a flood does not flood the log.
const SenderLogEvery = 10 * time.Second

// NewSenderRates returns the rates (0 disables one), read on the clock now
// (time.Now if nil), logging refusals to log (nil = nowhere).
func NewSenderRates(startsPerMinute, messagesPerMinute int, now func() time.Time, log *slog.Logger) *SenderRates {
	if now == nil {
		now = time.Now
	}
	return &SenderRates{
		starts: NewRate(startsPerMinute, now), messages: NewRate(messagesPerMinute, now),
		now: now, log: log, logged: make(map[string]time.Time),
	}
}

// SenderRefusal says why Take refused: which allowance ("session starts"
// or "messages"), its rate, and when a token is next available.
type SenderRefusal struct {
	What       string
	PerMinute  int
	RetryAfter time.Duration
}

// Take takes one token from sender's SessionStart bucket (start) or
// message bucket; nil means allowed.
func (sr *SenderRates) Take(sender string, start bool) *SenderRefusal {
	l, what := sr.messages, "messages"
	if start {
		l, what = sr.starts, "session starts"
	}
	ok, retry := l.Allow(sender)
	if ok {
		return nil
	}
	now := sr.now()
	sr.mu.Lock()
	if last, seen := sr.logged[sender]; !seen || now.Sub(last) >= SenderLogEvery {
		sr.logged[sender] = now
		for k, t := range sr.logged { // forget senders that calmed down
			if now.Sub(t) >= time.Minute {
				delete(sr.logged, k)
			}
		}
		if sr.log != nil {
			sr.log.Info("rate limit exceeded", "sender", sender, "limit", what, "per_minute", l.PerMinute())
		}
	}
	sr.mu.Unlock()
	return &SenderRefusal{What: what, PerMinute: l.PerMinute(), RetryAfter: retry}
}
