package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// BenchmarkClusterCosts measures what one envelope costs each process of
// a cluster: three nats-server processes (JetStream, R3, sync_interval
// always, the history over the default 8 partition streams) and one or
// three macpd processes (MACP_STORE=nats, partitioned ownership), all
// separate OS processes, so that each one's CPU time (utime+stime of
// /proc/<pid>/stat, all threads) is its own. Clients (this process, over
// gRPC) send Decision-mode Proposals, each client to its own session,
// waiting for each Ack. CPU per envelope is the process's CPU time over a
// phase, less its idle rate (measured before, over the same wall time),
// divided by the envelopes accepted in the phase. Phases:
//
//   - one: one macpd node, every session its own;
//   - raw: a nats.go client in this process publishing copies of a stored
//     Proposal (same body and Macp-* headers, per-subject expected
//     sequence) to streams configured as the history streams (R3, 8):
//     nats-server CPU per JetStream publish;
//
// then nodes 2 and 3 start and, once the partitions are balanced:
//
//   - owner: every session owned by node A, every client on A: A's CPU is
//     the owner's cost, that of B and C the cost of following the
//     streams (the cluster feed) of an envelope another node accepted;
//   - fwd: the same with every client on B, which forwards to A: B's CPU
//     less C's is the forwarding entry node's extra cost, A's less its
//     owner-phase cost the owner's, and the nats-servers' likewise;
//   - spread: sessions owned by all three nodes, each client on its
//     session's owner (the cluster's figure with owner-routed clients);
//   - memory: 3,000 (BENCH_COSTS_RESIDENT) more sessions owned by A, each
//     started and given one Proposal: A's live heap (after a forced GC,
//     /debug/pprof/heap?gc=1 on the admin endpoint) and RSS per session,
//     B's heap per session (a node that does not own them), and A's idle
//     CPU per owned session per second (12 s idle before and after).
//
// Also: bytes stored per envelope (the raw streams' bytes / messages, one
// replica), bytes each nats-server writes to disk per envelope
// (/proc/<pid>/io write_bytes) and the stream leaders per server.
// docs/benchmarks.md "Per-envelope costs", docs/cluster.md "Capacity
// model".
//
//	go test -run '^$' -bench BenchmarkClusterCosts -benchtime 1x -count 3 -timeout 30m ./internal/cluster/
//	BENCH_COSTS_CLIENTS=16 BENCH_COSTS_PER_SESSION=400 go test -run '^$' -bench BenchmarkClusterCosts -benchtime 1x ./internal/cluster/
func BenchmarkClusterCosts(b *testing.B) {
	if goruntime.GOOS != "linux" {
		b.Skip("reads /proc")
	}
	clients, perSession, resident := envInt("BENCH_COSTS_CLIENTS", 32), envInt("BENCH_COSTS_PER_SESSION", 200), envInt("BENCH_COSTS_RESIDENT", 3000)
	tick := clockTick(b)
	bins := buildBinaries(b)
	for n := 0; n < b.N; n++ {
		nc := startNATSProcs(b, bins.nats, 3)
		c := &costRun{b: b, tick: tick, nc: nc}
		for i := 0; i < 3; i++ {
			c.nodes = append(c.nodes, &macpdProc{t: b, bin: bins.macpd, natsURLs: nc.urls(), name: fmt.Sprintf("macpd%d", i),
				env: []string{"MACP_ADMIN_ADDR=127.0.0.1:0", "MACP_ADMIN_PPROF=1", "MACP_MAX_OPEN_SESSIONS=0"}})
		}
		b.Cleanup(func() {
			for _, m := range c.nodes {
				if m.address() != "" {
					m.kill()
				}
			}
		})
		c.nodes[0].name = "one"
		c.nodes[0].start()
		c.cl = &procClients{nodes: c.nodes, conns: map[string]*grpc.ClientConn{}}
		defer c.cl.close()
		c.reader = openReaderTB(b, nc.urls())

		// One node.
		c.live = 1
		c.startSessions(c.newSIDs(clients, nil), func(int) int { return 0 }) // warm-up
		warm := c.newSIDs(clients, nil)
		c.startSessions(warm, func(int) int { return 0 })
		c.drive(warm, 20, func(int) int { return 0 })
		idle1 := c.idle(8 * time.Second)
		// The sessions of the measured phases are in partitions 0, 3 and
		// 6: those the first of three nodes (by id) owns, so that the
		// owner's phases below use the same three streams.
		first := func(sid string) bool { return c.reader.PartitionOf(sid)%3 == 0 }
		sids := c.newSIDs(clients, first)
		c.startSessions(sids, func(int) int { return 0 })
		one := c.phase("one", idle1, func() int64 { return c.drive(sids, perSession, func(int) int { return 0 }) })
		m, err := lastMsg(c.reader, sids[0])
		if err != nil {
			b.Fatal(err)
		}
		raw := openRawURLs(b, nc.urls())
		rawPh := c.phase("raw", idle1, func() int64 {
			rawPublishIn(b, raw, m, clients, perSession, func(name string) bool { return raw.PartitionOf(name)%3 == 0 })
			return int64(clients * perSession)
		})

		// Three nodes.
		c.nodes[1].start()
		c.nodes[2].start()
		c.live = 3
		owners := c.waitOwners()
		// A owns partitions 0, 3 and 6; B forwards to it; C only follows.
		A := owners[0]
		B, C := (A+1)%3, (A+2)%3
		for i, role := range map[int]string{A: "owner", B: "entry", C: "other"} {
			c.nodes[i].name = role
		}
		ownedBy := func(node int) func(string) bool {
			return func(sid string) bool { return owners[c.reader.PartitionOf(sid)] == node }
		}
		warm = c.newSIDs(clients, ownedBy(A))
		c.startSessions(warm, func(int) int { return A })
		c.drive(warm, 20, func(int) int { return B })
		idle3 := c.idle(8 * time.Second)
		b.Logf("owner macpd%d, entry macpd%d, other macpd%d", A, B, C)
		sids = c.newSIDs(clients, ownedBy(A))
		c.startSessions(sids, func(int) int { return A })
		own := c.phase("owner", idle3, func() int64 { return c.drive(sids, perSession, func(int) int { return A }) })
		sids = c.newSIDs(clients, ownedBy(A))
		c.startSessions(sids, func(int) int { return A })
		fwd := c.phase("fwd", idle3, func() int64 { return c.drive(sids, perSession, func(int) int { return B }) })
		var spread []string
		for j := 0; j < 3; j++ {
			spread = append(spread, c.newSIDs((clients+2-j)/3, ownedBy(j))...)
		}
		owner := func(i int) int { return owners[c.reader.PartitionOf(spread[i])] }
		c.startSessions(spread, owner)
		spr := c.phase("spread", idle3, func() int64 { return c.drive(spread, perSession, owner) })

		// Memory and idle CPU per resident OPEN session on A.
		idleA0 := c.idle(12 * time.Second)
		heapA0, heapB0 := c.heap(A), c.heap(B)
		rssA0 := c.stat("owner").rss
		mem := c.newSIDs(resident, ownedBy(A))
		c.startSessions(mem, func(int) int { return A })
		c.drive(mem, 1, func(int) int { return A })
		heapA1, heapB1 := c.heap(A), c.heap(B)
		rssA1 := c.stat("owner").rss
		idleA1 := c.idle(12 * time.Second)
		heapPerSession := float64(heapA1-heapA0) / float64(resident)
		rssPerSession := float64(rssA1-rssA0) / float64(resident)
		feedHeapPerSession := float64(heapB1-heapB0) / float64(resident)
		idlePerSession := (idleA1["owner"] - idleA0["owner"]) / float64(resident) // CPU s per s

		// What is stored and written.
		storedRaw := streamBytes(b, raw)
		storedHist := streamBytes(b, c.reader)
		leaders := streamLeaders(b, c.reader)

		// Report.
		us := func(p costPhase, names ...string) float64 { return p.sum(names...) * 1e6 / float64(p.env) }
		nats := []string{"nats0", "nats1", "nats2"}
		b.ReportMetric(us(one, "one"), "macpd_cpu_us/env")
		b.ReportMetric(us(one, nats...), "nats_cpu_us/env")
		b.ReportMetric(one.maxOf(nats...)*1e6/float64(one.env), "nats_busiest_cpu_us/env")
		b.ReportMetric(float64(one.sumIO(nats...))/float64(one.env), "nats_disk_B/env")
		b.ReportMetric(one.rate(), "one_env/s")
		b.ReportMetric(us(rawPh, nats...), "raw_nats_cpu_us/pub")
		b.ReportMetric(rawPh.maxOf(nats...)*1e6/float64(rawPh.env), "raw_nats_busiest_cpu_us/pub")
		b.ReportMetric(float64(rawPh.sumIO(nats...))/float64(rawPh.env), "raw_nats_disk_B/pub")
		b.ReportMetric(rawPh.rate(), "raw_pub/s")
		b.ReportMetric(us(own, "owner"), "owner_cpu_us/env")
		b.ReportMetric((us(own, "entry")+us(own, "other"))/2, "feed_cpu_us/env")
		b.ReportMetric(us(own, nats...), "nats3_cpu_us/env")
		b.ReportMetric(us(fwd, "entry")-us(fwd, "other"), "fwd_entry_extra_cpu_us/env")
		b.ReportMetric(us(fwd, "owner")-us(own, "owner"), "fwd_owner_extra_cpu_us/env")
		b.ReportMetric(us(fwd, nats...)-us(own, nats...), "fwd_nats_extra_cpu_us/env")
		b.ReportMetric(us(fwd, "owner", "entry", "other")+us(fwd, nats...)-us(own, "owner", "entry", "other")-us(own, nats...), "fwd_extra_cpu_us/env")
		b.ReportMetric(us(spr, "owner", "entry", "other"), "spread_macpd_cpu_us/env")
		b.ReportMetric(us(spr, nats...), "spread_nats_cpu_us/env")
		b.ReportMetric(spr.rate(), "spread_env/s")
		b.ReportMetric(heapPerSession, "heap_B/session")
		b.ReportMetric(rssPerSession, "rss_B/session")
		b.ReportMetric(feedHeapPerSession, "nonowner_heap_B/session")
		b.ReportMetric(idlePerSession*1e6, "idle_cpu_us/session/s")
		b.ReportMetric(storedRaw.perMsg(), "stored_B/env")
		b.ReportMetric(storedHist.perMsg(), "history_B/msg")

		var tbl strings.Builder
		fmt.Fprintf(&tbl, "\nCPU µs per accepted envelope (raw: per publish), idle rate subtracted; tick %v\n", tick)
		fmt.Fprintf(&tbl, "%-7s %7s %7s %8s | %8s %8s %8s | %8s %8s %8s %8s | %8s\n", "phase", "env", "wall s", "env/s", "one/owner", "entry", "other", "nats0", "nats1", "nats2", "nats sum", "client")
		for _, p := range []costPhase{one, rawPh, own, fwd, spr} {
			fmt.Fprintf(&tbl, "%-7s %7d %7.2f %8.0f |", p.name, p.env, p.wall.Seconds(), p.rate())
			for _, names := range [][]string{{"one", "owner"}, {"entry"}, {"other"}} {
				v := "-"
				for _, name := range names {
					if _, ok := p.cpu[name]; ok {
						v = fmt.Sprintf("%.1f", us(p, name))
					}
				}
				fmt.Fprintf(&tbl, " %8s", v)
			}
			fmt.Fprintf(&tbl, " | %8.1f %8.1f %8.1f %8.1f | %8.1f\n", us(p, "nats0"), us(p, "nats1"), us(p, "nats2"), us(p, nats...), us(p, "client"))
		}
		fmt.Fprintf(&tbl, "idle CPU (ms/s) with 1 node: %s\n", fmtRates(idle1))
		fmt.Fprintf(&tbl, "idle CPU (ms/s) with 3 nodes: %s\n", fmtRates(idle3))
		fmt.Fprintf(&tbl, "nats disk writes per envelope (B): one %s; raw %s\n", fmtIO(one, nats), fmtIO(rawPh, nats))
		fmt.Fprintf(&tbl, "stored: raw streams %d msgs %d B (%.0f B/msg, one replica); history %d msgs %d B (%.0f B/msg); history leaders per server %v\n",
			storedRaw.msgs, storedRaw.bytes, storedRaw.perMsg(), storedHist.msgs, storedHist.bytes, storedHist.perMsg(), leaders)
		fmt.Fprintf(&tbl, "memory: %d sessions on the owner: heap %d -> %d (%.0f B/session), RSS %d -> %d (%.0f B/session); entry node (not their owner) heap %d -> %d (%.0f B/session)\n",
			resident, heapA0, heapA1, heapPerSession, rssA0, rssA1, rssPerSession, heapB0, heapB1, feedHeapPerSession)
		fmt.Fprintf(&tbl, "owner idle CPU: %.2f ms/s before, %.2f ms/s with %d more sessions: %.3f µs per session per s\n",
			idleA0["owner"]*1e3, idleA1["owner"]*1e3, resident, idlePerSession*1e6)
		b.Log(tbl.String())

		for _, m := range c.nodes {
			m.kill()
		}
		for i := range nc.procs {
			nc.kill(i)
		}
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// clockTick is the length of one clock tick of /proc/<pid>/stat.
func clockTick(b *testing.B) time.Duration {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	hz := 100
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			hz = n
		}
	} else {
		b.Logf("getconf CLK_TCK: %v; assuming 100", err)
	}
	return time.Second / time.Duration(hz)
}

