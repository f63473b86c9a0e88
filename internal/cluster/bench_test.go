package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// load drives sessions*perSession Proposals, each session's envelopes in
// order from its own client through sender(session index), and returns
// accepted envelopes per second.
func load(b *testing.B, sessions, perSession int, start func(i int, sid string), send func(i int, sid string, k int) bool) float64 {
	b.Helper()
	sids := make([]string, sessions)
	for i := range sids {
		sids[i] = newSID()
		start(i, sids[i])
	}
	var accepted atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, sid := range sids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < perSession; k++ {
				if send(i, sid, k) {
					accepted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(accepted.Load()) / time.Since(t0).Seconds()
}

// BenchmarkCluster measures accepted envelopes per second through 1, 2 and
// 3 macpd nodes on one 3-server JetStream cluster (R3), each session's
// client on one node, against one node on the Pebble default in the same
// run (ratios; everything shares this machine), and a hot session written
// through two nodes at once against the same session through one node.
// docs/benchmarks.md "Cluster".
//
//	go test -run '^$' -bench BenchmarkCluster -benchtime 1x ./internal/cluster/
func BenchmarkCluster(b *testing.B) {
	const sessions, perSession = 32, 40
	ctx := context.Background()
	for n := 0; n < b.N; n++ {
		// Baseline: one node, Pebble on disk.
		ps, err := pebblestore.Open(b.TempDir(), pebblestore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		rt := runtime.New(ps, builtin.Modes(), policy.DefaultOnly{}, runtime.Options{})
		if err := rt.Start(ctx); err != nil {
			b.Fatal(err)
		}
		pebble := load(b, sessions, perSession,
			func(_ int, sid string) { rt.Send(ctx, initID, startEnv(sid, "m0", 600_000)) },
			func(_ int, sid string, k int) bool {
				return rt.Send(ctx, aliceID, proposalEnv(sid, fmt.Sprintf("p%d", k))).GetOk()
			})
		rt.Close()
		ps.Close()
		b.ReportMetric(pebble, "pebble_env/s")

		e := newEnv(b, 3, 3)
		for nodes := 1; nodes <= 3; nodes++ {
			rate := load(b, sessions, perSession,
				func(i int, sid string) { e.send(i%nodes, initID, startEnv(sid, "m0", 600_000)) },
				func(i int, sid string, k int) bool {
					return e.send(i%nodes, aliceID, proposalEnv(sid, fmt.Sprintf("p%d", k))).GetOk()
				})
			b.ReportMetric(rate, fmt.Sprintf("nats%d_env/s", nodes))
			b.ReportMetric(rate/pebble, fmt.Sprintf("nats%d/pebble", nodes))
		}
		// A hot session: 8 clients on one session, through one node, then
		// spread over two nodes (every envelope contends).
		hot := func(nodes int) float64 {
			sid := newSID()
			if a := e.send(0, initID, startEnv(sid, "m0", 600_000)); !a.GetOk() {
				b.Fatal(ackString(a))
			}
			return load(b, 8, 25, func(int, string) {}, func(i int, _ string, k int) bool {
				id := coord.Identity{Sender: aliceID.Sender}
				if i%2 == 1 {
					id = bobID
				}
				return e.send(i%nodes, id, proposalEnv(sid, fmt.Sprintf("h%d-%d", i, k))).GetOk()
			})
		}
		one, two := hot(1), hot(2)
		b.ReportMetric(one, "hot1_env/s")
		b.ReportMetric(two, "hot2_env/s")
		b.ReportMetric(two/one, "hot2/hot1")
	}
}
