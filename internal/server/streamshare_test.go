package server_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// historyOf starts a Decision session initiated by initiator (with
// participant) holding n Proposals of about size bytes each, and returns
// its id.
func historyOf(t *testing.T, e *testEnv, initiator, participant string, n, size int) string {
	t.Helper()
	sid := uuid.NewString()
	e.mustAccept(t, initiator, envelope(sid, "SessionStart", "start-"+sid, mustMarshal(t, &macpv1.SessionStartPayload{
		Intent: "pick", Participants: []string{initiator, participant}, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 3600000})))
	filler := string(bytes.Repeat([]byte{'r'}, size))
	for i := range n {
		p := mustMarshal(t, &decisionv1.ProposalPayload{ProposalId: fmt.Sprint("p", i), Option: "x", Rationale: filler})
		e.mustAccept(t, initiator, envelope(sid, "Proposal", fmt.Sprintf("p%d-%s", i, sid), p))
	}
	return sid
}

// deliveryBound is how soon an unrelated session's records must arrive
// while the attack runs (issue 26: within 1 s); the race detector slows
// everything about tenfold.
func deliveryBound() time.Duration {
	if raceEnabled {
		return 10 * time.Second
	}
	return time.Second
}

// docs/security.md "Stream buffers", issue 26 item 1: one identity's
// non-reading subscribe streams of its own session, holding large history,
// take at most that identity's share of MACP_STREAM_BUFFER_BUDGET_BYTES;
// an unrelated session's replay and live delivery still arrive at once.
// When the attacker's connections end, every charge they held goes back
// without a garbage collection (collections are off meanwhile).
func TestOneIdentityCannotStallOtherSessionsFeeds(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.StreamBufferBudgetBytes = 16 << 20 // shares: identity 2 MiB, session 4 MiB
	cfg.Limits.StreamStallTimeout = 0             // the attacker's streams are never ended
	e := startApp(t, cfg)
	rt := e.app.Runtime()
	const records, size = 40, 200 << 10 // 8 MB, each record costs ~400 KB
	malSid := historyOf(t, e, "mallory", "mallory-friend", records, size)
	bobSid := historyOf(t, e, "bob", "carol", 4, 450<<10) // each costs more than a record of mallory

	// 250 subscribe streams of mallory on her session, none read.
	const streams = 250
	var conns []*grpc.ClientConn
	var clients []macpv1.MACPRuntimeServiceClient
	for range (streams + 89) / 90 {
		conn, err := grpc.NewClient(e.app.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, conn)
		clients = append(clients, macpv1.NewMACPRuntimeServiceClient(conn))
	}
	malCtx, malCancel := context.WithCancel(as("mallory"))
	defer malCancel()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := clients[i%len(clients)].StreamSession(malCtx)
			if err == nil {
				err = s.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: malSid})
			}
			if err == nil {
				_, err = s.Header()
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("mallory subscribing: %v", err)
	}
	share := rt.StreamBudget().Options().PerIdentity
	eventually(t, "mallory's streams to wait on her share", func() bool {
		return rt.StreamBudget().Stats().Throttled > 0
	})
	held, _ := rt.StreamBudget().Held("mallory", malSid)
	maxCost := int64(2*(size+1024) + 512)
	if held > share+maxCost {
		t.Fatalf("mallory holds %d bytes, over her share %d plus one record", held, share)
	}

	// bob's replay of his own session, then a live Proposal from carol.
	ctx, cancel := context.WithTimeout(as("bob"), time.Minute)
	defer cancel()
	s, err := e.c.StreamSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: bobSid}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				close(got)
				return
			}
			if id := r.GetEnvelope().GetMessageId(); id != "" {
				got <- id
			}
		}
	}()
	wait := func(what string) string {
		t.Helper()
		select {
		case id, ok := <-got:
			if !ok {
				t.Fatalf("%s: the stream ended", what)
			}
			return id
		case <-time.After(deliveryBound()):
			t.Fatalf("%s: nothing within %v while mallory's streams hold the buffers (%+v)", what, deliveryBound(), rt.StreamBudget().Stats())
		}
		return ""
	}
	for i := range 5 { // SessionStart and 4 Proposals
		wait(fmt.Sprint("bob's replay, record ", i+1))
	}
	live := fmt.Sprint("live-", bobSid)
	e.mustAccept(t, "carol", envelope(bobSid, "Proposal", live, mustMarshal(t, &decisionv1.ProposalPayload{ProposalId: "live", Option: "y"})))
	if id := wait("carol's live Proposal"); id != live {
		t.Fatalf("live delivery %q, want %q", id, live)
	}

	// The attacker leaves: its charges go back when its connections end,
	// not when a collection finds gRPC's buffers.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, c := range conns {
		c.Close()
	}
	eventually(t, "mallory's charges returned without a collection", func() bool {
		h, _ := rt.StreamBudget().Held("mallory", malSid)
		return h == 0
	})
}
