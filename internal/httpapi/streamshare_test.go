package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// docs/security.md "Stream buffers", issue 26 item 1, on SSE: the feeds
// draw on the same budget as gRPC streams, with the same shares. One
// identity's 250 non-reading gRPC subscriptions of its own session, over
// large history, do not keep an unrelated session's SSE replay and live
// delivery from arriving.
func TestOneIdentityCannotStallOtherSessionsSSE(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.StreamBufferBudgetBytes = 16 << 20
	cfg.Limits.StreamStallTimeout = 0
	e := startApp(t, cfg)
	send := func(agent string, env *macpv1.Envelope) {
		t.Helper()
		env.MacpVersion, env.Mode, env.TimestampUnixMs = "1.0", decisionMode, time.Now().UnixMilli()
		r, err := e.c.Send(as(agent), &macpv1.SendRequest{Envelope: env})
		if err != nil || !r.GetAck().GetOk() {
			t.Fatalf("send %s: %v %v", env.MessageId, r, err)
		}
	}
	start := func(initiator, other string) string {
		sid := uuid.NewString()
		p, _ := proto.Marshal(&macpv1.SessionStartPayload{Intent: "pick", Participants: []string{initiator, other}, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 3600000})
		send(initiator, &macpv1.Envelope{MessageType: "SessionStart", MessageId: "start-" + sid, SessionId: sid, Payload: p})
		return sid
	}
	proposal := func(agent, sid, id string, size int) {
		p, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: id, Option: "x", Rationale: strings.Repeat("r", size)})
		send(agent, &macpv1.Envelope{MessageType: "Proposal", MessageId: id + "-" + sid, SessionId: sid, Payload: p})
	}
	malSid := start("mallory", "mallory-friend")
	for i := range 40 {
		proposal("mallory", malSid, fmt.Sprint("p", i), 200<<10)
	}
	bobSid := start("bob", "carol")
	for i := range 4 {
		proposal("bob", bobSid, fmt.Sprint("b", i), 450<<10)
	}

	const streams = 250
	var clients []macpv1.MACPRuntimeServiceClient
	for range 3 {
		conn, err := grpc.NewClient(e.a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, macpv1.NewMACPRuntimeServiceClient(conn))
	}
	malCtx, malCancel := context.WithCancel(as("mallory"))
	defer malCancel()
	var wg sync.WaitGroup
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
				t.Errorf("mallory subscribing: %v", err)
			}
		}()
	}
	wg.Wait()
	rt := e.a.Runtime()
	waitFor(t, "mallory's streams to wait on her share", func() bool { return rt.StreamBudget().Stats().Throttled > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/macp/session/"+bobSid+"/events", nil)
	req.Header.Set("Authorization", "Bearer bob")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SSE: %d", resp.StatusCode)
	}
	ids := make(chan string, 16)
	go func() {
		defer close(ids)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 4<<20), 4<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data:") && strings.Contains(line, bobSid) {
				for _, want := range []string{"start-", "b0-", "b1-", "b2-", "b3-", "live-"} {
					if strings.Contains(line, `"`+want+bobSid+`"`) {
						ids <- want
					}
				}
			}
		}
	}()
	bound := time.Second
	if raceEnabled {
		bound = 10 * time.Second
	}
	wait := func(what string) string {
		t.Helper()
		select {
		case id, ok := <-ids:
			if !ok {
				t.Fatalf("%s: the feed ended", what)
			}
			return id
		case <-time.After(bound):
			t.Fatalf("%s: nothing within %v while mallory's streams hold the buffers (%+v)", what, bound, rt.StreamBudget().Stats())
		}
		return ""
	}
	for i := range 5 {
		wait(fmt.Sprint("bob's SSE replay, event ", i+1))
	}
	proposal("carol", bobSid, "live", 10)
	if id := wait("carol's live Proposal"); id != "live-" {
		t.Fatalf("live event %q", id)
	}
}
