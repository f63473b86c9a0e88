package server_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	goruntime "runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
	"github.com/macpd/macpd/internal/store/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// streamBaseline holds the accept and deliver ns per message of the
// 0-subscriber case of the current BenchmarkStreamFanout run, so the other
// cases report ratios against a baseline measured in the same run.
var streamBaseline [3]float64

// Benchmark knobs.
const (
	benchSenders  = 8  // concurrent unary Send callers on the busy session
	benchSubConns = 20 // client connections the subscribers are spread over
	stalledWarmup = 3000
)

// BenchmarkStreamFanout: over real gRPC (in-process server on
// 127.0.0.1:0, memstore, dev bearer identities), one busy session receives
// b.N Proposals from 8 concurrent unary Send callers while 0, 10, 100 or
// 1000 passive subscribers (StreamSession with subscribe_session_id,
// spread over 20 client connections) are attached.
//
// Reported per accepted message: ns/op = acceptance (every Send acked);
// msgs/s = the same as a rate; deliver-ns/msg = until every subscriber
// received every envelope; x-accept and x-deliver = the same against the
// 0-subscriber case of the same run; cpu-ns/msg = CPU time of the whole
// process (server and clients) while the timed Sends ran, and x-cpu its
// ratio. At the end every subscriber must have
// received exactly the b.N envelopes (count and an order-independent
// checksum of their message ids), or the benchmark fails. In the
// "stalled" case the subscribers' clients do not read until every Send
// was acked: during an untimed warm-up of 3,000 envelopes their 64 KiB
// windows fill, the server's sends block and their followers stop reading
// the session's shared tail (they fall out of it); the timed phase shows
// acceptance with 1000 stalled subscribers attached, and deliver-ns/msg
// their catch-up (from the store, then the tail) once the clients read,
// per message.
//
//	go test ./internal/server -run '^$' -bench BenchmarkStreamFanout -benchtime 2000x -count 3
func BenchmarkStreamFanout(b *testing.B) {
	for _, subs := range []int{0, 10, 100, 1000} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			benchStreamFanout(b, subs, false)
		})
	}
	b.Run("subscribers=1000-stalled", func(b *testing.B) {
		benchStreamFanout(b, 1000, true)
	})
}

// benchSub is one passive subscriber's tally.
type benchSub struct {
	count atomic.Int64
	sum   atomic.Uint64 // sum of FNV-64a of the received message ids
}

func idHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

func benchAs(ctx context.Context, agent string) context.Context {
	return metadataBearer(ctx, agent)
}

