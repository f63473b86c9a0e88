package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/httpapi"
	"google.golang.org/protobuf/proto"
)

// benchSenders is the number of concurrent senders, each on its own
// session, in BenchmarkTransports.
const benchSenders = 16

// BenchmarkTransports measures accepted envelopes per second over gRPC
// Send, HTTP/JSON (POST /macp/envelope, keep-alive connections) and
// WebSocket (macp/send, one connection per sender), in the same run and
// against the same runtime (in-memory store: the transports' own cost is
// what differs), with 16 concurrent senders on 16 sessions; b.N envelopes
// per transport, in six rounds whose order rotates. Reported: each rate and the ratios http/grpc and
// ws/grpc (docs/benchmarks.md).
func BenchmarkTransports(b *testing.B) {
	e := startApp(b, testConfig())
	sids := make([]string, benchSenders)
	for i := range sids {
		sids[i] = e.startSession(b, "coord", "alice")
	}
	payload := func(id string) []byte {
		p, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: id, Option: "option " + id, Rationale: strings.Repeat("r", 64)})
		return p
	}
	envJSON := func(sid, id string) []byte {
		return []byte(fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Proposal","message_id":%q,"session_id":%q,"timestamp_unix_ms":"%d","payload":%q}`,
			decisionMode, id, sid, time.Now().UnixMilli(), base64.StdEncoding.EncodeToString(payload(id))))
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchSenders * 2}}
	var seq atomic.Int64 // unique message ids across rounds
	run := func(name string, n int, send func(worker int, sid, id string) error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, benchSenders)
		t0 := time.Now()
		for w := range benchSenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if next.Add(1) > int64(n) {
						return
					}
					if err := send(w, sids[w], fmt.Sprintf("%s-%d", name, seq.Add(1))); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		el := time.Since(t0)
		select {
		case err := <-errs:
			b.Fatalf("%s: %v", name, err)
		default:
		}
		return el
	}
	wsConns := make([]*websocket.Conn, benchSenders)
	for i := range wsConns {
		wsConns[i] = e.dialWS(b, "coord")
		defer wsConns[i].CloseNow()
	}
	b.ResetTimer()
	grpcSend := func(_ int, sid, id string) error {
		r, err := e.c.Send(as("coord"), &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: decisionMode,
			MessageType: "Proposal", MessageId: id, SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload(id)}})
		if err != nil || !r.Ack.Ok {
			return fmt.Errorf("%v %v", r, err)
		}
		return nil
	}
	httpSend := func(_ int, sid, id string) error {
		req, _ := http.NewRequest("POST", e.base+"/macp/envelope", bytes.NewReader(envJSON(sid, id)))
		req.Header.Set("Authorization", "Bearer coord")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		return nil
	}
	wsSend := func(w int, sid, id string) error {
		c := wsConns[w]
		msg := append(append([]byte(`{"jsonrpc":"2.0","id":1,"method":"macp/send","params":{"envelope":`), envJSON(sid, id)...), "}}"...)
		if err := c.Write(context.Background(), websocket.MessageText, msg); err != nil {
			return err
		}
		_, resp, err := c.Read(context.Background())
		if err != nil {
			return err
		}
		if !bytes.Contains(resp, []byte(`"ok":true`)) {
			return fmt.Errorf("%s", resp)
		}
		return nil
	}
	// Rounds, the order rotating, so that load from elsewhere on the
	// machine falls on all three alike.
	const rounds = 6
	var tg, th, tw time.Duration
	per := max(b.N/rounds, 1)
	for r := range rounds {
		steps := []func(){
			func() { tg += run("g", per, grpcSend) },
			func() { th += run("h", per, httpSend) },
			func() { tw += run("w", per, wsSend) },
		}
		for i := range steps {
			steps[(i+r)%3]()
		}
	}
	total := float64(per * rounds)
	grpcRate, httpRate, wsRate := total/tg.Seconds(), total/th.Seconds(), total/tw.Seconds()
	b.StopTimer()
	b.ReportMetric(grpcRate, "grpc-env/s")
	b.ReportMetric(httpRate, "http-env/s")
	b.ReportMetric(wsRate, "ws-env/s")
	b.ReportMetric(httpRate/grpcRate, "http/grpc")
	b.ReportMetric(wsRate/grpcRate, "ws/grpc")
}

// BenchmarkSSEFanout: 1,000 SSE followers of one busy session. One op is
// one envelope sent (16 concurrent senders over gRPC) and delivered to
// every follower. Reported: the session's accepted envelopes per second
// with the followers attached, the SSE events delivered per second, and
// the send rate as a ratio of the same senders without followers
// (measured first, in the same run).
func BenchmarkSSEFanout(b *testing.B) {
	const followers = 1000
	cfg := testConfig()
	cfg.Limits.MaxStreamsPerIdentity = 0 // one identity follows 1,000 times
	e := startApp(b, cfg)
	base := e.startSession(b, "coord", "alice")
	alone := proposeConcurrently(b, e, base, b.N, "a")

	sid := e.startSession(b, "coord", "alice")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var delivered atomic.Int64
	wait := followSSE(b, ctx, e, sid, followers, int64(b.N+1), &delivered) // the SessionStart, then b.N proposals
	b.ResetTimer()
	t0 := time.Now()
	sent := proposeConcurrently(b, e, sid, b.N, "f")
	wait()
	all := time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/sent.Seconds(), "env/s")
	b.ReportMetric(float64(delivered.Load())/all.Seconds(), "events/s")
	b.ReportMetric(alone.Seconds()/sent.Seconds(), "send-ratio")
}