// procStat is a process's CPU time (all threads), RSS and bytes written
// to storage.
type procStat struct {
	cpu    time.Duration
	rss    int64
	writes int64
}

func readProcStat(pid int, tick time.Duration) (procStat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(raw, ')')
	f := strings.Fields(string(raw[i+1:])) // f[0] is field 3 (state)
	ut, _ := strconv.ParseInt(f[14-3], 10, 64)
	st, _ := strconv.ParseInt(f[15-3], 10, 64)
	rss, _ := strconv.ParseInt(f[24-3], 10, 64)
	s := procStat{cpu: time.Duration(ut+st) * tick, rss: rss * int64(os.Getpagesize())}
	if io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(io))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
				s.writes, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return s, nil
}

type costRun struct {
	b      *testing.B
	tick   time.Duration
	nc     *natsProcs
	nodes  []*macpdProc
	live   int // nodes started
	cl     *procClients
	reader *natsstore.Store
	seq    atomic.Int64
}

// pids are the measured processes: macpd0.., nats0..2, and this process
// (the clients).
func (c *costRun) pids() map[string]int {
	out := map[string]int{"client": os.Getpid()}
	for i, p := range c.nc.procs {
		out[fmt.Sprintf("nats%d", i)] = p.cmd.Process.Pid
	}
	for i := 0; i < c.live; i++ {
		m := c.nodes[i]
		m.mu.Lock()
		out[m.name] = m.p.cmd.Process.Pid
		m.mu.Unlock()
	}
	return out
}

