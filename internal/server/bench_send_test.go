package server_test

import (
	"context"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// BenchmarkSend: unary Send over real gRPC (the app on 127.0.0.1:0, dev
// bearer identities, one client connection) from 64 concurrent callers,
// each driving its own Decision session with Proposals; "durable" is the
// default Pebble store in a temporary directory (every Ack after its
// sync), "memory" the in-memory store. Client and server share the
// process, so ns/op and allocs/op count both; they are meant for
// comparing server changes within one run (the throughput targets are
// measured by scripts/bench.sh against separate processes).
func BenchmarkSend(b *testing.B) {
	for _, durable := range []bool{false, true} {
		name := "memory"
		if durable {
			name = "durable"
		}
		b.Run(name, func(b *testing.B) {
			cfg := testConfig()
			if durable {
				cfg.MemoryOnly = false
				cfg.DataDir = b.TempDir()
			}
			a, err := app.New(cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := a.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = a.Shutdown(ctx)
			}()
			conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := macpv1.NewMACPRuntimeServiceClient(conn)
			start, err := proto.Marshal(&macpv1.SessionStartPayload{Intent: "bench", Participants: []string{"bench-agent"},
				ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 3600_000})
			if err != nil {
				b.Fatal(err)
			}
			var failed atomic.Int64
			b.SetParallelism(max(1, 64/goruntime.GOMAXPROCS(0))) // 64 callers
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := as("bench-agent")
				sid := uuid.NewString()
				r, err := c.Send(ctx, &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: decisionMode,
					MessageType: "SessionStart", MessageId: "start", SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: start}})
				if err != nil || !r.Ack.Ok {
					failed.Add(1)
					return
				}
				for i := 0; pb.Next(); i++ {
					payload, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: "p" + strconv.Itoa(i), Option: "an option of some length", Rationale: "because"})
					r, err := c.Send(ctx, &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: decisionMode,
						MessageType: "Proposal", MessageId: "m" + strconv.Itoa(i), SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload}})
					if err != nil || !r.Ack.Ok {
						if failed.Add(1) == 1 {
							b.Logf("first failure: %v %v", err, r.GetAck().GetError())
						}
					}
				}
			})
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d Sends failed", n)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acks/s")
		})
	}
}
