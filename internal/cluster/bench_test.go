package cluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/natsstore"
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
// It also measures raw JetStream: a nats.go client publishing, with the
// same concurrency (one publisher per session, each waiting for its ack,
// with the per-subject expected sequence), messages of the node's size
// (its own stored messages, copied) to streams of the same configuration
// (R3, one per partition) on the same servers: nats1/raw is what the node
// keeps of what JetStream gives. nats1 and raw run while only one node is
// up (its feed the only consumer), alternately, rounds times each, as
// does the Pebble baseline: the figures are the medians of the rounds,
// the ratios those of the medians (the machine is shared; alternating
// spreads its noise over both sides). docs/benchmarks.md "Cluster".
//
//	go test -run '^$' -bench BenchmarkCluster -benchtime 1x ./internal/cluster/
//	BENCH_NATS_PARTITIONS=1 go test -run '^$' -bench BenchmarkCluster -benchtime 1x ./internal/cluster/   # one history stream
//	BENCH_CLUSTER_SESSIONS=16 go test -run '^$' -bench BenchmarkCluster -benchtime 1x ./internal/cluster/  # 16 clients
func BenchmarkCluster(b *testing.B) {
	const perSession, rounds = 40, 3
	sessions := 32 // BENCH_CLUSTER_SESSIONS: clients (one session each)
	if n, err := strconv.Atoi(os.Getenv("BENCH_CLUSTER_SESSIONS")); err == nil && n > 0 {
		sessions = n
	}
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
		var pebbles []float64
		for r := 0; r < rounds; r++ {
			pebbles = append(pebbles, load(b, sessions, perSession,
				func(_ int, sid string) { rt.Send(ctx, initiator(r), startEnv(sid, "m0", 600_000)) },
				func(_ int, sid string, k int) bool {
					return rt.Send(ctx, aliceID, proposalEnv(sid, fmt.Sprintf("p%d", k))).GetOk()
				}))
		}
		rt.Close()
		ps.Close()
		pebble := median(pebbles)
		b.ReportMetric(pebble, "pebble_env/s")

		e := newEnv(b, 3, 1)
		raw := openRaw(b, e)
		for nodes := 1; nodes <= 3; nodes++ {
			for len(e.nodes) < nodes {
				e.mu.Lock()
				e.nodes = append(e.nodes, nil)
				e.mu.Unlock()
				e.startNode(len(e.nodes) - 1)
			}
			if testOwnership() == config.OwnershipPartitioned {
				live := make([]int, nodes)
				for i := range live {
					live[i] = i
				}
				e.waitBalanced(b, live)
			}
			var rates, raws []float64
			var cs commitStats       // node 0's group commits in the nats1 rounds
			var rawLat time.Duration // the raw publishes' summed latency
			for r := 0; r < rounds; r++ {
				var sids []string
				var smu sync.Mutex
				var before commitStats
				rates = append(rates, load(b, sessions, perSession,
					func(i int, sid string) {
						smu.Lock()
						sids = append(sids, sid)
						smu.Unlock()
						e.send(i%nodes, initiator(10*nodes+r), startEnv(sid, "m0", 600_000))
						if i == sessions-1 {
							before = gatherCommits(b, e.node(0))
						}
					},
					func(i int, sid string, k int) bool {
						return e.send(i%nodes, aliceID, proposalEnv(sid, fmt.Sprintf("p%d", k))).GetOk()
					}))
				if nodes > 1 {
					break // one round: a figure of its own, no raw side
				}
				cs = cs.add(gatherCommits(b, e.node(0)).sub(before))
				m, err := lastMsg(e.reader(), sids[0])
				if err != nil {
					b.Fatal(err)
				}
				rate, lat := rawPublish(b, raw, m, sessions, perSession)
				raws = append(raws, rate)
				rawLat += lat
			}
			rate := median(rates)
			if nodes == 3 {
				// Sessions each node holds in memory, against all OPEN
				// sessions: 1 when every node holds every session
				// (shared), about 1/3 when each holds its partitions'.
				var most, sum int
				for i := 0; i < nodes; i++ {
					n := e.node(i).Runtime().Release()
					most, sum = max(most, n), sum+n
					b.Logf("node %d holds %d sessions", i, n)
				}
				all := sum // each session on its owner only
				if testOwnership() == config.OwnershipShared {
					all = most // every session on every node
				}
				if testOwnership() == config.OwnershipPartitioned {
					// The same load with each client on its session's
					// owner: what forwarding costs.
					owned := load(b, sessions, perSession,
						func(_ int, sid string) { e.send(0, initiator(39), startEnv(sid, "m0", 600_000)) },
						func(_ int, sid string, k int) bool {
							return e.send(max(0, e.ownerOf(sid)), aliceID, proposalEnv(sid, fmt.Sprintf("p%d", k))).GetOk()
						})
					b.ReportMetric(owned, "nats3owner_env/s")
					b.ReportMetric(owned/rate, "nats3owner/nats3")
				}
				b.ReportMetric(float64(most), "resident3_max")
				b.ReportMetric(float64(most)/float64(all), "resident3_max/total")
			}
			b.ReportMetric(rate, fmt.Sprintf("nats%d_env/s", nodes))
			b.ReportMetric(rate/pebble, fmt.Sprintf("nats%d/pebble", nodes))
			if nodes == 1 {
				rawRate := median(raws)
				b.ReportMetric(rawRate, "raw_msg/s")
				b.ReportMetric(rate/rawRate, "nats1/raw")
				b.ReportMetric(rawRate/pebble, "raw/pebble")
				// Why nats1 < raw: requests per group commit, and the
				// time from a group's AppendAsync to the end of its wait,
				// against one raw publish.
				b.ReportMetric(cs.reqs/cs.groups, "nats1_reqs/group")
				b.ReportMetric(1000*cs.appendSec/cs.groups, "nats1_append_ms")
				b.ReportMetric(float64(rawLat.Milliseconds())/float64(rounds*sessions*perSession), "raw_publish_ms")
			}
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

// initiator k starts the sessions of one round (each initiator may hold
// 100 OPEN sessions).
func initiator(k int) coord.Identity {
	return coord.Identity{Sender: fmt.Sprintf("agent://init-%d", k)}
}

// openRaw opens a store named "raw" on e's servers: streams configured
// as the nodes' history streams (R3, one per partition), which no node
// follows.
func openRaw(b *testing.B, e *env) *natsstore.Store {
	b.Helper()
	return openStoreRetry(b, natsstore.Options{URL: e.nats.AllURLs(), Name: "raw", Partitions: benchParts, Replicas: 3, Timeout: 2 * time.Second})
}

// rawPublish publishes sessions*perSession messages with nats.go to raw's
// streams, one publisher per session subject, each waiting for its ack
// before the next and expecting the subject's last sequence, as the store
// does. Each message is a copy of m, a message a node stored (body and
// Macp-* headers). Messages acknowledged per second.
func rawPublish(b *testing.B, raw *natsstore.Store, m *jetstream.RawStreamMsg, sessions, perSession int) (float64, time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := raw.JetStream()
	var acked, lat atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subj := raw.Subject(fmt.Sprintf("raw-%d-%s", i, newSID()))
			var last uint64
			for k := 0; k < perSession; k++ {
				msg := nats.NewMsg(subj)
				for _, h := range []string{natsstore.HeaderAppend, natsstore.HeaderSeq, natsstore.HeaderCount} {
					msg.Header.Set(h, m.Header.Get(h))
				}
				msg.Data = m.Data
				p0 := time.Now()
				ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last))
				lat.Add(int64(time.Since(p0)))
				if err != nil {
					b.Errorf("raw publish: %v", err)
					return
				}
				last = ack.Sequence
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(acked.Load()) / time.Since(t0).Seconds(), time.Duration(lat.Load())
}

// commitStats are a node's group-commit counters (its metrics registry).
type commitStats struct{ groups, reqs, appendSec float64 }

func (c commitStats) add(d commitStats) commitStats {
	return commitStats{c.groups + d.groups, c.reqs + d.reqs, c.appendSec + d.appendSec}
}

func (c commitStats) sub(d commitStats) commitStats {
	return commitStats{c.groups - d.groups, c.reqs - d.reqs, c.appendSec - d.appendSec}
}

// gatherCommits reads macpd_commit_group_requests and
// macpd_store_append_seconds from a's registry.
func gatherCommits(b *testing.B, a *app.App) commitStats {
	b.Helper()
	mfs, err := a.Metrics().Gather()
	if err != nil {
		b.Fatal(err)
	}
	var c commitStats
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "macpd_commit_group_requests":
				c.groups, c.reqs = float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
			case "macpd_store_append_seconds":
				c.appendSec = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return c
}

// median of xs (not empty).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// lastMsg is a session's last stored message.
func lastMsg(ns *natsstore.Store, sid string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range ns.StreamNames() {
		st, err := ns.JetStream().Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		if m, err := st.GetLastMsgForSubject(ctx, ns.Subject(sid)); err == nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no message of session %s", sid)
}

// benchParts is MACP_NATS_PARTITIONS of the cluster tests' and benchmark's
// nodes and of the raw streams: BENCH_NATS_PARTITIONS, else 0 (a new
// deployment's default, natsstore.DefaultPartitions).
var benchParts = func() int { n, _ := strconv.Atoi(os.Getenv("BENCH_NATS_PARTITIONS")); return n }()
