package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/config"
	"google.golang.org/grpc/codes"
)

// Limits over gRPC (docs/security.md "Limits"): per-sender rates on Send
// and on StreamSession, streams per session, connections.

// RFC-MACP-0004 §7: SessionStarts and other envelopes are rate-limited per
// sender (token buckets); beyond the allowance Send answers RATE_LIMITED
// in the Ack and creates nothing; on a StreamSession the refusal comes
// in-stream and the stream stays usable; other senders are unaffected.
// Opening a stream and ListSessions take from the message allowance too.
func TestRateLimitsOverGRPC(t *testing.T) {
	e := startSecure(t, secTokens(), func(c *config.Config) {
		c.Limits.SessionStartsPerMinute = 3
		c.Limits.MessagesPerMinute = 5
	})
	var sids []string
	for range 3 {
		sids = append(sids, e.start(t, secInitiator, secParticipant))
	}
	over := envelope(uuid.NewString(), "SessionStart", "start", startPayload(t, secParticipant))
	e.refuse(t, secInitiator, over, "RATE_LIMITED")
	if _, err := e.rt.GetSession(context.Background(), observer(), over.SessionId); err == nil {
		t.Fatal("a rate-limited SessionStart created its session")
	}
	e.start(t, secParticipant2, secParticipant) // another sender

	// Messages: five (three proposals, opening the stream, p2), then
	// RATE_LIMITED, on Send and on a stream alike.
	e.accept(t, secInitiator, envelope(sids[0], "Proposal", "p1", proposalPayload(t, "p1")))
	e.accept(t, secInitiator, envelope(sids[1], "Proposal", "p1", proposalPayload(t, "p1")))
	e.accept(t, secInitiator, envelope(sids[2], "Proposal", "p1", proposalPayload(t, "p1")))
	s, err := e.c.StreamSession(e.as(t, secInitiator))
	if err != nil {
		t.Fatal(err)
	}
	send := func(env *macpv1.Envelope) {
		t.Helper()
		if err := s.Send(&macpv1.StreamSessionRequest{Envelope: env}); err != nil {
			t.Fatal(err)
		}
	}
	send(envelope(sids[0], "Proposal", "p2", proposalPayload(t, "p2"))) // the fourth
	send(envelope(sids[0], "Proposal", "p3", proposalPayload(t, "p3"))) // the fifth
	var got []string
	for !contains(got, "p2") || !contains(got, "RATE_LIMITED") {
		resp, err := s.Recv()
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		switch {
		case resp.GetError() != nil:
			got = append(got, resp.GetError().GetCode())
		case resp.GetEnvelope().GetSessionId() == sids[0]:
			got = append(got, resp.GetEnvelope().GetMessageId())
		}
	}
	// p2 accepted (it binds the stream, which then delivers it), p3
	// refused in-stream; the stream stays open.
	if contains(got, "p3") {
		t.Fatalf("stream responses %v: the rate-limited p3 was accepted", got)
	}
	if n := len(e.records(t, sids[0])); n != 3 {
		t.Fatalf("session has %d records, want 3 (start, p1, p2)", n)
	}
	_, err = e.c.ListSessions(e.as(t, secInitiator), &macpv1.ListSessionsRequest{})
	wantStatus(t, err, codes.ResourceExhausted, "RATE_LIMITED")
	w, err := e.c.WatchSessions(e.as(t, secInitiator), &macpv1.WatchSessionsRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	wantStatus(t, err, codes.ResourceExhausted, "RATE_LIMITED")
	// Another sender is unaffected.
	e.accept(t, secParticipant, vote(t, sids[1], "v", "p1"))
	if _, err := e.c.ListSessions(e.as(t, secParticipant), &macpv1.ListSessionsRequest{}); err != nil {
		t.Fatal(err)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Dev identities get the same limits unless configured otherwise.
func TestRateLimitsApplyToDevIdentities(t *testing.T) {
	cfg := testConfig()
	cfg.Limits = config.DefaultLimits()
	cfg.Limits.SessionStartsPerMinute = 2
	e := startApp(t, cfg)
	e.startSession(t, "alice", "bob")
	e.startSession(t, "alice", "bob")
	wantNack(t, e.send(t, "alice", envelope(uuid.NewString(), "SessionStart", "s", startPayload(t, "bob"))), "RATE_LIMITED")
	e.startSession(t, "bob", "alice")
}

// MACP_MAX_STREAMS_PER_SESSION: StreamSession streams attached to one
// session by its members are capped (RATE_LIMITED beyond, other sessions
// unaffected); outsiders, whom the handler refuses anyway, cannot use up
// the session's slots.
func TestStreamsPerSession(t *testing.T) {
	e := startSecure(t, secTokens(), func(c *config.Config) { c.Limits.MaxStreamsPerSession = 2 })
	sid := e.start(t, secInitiator, secParticipant)
	other := e.start(t, secInitiator, secParticipant)
	// Outsiders' streams naming the session do not count.
	for range 4 {
		s, err := e.c.StreamSession(e.as(t, secOutsider))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&macpv1.StreamSessionRequest{Envelope: vote(t, sid, "x", "p")}); err != nil {
			t.Fatal(err)
		}
		if resp, err := s.Recv(); err != nil || resp.GetError().GetCode() != "FORBIDDEN" {
			t.Fatalf("outsider's envelope on a stream: %v %v", resp, err)
		}
	}
	for _, who := range []string{secInitiator, secParticipant} {
		if _, err := e.subscribeStream(t, who, sid).Recv(); err != nil {
			t.Fatalf("%s subscribe: %v", who, err)
		}
	}
	_, err := e.subscribeStream(t, secObserver, sid).Recv()
	wantStatus(t, err, codes.ResourceExhausted, "RATE_LIMITED")
	if _, err := e.subscribeStream(t, secObserver, other).Recv(); err != nil {
		t.Fatalf("another session's stream: %v", err)
	}
}

// MACP_MAX_CONNECTIONS (docs/security.md "Limits"; issue: connections
// beyond any limit are refused at accept, not queued): beyond the cap a new
// connection is closed when accepted, so its call fails at once with
// UNAVAILABLE instead of waiting in the listen backlog; once another
// connection closes, the client's reconnection is served.
func TestMaxConnections(t *testing.T) {
	e := startSecure(t, secTokens(), func(c *config.Config) { c.Limits.MaxConnections = 2 })
	second := e.dial(t) // e.conn is the first
	call := func(t *testing.T, c macpv1.MACPRuntimeServiceClient, d time.Duration) error {
		ctx, cancel := context.WithTimeout(e.as(t, secObserver), d)
		defer cancel()
		_, err := c.ListSessions(ctx, &macpv1.ListSessionsRequest{})
		return err
	}
	for _, c := range []macpv1.MACPRuntimeServiceClient{e.c, macpv1.NewMACPRuntimeServiceClient(second)} {
		if err := call(t, c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	third := macpv1.NewMACPRuntimeServiceClient(e.dial(t))
	// A generous deadline: a queued connection would wait all of it and
	// end with DEADLINE_EXCEEDED; a refused one fails well within it.
	wantStatus(t, call(t, third, 5*time.Second), codes.Unavailable, "")
	second.Close()
	eventually(t, "the third connection to be served", func() bool { return call(t, third, time.Second) == nil })
}