func benchStreamFanout(b *testing.B, subs int, stalled bool) {
	st := memstore.New()
	reg := registry.New(st, builtin.Modes(), policy.DefaultOnly{}, registry.Options{})
	rt := runtime.New(st, reg, reg, runtime.Options{})
	if err := rt.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	svc := server.New(rt, auth.Chain{auth.Dev{}}, server.Options{Registry: reg})
	g, _ := svc.NewGRPCServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	defer svc.Drain()
	dial := func(opts ...grpc.DialOption) *grpc.ClientConn {
		conn, err := grpc.NewClient(lis.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			b.Fatal(err)
		}
		return conn
	}
	sendConn := dial()
	defer sendConn.Close()
	c := macpv1.NewMACPRuntimeServiceClient(sendConn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	sid := uuid.NewString()
	start, _ := proto.Marshal(&macpv1.SessionStartPayload{Intent: "bench", Participants: []string{"alice", "bob"},
		ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 3_600_000})
	r, err := c.Send(benchAs(ctx, "alice"), &macpv1.SendRequest{Envelope: envelope(sid, "SessionStart", "start", start)})
	if err != nil || !r.Ack.Ok {
		b.Fatalf("start: %v %v", err, r.GetAck().GetError())
	}
	after, _ := rt.LastSeq(sid)

	// Subscribers: all are "bob" (a declared participant).
	conns := make([]*grpc.ClientConn, min(subs, benchSubConns))
	var window []grpc.DialOption
	if stalled { // fixed windows: no BDP growth while nothing is read
		window = []grpc.DialOption{grpc.WithInitialWindowSize(64 << 10), grpc.WithInitialConnWindowSize(64 << 10)}
	}
	gate := make(chan struct{}) // stalled clients start reading when it closes
	if !stalled {
		close(gate)
	}
	for i := range conns {
		conns[i] = dial(window...)
		defer conns[i].Close()
	}
	tallies := make([]*benchSub, subs)
	errs := make(chan error, subs)
	var ready sync.WaitGroup
	for i := range tallies {
		tally := &benchSub{}
		tallies[i] = tally
		s, err := macpv1.NewMACPRuntimeServiceClient(conns[i%len(conns)]).StreamSession(benchAs(ctx, "bob"))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sid, AfterSequence: after}); err != nil {
			b.Fatal(err)
		}
		ready.Add(1)
		go func() {
			defer ready.Done()
			if _, err := s.Header(); err != nil {
				errs <- fmt.Errorf("subscribe: %w", err)
			}
		}()
		go func() {
			<-gate
			for {
				resp, err := s.Recv()
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if env := resp.GetEnvelope(); env != nil && env.SessionId == sid {
					tally.sum.Add(idHash(env.MessageId))
					tally.count.Add(1)
				}
			}
		}()
	}
	ready.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}

	// An untimed warm-up, delivered before timing starts, so every case
	// starts warm. Stalled subscribers fill their buffers during it
	// (client window, server write quota, stream queue: ~850 envelopes of
	// this size), so the timed phase measures acceptance once they no
	// longer read.
	warmup := 200
	if stalled {
		warmup = stalledWarmup
	}
	total := warmup + b.N
	reqs := make([]*macpv1.SendRequest, total)
	var wantSum uint64
	for i := range reqs {
		id := "b" + strconv.Itoa(i)
		p, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: "p-" + id, Option: "option " + id, Rationale: "r"})
		reqs[i] = &macpv1.SendRequest{Envelope: envelope(sid, "Proposal", id, p)}
		wantSum += idHash(id)
	}
	sendCtx := benchAs(ctx, "alice")
	var next atomic.Int64
	var failed atomic.Value
	send := func(upto int) {
		var sw sync.WaitGroup
		for range benchSenders {
			sw.Add(1)
			go func() {
				defer sw.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(upto) {
						next.Add(-1)
						return
					}
					r, err := c.Send(sendCtx, reqs[i])
					if err != nil || !r.Ack.Ok {
						failed.Store(fmt.Sprintf("%v %v", err, r.GetAck().GetError()))
						return
					}
				}
			}()
		}
		sw.Wait()
		if f := failed.Load(); f != nil {
			b.Fatalf("send failed: %v", f)
		}
	}
	send(warmup)
	if !stalled {
		waitSubs(b, tallies, errs, warmup)
	}
	goruntime.GC()
	b.ResetTimer()
	t0, cpu0 := time.Now(), cpuTime()
	send(total)
	accepted, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	gateOpened := time.Now()
	if stalled {
		close(gate)
	}
	waitSubs(b, tallies, errs, total)
	delivered := time.Since(t0)
	if stalled {
		// Catch-up of everything once the clients read, per message.
		delivered = time.Since(gateOpened) * time.Duration(b.N) / time.Duration(total)
	}
	// Watch for a duplicate for a while: a subscriber over the count.
	pollUntil(20*time.Millisecond, time.Millisecond, func() bool {
		for _, t := range tallies {
			if t.count.Load() > int64(total) {
				return true
			}
		}
		return false
	})
	for i, t := range tallies {
		if n, sum := t.count.Load(), t.sum.Load(); n != int64(total) || sum != wantSum {
			b.Fatalf("subscriber %d received %d envelopes (checksum %x), want exactly the %d sent (%x)", i, n, sum, total, wantSum)
		}
	}

	acceptNs := float64(accepted.Nanoseconds()) / float64(b.N)
	deliverNs := float64(delivered.Nanoseconds()) / float64(b.N)
	b.ReportMetric(1e9/acceptNs, "msgs/s")
	cpuNs := float64(cpu.Nanoseconds()) / float64(b.N)
	b.ReportMetric(deliverNs, "deliver-ns/msg")
	b.ReportMetric(cpuNs, "cpu-ns/msg")
	if subs == 0 {
		streamBaseline = [3]float64{acceptNs, deliverNs, cpuNs}
	} else if streamBaseline[0] > 0 {
		b.ReportMetric(acceptNs/streamBaseline[0], "x-accept")
		b.ReportMetric(deliverNs/streamBaseline[1], "x-deliver")
		b.ReportMetric(cpuNs/streamBaseline[2], "x-cpu")
	}
}

// waitSubs waits until every subscriber received n envelopes.
func waitSubs(b *testing.B, tallies []*benchSub, errs <-chan error, n int) {
	behind, least := 0, int64(n)
	if !pollUntil(10*time.Minute, 200*time.Microsecond, func() bool {
		select {
		case err := <-errs:
			b.Fatalf("a subscriber failed: %v", err)
		default:
		}
		behind, least = 0, int64(n)
		for _, t := range tallies {
			if c := t.count.Load(); c < int64(n) {
				behind++
				least = min(least, c)
			}
		}
		return behind == 0
	}) {
		b.Fatalf("%d of %d subscribers did not receive %d envelopes (the slowest has %d)", behind, len(tallies), n, least)
	}
}

// cpuTime returns the CPU time (user + system) the process used so far
// (server and clients: they share the process).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
