package server_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// The deployment limits in config reach admission over gRPC: checklist
// START-8/SEC-6 (MACP_MAX_OPEN_SESSIONS -> RATE_LIMITED, freed when a
// session ends), START-5 (MACP_MAX_TTL_MS), START-6
// (MACP_MAX_PARTICIPANTS), TTL-4 (MACP_START_SKEW_MS).
func TestConfigLimitsReachAdmission(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpenSessions = 1
	cfg.MaxTTL = 10 * time.Second
	cfg.MaxParticipants = 2
	cfg.StartSkew = time.Minute
	e := startApp(t, cfg)

	start := func(ttl int64, ts int64, participants ...string) *macpv1.Envelope {
		p := mustMarshal(t, &macpv1.SessionStartPayload{Participants: participants, ModeVersion: "1.0.0",
			ConfigurationVersion: "cfg-1", TtlMs: ttl})
		env := envelope(uuid.NewString(), "SessionStart", "m0", p)
		env.TimestampUnixMs = ts
		return env
	}
	now := time.Now().UnixMilli()
	wantNack(t, e.send(t, "alice", start(10001, now, "alice")), "INVALID_ENVELOPE")
	wantNack(t, e.send(t, "alice", start(5000, now, "alice", "bob", "carol")), "INVALID_ENVELOPE")
	wantNack(t, e.send(t, "alice", start(5000, now-2*time.Minute.Milliseconds(), "alice")), "INVALID_ENVELOPE")

	first := start(10000, now, "alice", "bob")
	e.mustAccept(t, "alice", first)
	wantNack(t, e.send(t, "alice", start(5000, now, "alice")), "RATE_LIMITED")
	// The cap is per initiator.
	e.mustAccept(t, "bob", start(5000, now, "bob"))
	if _, err := e.c.CancelSession(as("alice"), &macpv1.CancelSessionRequest{SessionId: first.SessionId}); err != nil {
		t.Fatal(err)
	}
	e.mustAccept(t, "alice", start(5000, now, "alice"))
}

// TTL-1/TTL-2 over gRPC: a session whose deadline passes is EXPIRED,
// reported to watchers, and later messages get SESSION_NOT_OPEN.
func TestTTLExpiryOverGRPC(t *testing.T) {
	e := startApp(t, testConfig())
	ch := e.watchSessions(t, "alice", 1)
	p := mustMarshal(t, &macpv1.SessionStartPayload{Participants: []string{"alice"}, ModeVersion: "1.0.0",
		ConfigurationVersion: "cfg-1", TtlMs: 200})
	sid := uuid.NewString()
	e.mustAccept(t, "alice", envelope(sid, "SessionStart", "m0", p))
	wantEvent(t, ch, created, sid, macpv1.SessionState_SESSION_STATE_OPEN)
	wantEvent(t, ch, expired, sid, macpv1.SessionState_SESSION_STATE_EXPIRED)
	if md := e.getSession(t, "alice", sid); md.State != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("state %v", md.State)
	}
	wantNack(t, e.send(t, "alice", envelope(sid, "Proposal", "m1", proposalPayload(t, "p1"))), "SESSION_NOT_OPEN")
}