// proposeConcurrently sends n proposals into sid from benchSenders
// concurrent gRPC senders and returns how long that took.
func proposeConcurrently(b *testing.B, e *env, sid string, n int, prefix string) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range benchSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if ack := e.grpcProposal(b, "coord", sid, fmt.Sprintf("%s-%d", prefix, i)); !ack.Ok {
					b.Errorf("send: %v", ack)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(t0)
}

// followSSE attaches followers SSE followers of sid (as alice) and returns
// once all are attached; each reads until it has want events, which must
// carry the ids 1, 2, ... in order, counting each in delivered. The
// returned wait returns once every follower is done.
func followSSE(b *testing.B, ctx context.Context, e *env, sid string, followers int, want int64, delivered *atomic.Int64) (wait func()) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: followers, MaxConnsPerHost: 0}}
	var ready, done sync.WaitGroup
	for range followers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/macp/session/"+sid+"/events", nil)
			req.Header.Set("Authorization", "Bearer alice")
			resp, err := hc.Do(req)
			if err != nil || resp.StatusCode != 200 {
				b.Errorf("follower: %v %v", resp, err)
				ready.Done()
				return
			}
			defer resp.Body.Close()
			ready.Done()
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			var n int64
			for n < want {
				line, err := r.ReadSlice('\n')
				if err != nil {
					b.Errorf("follower read after %d: %v", n, err)
					return
				}
				if id, ok := bytes.CutPrefix(line, []byte("id: ")); ok {
					n++
					if got := strings.TrimSpace(string(id)); got != fmt.Sprint(n) {
						b.Errorf("follower: event id %s, want %d", got, n)
						return
					}
					delivered.Add(1)
				}
			}
		}()
	}
	ready.Wait()
	return done.Wait
}

// BenchmarkFeedFanoutEncodeOnce: what encoding an envelope once for all
// the feeds of its session saves (encache.go). 1,000 SSE followers of one
// session (SSE, WebSocket and protocol-mode feeds share the encoding path,
// Server.encodeFeed); 16 concurrent gRPC senders send b.N envelopes with
// the cache bypassed (every follower encodes its own copy, the baseline)
// and b.N with it, in alternating halves (four phases), while the same
// followers read. Every follower must receive every envelope, in order,
// or the benchmark fails. Reported per delivered event: the process's CPU
// time (server and the in-process HTTP clients, getrusage) in each
// setting, and once/each, their ratio (the clients' share is the same in
// both, so the server's own saving is larger than the ratio shows).
//
//	go test ./internal/httpapi -run '^$' -bench BenchmarkFeedFanoutEncodeOnce -benchtime 2000x -count 3
func BenchmarkFeedFanoutEncodeOnce(b *testing.B) {
	const followers = 1000
	cfg := testConfig()
	cfg.Limits.MaxStreamsPerIdentity = 0 // one identity follows 1,000 times
	e := startApp(b, cfg)
	defer httpapi.BypassEncodeCache(false)
	sid := e.startSession(b, "coord", "alice")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	half := max(b.N/2, 1)
	want := int64(1 + 4*half) // the SessionStart, then four phases
	var delivered atomic.Int64
	wait := followSSE(b, ctx, e, sid, followers, want, &delivered)
	// phase sends half envelopes and waits until every follower has them;
	// it returns the process CPU time that took.
	sent := int64(1)
	phase := func(bypass bool, prefix string) time.Duration {
		httpapi.BypassEncodeCache(bypass)
		c0 := processCPU()
		proposeConcurrently(b, e, sid, half, prefix)
		sent += int64(half)
		for delivered.Load() < sent*followers && !b.Failed() {
			time.Sleep(time.Millisecond)
		}
		return processCPU() - c0
	}
	b.ResetTimer()
	// ABBA order, so that drift over the run weighs on both alike.
	each := phase(true, "each1")
	once := phase(false, "once1")
	once += phase(false, "once2")
	each += phase(true, "each2")
	b.StopTimer()
	wait()
	if got := delivered.Load(); got < want*followers {
		b.Fatalf("delivered %d events, want %d", got, want*followers)
	}
	events := float64(2*half) * followers
	b.ReportMetric(float64(each.Nanoseconds())/events, "cpu-ns/event-each")
	b.ReportMetric(float64(once.Nanoseconds())/events, "cpu-ns/event-once")
	b.ReportMetric(float64(once)/float64(each), "once/each")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
