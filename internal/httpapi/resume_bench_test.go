package httpapi_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// fill appends n proposals to sid in-process (runtime.Send, 16 at a time).
func (e *env) fill(b testing.TB, sid string, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				p, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: fmt.Sprint("p", i), Option: "o", Rationale: strings.Repeat("r", 64)})
				ack := e.a.Runtime().Send(context.Background(), coord.Identity{Sender: "coord"}, &macpv1.Envelope{MacpVersion: "1.0", Mode: decisionMode,
					MessageType: "Proposal", MessageId: fmt.Sprintf("%s-%d", sid, i), SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: p})
				if !ack.Ok {
					b.Errorf("fill: %v", ack)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// wsReadUntil reads notifications on c until the envelope with
// sessionEventId last.
func wsReadUntil(b testing.TB, c *websocket.Conn, last uint64) {
	for {
		_, msg, err := c.Read(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if !strings.Contains(string(msg), `"notifications/macp/envelope"`) {
			continue
		}
		var m struct {
			Params struct {
				SessionEventID uint64 `json:"sessionEventId"`
			} `json:"params"`
		}
		if json.Unmarshal(msg, &m) == nil && m.Params.SessionEventID >= last {
			return
		}
	}
}

// BenchmarkResume measures resume latency: the time from sending
// session/resume (WebSocket, connection already open) to receiving the
// last missed envelope, for 10, 1,000 and 100,000 missed envelopes; and,
// in the same run, the same catch-up through a gRPC StreamSession
// subscription (after_sequence = the same cursor). Reported: ns per
// resume for each, and ws/grpc (docs/benchmarks.md).
func BenchmarkResume(b *testing.B) {
	for _, k := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprint("missed=", k), func(b *testing.B) {
			e := startApp(b, testConfig())
			sid := e.startSession(b, "coord", "alice")
			e.fill(b, sid, k)
			last := uint64(k + 1)
			var wsT, wsbT, wsjT, grpcT time.Duration
			for i := 0; i < b.N; i++ {
				// The binary subprotocol: envelope frames (ws_binary.go).
				cb := e.dialWSProto(b, "alice")
				breq, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session/resume", "params": map[string]any{"sessionId": sid, "lastSessionEventId": 1}})
				t0 := time.Now()
				if err := cb.Write(context.Background(), websocket.MessageText, breq); err != nil {
					b.Fatal(err)
				}
				for {
					typ, msg, err := cb.Read(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					if typ == websocket.MessageBinary && len(msg) >= 9 && msg[0] == 0x03 && binary.BigEndian.Uint64(msg[1:9]) == last {
						break
					}
				}
				wsbT += time.Since(t0)
				_ = cb.CloseNow()

				// JSON with "batch": true (wsbatch.go).
				cj := e.dialWS(b, "alice")
				jreq, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session/resume", "params": map[string]any{"sessionId": sid, "lastSessionEventId": 1, "batch": true}})
				t0 = time.Now()
				if err := cj.Write(context.Background(), websocket.MessageText, jreq); err != nil {
					b.Fatal(err)
				}
				lastID := []byte(fmt.Sprintf(`"sessionEventId":%d,`, last))
				for {
					_, msg, err := cj.Read(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					if bytes.Contains(msg, []byte(`"notifications/macp/envelope`)) && bytes.Contains(msg, lastID) {
						break
					}
				}
				wsjT += time.Since(t0)
				_ = cj.CloseNow()

				c := e.dialWS(b, "alice")
				req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session/resume", "params": map[string]any{"sessionId": sid, "lastSessionEventId": 1}})
				t0 = time.Now()
				if err := c.Write(context.Background(), websocket.MessageText, req); err != nil {
					b.Fatal(err)
				}
				wsReadUntil(b, c, last)
				wsT += time.Since(t0)
				_ = c.CloseNow()

				ctx, cancel := context.WithCancel(as("alice"))
				t0 = time.Now()
				st, err := e.c.StreamSession(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := st.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sid, AfterSequence: 1}); err != nil {
					b.Fatal(err)
				}
				for n := uint64(1); n < last; {
					r, err := st.Recv()
					if err != nil {
						b.Fatal(err)
					}
					if r.GetEnvelope().GetSessionId() == sid {
						n++
					}
				}
				grpcT += time.Since(t0)
				cancel()
			}
			b.ReportMetric(float64(wsT.Nanoseconds())/float64(b.N), "ws-ns/resume")
			b.ReportMetric(float64(grpcT.Nanoseconds())/float64(b.N), "grpc-ns/resume")
			b.ReportMetric(float64(wsT)/float64(grpcT), "ws/grpc")
			b.ReportMetric(float64(wsbT.Nanoseconds())/float64(b.N), "wsbin-ns/resume")
			b.ReportMetric(float64(wsbT)/float64(grpcT), "wsbin/grpc")
			b.ReportMetric(float64(wsjT.Nanoseconds())/float64(b.N), "wsbatch-ns/resume")
			b.ReportMetric(float64(wsjT)/float64(grpcT), "wsbatch/grpc")
		})
	}
}

// BenchmarkProtocolFanout measures notification throughput to 1,000
// attached protocol-mode WebSocket connections (1,000 participants, one
// attachment each) against 1,000 gRPC StreamSession subscribers, in the
// same run: b.N envelopes sent, time until every follower has all.
// Reported: notifications delivered per second for each, and ws/grpc.
//
// The gRPC subscribers use one client connection per 90 streams: a
// connection carries at most MACP_MAX_CONCURRENT_STREAMS (100) calls, and
// further StreamSession calls on it wait for a slot (with all 1,000 on
// one connection, 900 waited forever and the benchmark never started).
func BenchmarkProtocolFanout(b *testing.B) {
	const followers, perConn = 1000, 90
	cfg := testConfig()
	cfg.Limits.MaxStreamsPerIdentity = 0
	cfg.Limits.MaxStreamsPerSession = 2 * followers
	e := startApp(b, cfg)
	agents := []string{"coord"}
	for i := 1; i < followers; i++ {
		agents = append(agents, fmt.Sprint("p", i))
	}
	var clients []macpv1.MACPRuntimeServiceClient
	for range (followers + perConn - 1) / perConn {
		conn, err := grpc.NewClient(e.a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients = append(clients, macpv1.NewMACPRuntimeServiceClient(conn))
	}
	measure := func(kind string) float64 {
		sid := e.startSession(b, agents...)
		var ready, done sync.WaitGroup
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		last := uint64(b.N + 1)
		for i, agent := range agents {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				if kind == "ws" {
					c := e.dialWS(b, agent)
					defer c.CloseNow()
					req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session/resume", "params": map[string]any{"sessionId": sid, "lastSessionEventId": 1}})
					_ = c.Write(ctx, websocket.MessageText, req)
					ready.Done()
					wsReadUntil(b, c, last)
					return
				}
				st, err := clients[i/perConn].StreamSession(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+agent))
				if err != nil {
					b.Error(err)
					ready.Done()
					return
				}
				_ = st.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sid, AfterSequence: 1})
				ready.Done()
				for n := uint64(1); n < last; {
					r, err := st.Recv()
					if err != nil {
						b.Error(err)
						return
					}
					if r.GetEnvelope().GetSessionId() == sid {
						n++
					}
				}
			}()
		}
		ready.Wait()
		t0 := time.Now()
		e.fill(b, sid, b.N)
		done.Wait()
		return float64(b.N*followers) / time.Since(t0).Seconds()
	}
	b.ResetTimer()
	g := measure("grpc")
	w := measure("ws")
	b.StopTimer()
	b.ReportMetric(w, "ws-notif/s")
	b.ReportMetric(g, "grpc-notif/s")
	b.ReportMetric(w/g, "ws/grpc")
}