func (c *costRun) snapshot() map[string]procStat {
	out := map[string]procStat{}
	for name, pid := range c.pids() {
		s, err := readProcStat(pid, c.tick)
		if err != nil {
			c.b.Fatalf("%s: %v", name, err)
		}
		out[name] = s
	}
	return out
}

func (c *costRun) stat(name string) procStat {
	s, err := readProcStat(c.pids()[name], c.tick)
	if err != nil {
		c.b.Fatal(err)
	}
	return s
}

// idle is each process's CPU rate (CPU seconds per second) with no load:
// the lowest of 4 windows of d/4 each, so that a burst of background work
// in one window (a Raft snapshot, a collection, partitions being loaded)
// is not taken for the steady rate.
func (c *costRun) idle(d time.Duration) map[string]float64 {
	out := map[string]float64{}
	for w := 0; w < 4; w++ {
		s0, t0 := c.snapshot(), time.Now()
		time.Sleep(d / 4)
		s1, el := c.snapshot(), time.Since(t0)
		for name, s := range s1 {
			r := (s.cpu - s0[name].cpu).Seconds() / el.Seconds()
			if old, ok := out[name]; !ok || r < old {
				out[name] = r
			}
		}
	}
	return out
}

// costPhase is one phase's CPU seconds per process (idle rate
// subtracted), disk writes per process, envelopes and wall time.
type costPhase struct {
	name string
	cpu  map[string]float64
	io   map[string]int64
	env  int64
	wall time.Duration
}

