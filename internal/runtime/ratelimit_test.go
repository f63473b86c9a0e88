package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/store/memstore"
)

// RFC-MACP-0004 §7 (rate limits for SessionStart), docs/security.md
// "Limits": per-sender token buckets. Starts and messages have separate
// buckets; an empty bucket answers RATE_LIMITED without any effect; other
// senders are unaffected; the bucket refills with time.
func TestRateLimitsPerSender(t *testing.T) {
	clk := clocktest.New()
	st := memstore.New()
	r := newRT(t, st, Options{Rates: RateLimits{SessionStartsPerMinute: 2, MessagesPerMinute: 3}, Clock: clk})
	s1, s2, s3 := newSID(), newSID(), newSID()
	mustOK(t, r, initID, startEnv(s1, "m0", 60_000))
	mustOK(t, r, initID, startEnv(s2, "m0", 60_000))
	ack := r.Send(context.Background(), initID, startEnv(s3, "m0", 60_000))
	wantCode(t, ack, coord.CodeRateLimited)
	if ack.SessionState != 0 {
		t.Fatalf("rate-limited ack carries a session state: %v", ack)
	}
	if _, cerr := r.GetSession(context.Background(), observerID, s3); cerr == nil || cerr.Code != coord.CodeSessionNotFound {
		t.Fatalf("a rate-limited SessionStart created the session: %v", cerr)
	}
	// Messages have their own bucket: three, then RATE_LIMITED.
	mustOK(t, r, initID, proposalEnv(s1, "m1"))
	mustOK(t, r, initID, proposalEnv(s1, "m2"))
	mustOK(t, r, initID, signalEnv("sig-1", "progress")) // ambient envelopes count too
	wantCode(t, r.Send(context.Background(), initID, proposalEnv(s1, "m3")), coord.CodeRateLimited)
	if v := inspect(t, r, s1); v.seq != 3 {
		t.Fatalf("session has %d records, want 3 (start and two proposals)", v.seq)
	}
	// Invalid envelopes and duplicates are charged as well (the check
	// comes first), so a flood of junk is limited like anything else.
	dup := r.Send(context.Background(), initID, proposalEnv(s1, "m1"))
	wantCode(t, dup, coord.CodeRateLimited)
	// Another sender is unaffected.
	mustOK(t, r, aliceID, voteEnv(s1, "v1", "p-m1"))
	// Twenty seconds refill one message token (3 per minute).
	clk.Advance(20 * time.Second)
	mustOK(t, r, initID, signalEnv("sig-2", "progress"))
	wantCode(t, r.Send(context.Background(), initID, signalEnv("sig-3", "progress")), coord.CodeRateLimited)
}

// A zero rate disables the limit (Options zero value, config 0).
func TestRateLimitsDisabled(t *testing.T) {
	r := newRT(t, memstore.New(), Options{})
	for i := 0; i < 200; i++ {
		mustOK(t, r, initID, startEnv(newSID(), "m0", 60_000))
	}
}

// The RATE_LIMITED answer says how long to wait and is retryable.
func TestRateLimitedMessage(t *testing.T) {
	r := newRT(t, memstore.New(), Options{Rates: RateLimits{MessagesPerMinute: 1}})
	mustOK(t, r, initID, signalEnv("s1", "x"))
	ack := r.Send(context.Background(), initID, signalEnv("s2", "x"))
	wantCode(t, ack, coord.CodeRateLimited)
	if !coord.CodeRateLimited.Retryable() {
		t.Fatal("RATE_LIMITED not retryable")
	}
	if ack.Error.Message == "" || ack.Error.MessageId != "s2" {
		t.Fatalf("error %v", ack.Error)
	}
}