func (p costPhase) sum(names ...string) float64 {
	var s float64
	for _, n := range names {
		s += p.cpu[n]
	}
	return s
}

func (p costPhase) maxOf(names ...string) float64 {
	var m float64
	for _, n := range names {
		m = max(m, p.cpu[n])
	}
	return m
}

func (p costPhase) sumIO(names ...string) int64 {
	var s int64
	for _, n := range names {
		s += p.io[n]
	}
	return s
}

func (p costPhase) rate() float64 { return float64(p.env) / p.wall.Seconds() }

func (c *costRun) phase(name string, idle map[string]float64, run func() int64) costPhase {
	s0, t0 := c.snapshot(), time.Now()
	env := run()
	s1, el := c.snapshot(), time.Since(t0)
	p := costPhase{name: name, cpu: map[string]float64{}, io: map[string]int64{}, env: env, wall: el}
	for n, s := range s1 {
		p.cpu[n] = (s.cpu - s0[n].cpu).Seconds() - idle[n]*el.Seconds()
		p.io[n] = s.writes - s0[n].writes
	}
	if env == 0 {
		c.b.Fatalf("phase %s: no envelope accepted", name)
	}
	return p
}

// newSIDs returns n new session ids for which keep is true (nil: any).
func (c *costRun) newSIDs(n int, keep func(string) bool) []string {
	var out []string
	for len(out) < n {
		if sid := newSID(); keep == nil || keep(sid) {
			out = append(out, sid)
		}
	}
	return out
}

func (c *costRun) rpc(node int, who string) (macpv1.MACPRuntimeServiceClient, context.Context) {
	addr := c.nodes[node].address()
	cc, err := c.cl.conn(addr)
	if err != nil {
		c.b.Fatal(err)
	}
	return macpv1.NewMACPRuntimeServiceClient(cc), metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+who)
}

func (c *costRun) send(node int, who string, env *macpv1.Envelope) bool {
	rpc, ctx := c.rpc(node, who)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := rpc.Send(ctx, &macpv1.SendRequest{Envelope: env})
	if err != nil {
		c.b.Errorf("%s: %v", env.MessageId, err)
		return false
	}
	if !resp.GetAck().GetOk() {
		c.b.Errorf("%s: %s", env.MessageId, ackString(resp.GetAck()))
		return false
	}
	return true
}

// startSessions starts sids, session i through node(i), on 32 workers.
func (c *costRun) startSessions(sids []string, node func(i int) int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(sids); i = int(next.Add(1) - 1) {
				if !c.send(node(i), initID.Sender, startEnv(sids[i], "m0", 600_000)) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if c.b.Failed() {
		c.b.FailNow()
	}
}

// drive sends perSession Proposals to each of sids as alice, session i's
// through node(i), one client per session (at most 32 at once, each
// waiting for its Ack), and returns the envelopes accepted.
func (c *costRun) drive(sids []string, perSession int, node func(i int) int) int64 {
	tag := c.seq.Add(1)
	var accepted, next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(32, len(sids)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(sids); i = int(next.Add(1) - 1) {
				for k := 0; k < perSession; k++ {
					if !c.send(node(i), aliceID.Sender, proposalEnv(sids[i], fmt.Sprintf("p%d-%d", tag, k))) {
						return
					}
					accepted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if c.b.Failed() {
		c.b.FailNow()
	}
	return accepted.Load()
}

var (
	nodeIDRE    = regexp.MustCompile(`msg="partitioned ownership" node=(\S+)`)
	adminAddrRE = regexp.MustCompile(`msg="admin listening" addr=(\S+)`)
)

func (c *costRun) logMatch(i int, re *regexp.Regexp) string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.nodes[i].mu.Lock()
		out := c.nodes[i].p.out.String()
		c.nodes[i].mu.Unlock()
		if m := re.FindStringSubmatch(out); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			c.b.Fatalf("%s: no %v in its log:\n%s", c.nodes[i].name, re, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitOwners waits until the live nodes hold all partitions, each its
// fair share, for 2 s, and returns each partition's owner (node index).
func (c *costRun) waitOwners() []int {
	ids := map[string]int{}
	for i := 0; i < c.live; i++ {
		ids[c.logMatch(i, nodeIDRE)] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	kv, err := c.reader.JetStream().KeyValue(ctx, "macp_owners")
	if err != nil {
		c.b.Fatal(err)
	}
	parts := c.reader.Partitions()
	var prev []int
	var since time.Time
	for {
		owners := make([]int, parts)
		count := make([]int, c.live)
		ok := true
		for p := range owners {
			owners[p] = -1
			if e, err := kv.Get(ctx, "p."+strconv.Itoa(p)); err == nil {
				if i, known := ids[string(e.Value())]; known {
					owners[p] = i
					count[i]++
				}
			}
			ok = ok && owners[p] >= 0
		}
		for _, n := range count {
			ok = ok && n >= parts/c.live
		}
		switch {
		case !ok || !slices.Equal(owners, prev):
			prev, since = owners, time.Now()
		case time.Since(since) > 2*time.Second:
			c.b.Logf("partition owners: %v", owners)
			return owners
		}
		if ctx.Err() != nil {
			c.b.Fatalf("partitions not balanced: %v", owners)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// admin GETs path on node i's admin endpoint.
func (c *costRun) admin(i int, path string) string {
	addr := c.logMatch(i, adminAddrRE)
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		c.b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.b.Fatal(err)
	}
	return string(body)
}

var heapAllocRE = regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)`)

// heap is node i's live heap after a forced collection.
func (c *costRun) heap(i int) int64 {
	body := c.admin(i, "/debug/pprof/heap?gc=1&debug=1")
	m := heapAllocRE.FindStringSubmatch(body)
	if m == nil {
		c.b.Fatalf("%s: no HeapAlloc in the heap profile", c.nodes[i].name)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

type stored struct{ msgs, bytes uint64 }

func (s stored) perMsg() float64 { return float64(s.bytes) / float64(max(1, s.msgs)) }

// streamBytes sums ns's history streams' messages and bytes (one replica).
func streamBytes(b *testing.B, ns *natsstore.Store) stored {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s stored
	for _, name := range ns.StreamNames() {
		st, err := ns.JetStream().Stream(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		s.msgs += info.State.Msgs
		s.bytes += info.State.Bytes
	}
	return s
}

// streamLeaders counts ns's history stream leaders per server.
func streamLeaders(b *testing.B, ns *natsstore.Store) map[string]int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]int{}
	for _, name := range ns.StreamNames() {
		st, err := ns.JetStream().Stream(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		var info *jetstream.StreamInfo
		if info, err = st.Info(ctx); err == nil && info.Cluster != nil {
			out[info.Cluster.Leader]++
		}
	}
	return out
}

// openReaderTB opens a store connection of this process's own (reads,
// stream info, the owners bucket).
func openReaderTB(b *testing.B, urls string) *natsstore.Store {
	b.Helper()
	return openStoreRetry(b, natsstore.Options{URL: urls, Replicas: 3, Timeout: 2 * time.Second})
}

// openRawURLs opens the "raw" store (streams configured as the history
// streams, followed by no node) on urls.
func openRawURLs(b *testing.B, urls string) *natsstore.Store {
	b.Helper()
	return openStoreRetry(b, natsstore.Options{URL: urls, Name: "raw", Replicas: 3, Timeout: 2 * time.Second})
}

// openStoreRetry opens a store, retrying for up to a minute while the
// servers elect their stream leaders.
func openStoreRetry(b *testing.B, opts natsstore.Options) *natsstore.Store {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		ns, err := natsstore.Open(ctx, opts)
		if err == nil {
			b.Cleanup(func() { ns.Close() })
			return ns
		}
		if ctx.Err() != nil {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func fmtRates(r map[string]float64) string {
	var names []string
	for n := range r {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f", n, r[n]*1e3))
	}
	return strings.Join(parts, ", ")
}

func fmtIO(p costPhase, names []string) string {
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f", n, float64(p.io[n])/float64(p.env)))
	}
	return strings.Join(parts, ", ")
}

// BenchmarkResidentScan measures, in one process on the in-memory store,
// what a node pays per resident OPEN session and per release scan: the
// time of one runtime.Release (the scan of every resident session the
// ownership loop runs after a lost partition and every 10 s, holding the runtime's session map
// lock, which every Send's lookup also takes) divided by the sessions,
// and the live heap per session (each started and given one Proposal;
// runtime.ReadMemStats after a forced collection). Sessions:
// BENCH_RESIDENT (100,000).
//
//	go test -run '^$' -bench BenchmarkResidentScan -benchtime 20x ./internal/cluster/
func BenchmarkResidentScan(b *testing.B) {
	sessions := envInt("BENCH_RESIDENT", 100_000)
	ctx := context.Background()
	rt := runtime.New(memstore.New(), builtin.Modes(), policy.DefaultOnly{}, runtime.Options{})
	if err := rt.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	var ms0, ms1 goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&ms0)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < sessions; i = int(next.Add(1) - 1) {
				sid := newSID()
				if a := rt.Send(ctx, initiator(i/100), startEnv(sid, "m0", 3_600_000)); !a.GetOk() {
					b.Errorf("start: %s", ackString(a))
					return
				}
				if a := rt.Send(ctx, aliceID, proposalEnv(sid, "p1")); !a.GetOk() {
					b.Errorf("proposal: %s", ackString(a))
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	goruntime.GC()
	goruntime.ReadMemStats(&ms1)
	// The scan's CPU time is this thread's (RUSAGE_THREAD), so that other
	// jobs on the machine lengthen its wall time, not the figure.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	threadCPU := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(1, &ru); err != nil { // RUSAGE_THREAD
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ResetTimer()
	t0, c0 := time.Now(), threadCPU()
	for n := 0; n < b.N; n++ {
		if held := rt.Release(); held != sessions {
			b.Fatalf("%d sessions resident, want %d", held, sessions)
		}
	}
	el, cpu := time.Since(t0), threadCPU()-c0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(sessions), "scan_cpu_ns/session")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/1000, "scan_cpu_ms")
	b.ReportMetric(float64(el.Microseconds())/float64(b.N)/1000, "scan_wall_ms")
	b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc)/float64(sessions), "heap_B/session")
}

// rawPublishIn is rawPublish with each publisher's subject a session id
// for which keep is true.
func rawPublishIn(b *testing.B, raw *natsstore.Store, m *jetstream.RawStreamMsg, sessions, perSession int, keep func(string) bool) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	js := raw.JetStream()
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("raw-%d-%s", i, newSID())
			for !keep(name) {
				name = fmt.Sprintf("raw-%d-%s", i, newSID())
			}
			subj := raw.Subject(name)
			var last uint64
			for k := 0; k < perSession; k++ {
				msg := nats.NewMsg(subj)
				for _, h := range []string{natsstore.HeaderAppend, natsstore.HeaderSeq, natsstore.HeaderCount} {
					msg.Header.Set(h, m.Header.Get(h))
				}
				msg.Data = m.Data
				for {
					ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last))
					if err == nil {
						last = ack.Sequence
						break
					}
					// A clustered stream may refuse an expectation while
					// another subject's proposal is in flight ("wrong last
					// sequence", err_code 10164): publish again, after
					// checking that the message was not stored.
					if !strings.Contains(err.Error(), "wrong last sequence") {
						b.Errorf("raw publish: %v", err)
						return
					}
					refused.Add(1)
					if st, serr := js.Stream(ctx, raw.StreamNames()[raw.PartitionOf(name)]); serr == nil {
						if sm, gerr := st.GetLastMsgForSubject(ctx, subj); gerr == nil && sm.Sequence > last {
							last = sm.Sequence
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	if n := refused.Load(); n > 0 {
		b.Logf("raw: %d publishes refused (wrong last sequence) and sent again", n)
	}
}
