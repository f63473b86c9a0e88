package cluster_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
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

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// A randomized nemesis (issues 30 and 32) over separate OS processes:
// three nats-server processes (JetStream, R3, sync_interval always) and
// three macpd processes (MACP_STORE=nats, partitioned ownership), each
// macpd reaching NATS only through TCP proxies run by the test, so that
// the test can cut it off from NATS. The gRPC address of a node is not
// proxied.
//
// A schedule drawn from a seed (MACP_NEMESIS_SEED, else random; always
// logged) applies, for MACP_NEMESIS_DURATION (60 s by default, the CI
// configuration), overlapping faults under continuous load:
//   - kill: SIGKILL a macpd process, preferably the current owner (the
//     holder in the <name>_owners bucket) of the most active sessions, and
//     start it again after a while;
//   - pause: SIGSTOP a macpd process, SIGCONT it after a while (its leases
//     lapse meanwhile; when it wakes it still believes it owns them);
//   - partition: for a while, either close a macpd process's connections
//     to NATS and refuse or black-hole its new ones, or stall them (bytes
//     held, not lost, both ways: the process does not notice) and
//     black-hole new ones; then heal;
//   - kill-nats: SIGKILL one nats-server process and start it again (one
//     at a time: the streams keep a quorum).
//
// At most two macpd processes are faulted at once. The schedule (times,
// kinds, targets, hold times) depends only on the seed; which node owns
// which sessions, and so the target of a kill that prefers the owner,
// depends on timing, so a replay of a seed is as close as possible, not
// exact. Every fault is logged as "nemesis: +12.3s kill macpd1 (owner of
// 4 sessions)"; a failed run logs the command that replays its seed.
//
// Load: several Decision sessions at a time, new ones started during the
// whole run (so fresh sessions' ownership moves too). In each, alice and
// bob send Proposals through random nodes, resending the same message_id
// to the next node until the answer is definite, a few of them once only
// with a deadline of 5-100 ms (without a definite answer, their outcome
// stays unknown); then one
// Commitment, or two raced through different nodes, sometimes while the
// Proposals still flow. Each client operation is recorded with its call
// and return times; one left without a definite answer is recorded with
// an unknown outcome and an infinite return time (porcupine may place it
// anywhere after its call, with or without effect).
//
// Checked once every fault is healed and every session ended, for every
// session: its stored history has sequence numbers 1..N and no message_id
// twice; every acknowledged envelope is in it; and the client operations
// plus a final read of the stored history (the set of message ids, and
// whether a Commitment resolved it) are linearizable against
// nemesisModel (porcupine). A failure writes porcupine's visualization to
// a file and logs its path.
//
// MACP_NEMESIS_DURATION=30m runs the long configuration (make nemesis
// DURATION=30m).
func TestNemesis(t *testing.T) {
	if testing.Short() {
		t.Skip("kills, pauses and partitions macpd processes under load: make test-all")
	}
	if goruntime.GOOS == "windows" {
		t.Fatal("needs POSIX processes, SIGKILL and SIGSTOP")
	}
	seed, dur := nemesisConfig(t)
	t.Logf("nemesis: seed %d duration %v", seed, dur)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nemesis: replay with: MACP_NEMESIS_SEED=%d MACP_NEMESIS_DURATION=%v go test -count=1 -run 'TestNemesis$' -v ./internal/cluster/", seed, dur)
		}
	})
	wall := time.Now()
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973))
	plan := planFaults(rand.New(rand.NewPCG(rng.Uint64(), 1)), dur)
	loadSeed := rng.Uint64()

	bins := buildBinaries(t)
	nc := startNATSProcs(t, bins.nats, 3)
	nodes := make([]*macpdProc, 3)
	proxies := make([][]*natsProxy, 3)
	for i := range nodes {
		var urls []string
		for j := range nc.ports {
			p := startNATSProxy(t, fmt.Sprintf("127.0.0.1:%d", nc.ports[j]))
			proxies[i] = append(proxies[i], p)
			urls = append(urls, "nats://"+p.addr())
		}
		nodes[i] = &macpdProc{t: t, bin: bins.macpd, natsURLs: strings.Join(urls, ","), name: fmt.Sprintf("macpd%d", i)}
		nodes[i].start()
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	cl := &procClients{nodes: nodes, conns: map[string]*grpc.ClientConn{}}
	defer cl.close()
	ns := openReader(t, nc.urls())
	nem := &nemesis{t: t, nodes: nodes, proxies: proxies, nc: nc, ns: ns,
		busy: make([]bool, len(nodes)), active: map[string]bool{}, counts: map[string]int{}, stop: make(chan struct{})}
	load := &nemLoad{t: t, nem: nem, cl: cl, stop: make(chan struct{})}
	t.Logf("nemesis: cluster up in %v; %d faults planned", time.Since(wall).Round(100*time.Millisecond), len(plan))

	// The load starts first, then the faults, for dur.
	var slots sync.WaitGroup
	lrng := rand.New(rand.NewPCG(loadSeed, 2))
	for i := range nemesisSlots {
		srng := rand.New(rand.NewPCG(lrng.Uint64(), uint64(i)))
		slots.Add(1)
		go func() {
			defer slots.Done()
			load.slot(srng)
		}()
	}
	time.Sleep(time.Second)
	nem.start = time.Now()
	var faults sync.WaitGroup
	faults.Add(1)
	go func() { defer faults.Done(); nem.watchdog() }()
	var applied sync.WaitGroup
	for _, f := range plan {
		applied.Add(1)
		go func() {
			defer applied.Done()
			nem.run(f)
		}()
	}
	// Guards against goroutines logging after the test ended when it
	// fails early.
	var stopLoad sync.Once
	t.Cleanup(func() {
		nem.halt()
		applied.Wait()
		faults.Wait()
		stopLoad.Do(func() { close(load.stop) })
		slots.Wait()
	})
	applied.Wait() // every fault applied and healed
	t.Logf("nemesis: +%.1fs every fault healed; ending the sessions", time.Since(nem.start).Seconds())
	stopLoad.Do(func() { close(load.stop) })
	slots.Wait()
	nem.halt()
	faults.Wait()

	// Checks (also after an earlier failure: what was lost is reported).
	readCall := time.Now().UnixNano()
	load.mu.Lock()
	ops := slices.Clone(load.ops)
	sids := slices.Clone(load.sessions)
	load.mu.Unlock()
	acked := map[string][]string{} // session -> acknowledged message ids
	unknown := 0
	for _, op := range ops {
		in, out := op.Input.(nemInput), op.Output.(nemOutput)
		switch {
		case out.unknown:
			unknown++
		case out.accepted:
			acked[in.sid] = append(acked[in.sid], in.msgID)
		}
	}
	var lost, dups, gaps, records, ackedN int
	var problems []string
	for _, sid := range sids {
		recs := history(t, ns, sid)
		records += len(recs)
		seen := map[string]bool{}
		var stored []string
		resolved := false
		for i, r := range recs {
			if r.Seq != uint64(i+1) {
				gaps++
				problems = append(problems, fmt.Sprintf("%s: record %d has seq %d", sid, i+1, r.Seq))
			}
			if r.Envelope == nil {
				continue
			}
			mid := r.Envelope.MessageId
			if seen[mid] {
				dups++
				problems = append(problems, fmt.Sprintf("%s: message %s stored twice", sid, mid))
				continue
			}
			seen[mid] = true
			if mid != "m0" {
				stored = append(stored, mid)
			}
			resolved = resolved || r.Envelope.MessageType == "Commitment"
		}
		for _, id := range acked[sid] {
			ackedN++
			if !seen[id] {
				lost++
				problems = append(problems, fmt.Sprintf("%s: acknowledged %s is not in the history", sid, id))
			}
		}
		slices.Sort(stored)
		ops = append(ops, porcupine.Operation{ClientId: nemReadClient, Input: nemInput{sid: sid, read: true},
			Output: nemOutput{ids: strings.Join(stored, ","), resolved: resolved}, Call: readCall, Return: time.Now().UnixNano()})
	}
	for i, p := range problems {
		if i == 20 {
			t.Errorf("... and %d more", len(problems)-20)
			break
		}
		t.Error(p)
	}
	res, info := porcupine.CheckOperationsVerbose(nemesisModel, ops, 5*time.Minute)
	if res != porcupine.Ok {
		f, err := os.CreateTemp("", "macpd-nemesis-*.html")
		if err == nil {
			err = porcupine.Visualize(nemesisModel, info, f)
			_ = f.Close()
		}
		if err != nil {
			t.Errorf("writing the visualization: %v", err)
		} else {
			t.Errorf("porcupine visualization: %s", f.Name())
		}
		t.Errorf("the history of %d operations over %d sessions is not linearizable (%v)", len(ops), len(sids), res)
	}
	nem.mu.Lock()
	var kinds []string
	for _, k := range faultNames {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, nem.counts[k]))
	}
	summary := fmt.Sprintf("seed %d, duration %v, faults: %s, skipped %d, restarts after the store failed closed %d; "+
		"%d sessions, %d records, %d operations (%d sent once, %d unknown), %d envelopes acknowledged, %d lost, %d duplicates, %d sequence gaps; linearizable: %v; wall time %v",
		seed, dur, strings.Join(kinds, ", "), nem.skipped, nem.failClosed,
		len(sids), records, len(ops)-len(sids), load.oneShots.Load(), unknown, ackedN, lost, dups, gaps, res == porcupine.Ok, time.Since(wall).Round(time.Second))
	nem.mu.Unlock()
	t.Logf("nemesis: summary: %s", summary)
	if lost != 0 || dups != 0 || gaps != 0 {
		t.Errorf("%d acknowledged envelopes lost, %d stored twice, %d sequence numbers out of place", lost, dups, gaps)
	}
}

// nemesisSlots is how many sessions are under load at a time.
const nemesisSlots = 6

// nemesisConfig reads MACP_NEMESIS_SEED (else a random seed) and
// MACP_NEMESIS_DURATION (else 60 s).
func nemesisConfig(t *testing.T) (uint64, time.Duration) {
	seed := rand.Uint64() >> 1
	if v := os.Getenv("MACP_NEMESIS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("MACP_NEMESIS_SEED=%q: %v", v, err)
		}
		seed = s
	}
	dur := 60 * time.Second
	if v := os.Getenv("MACP_NEMESIS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("MACP_NEMESIS_DURATION=%q: a Go duration such as 5m", v)
		}
		dur = d
	}
	return seed, dur
}

// ---- the schedule ---------------------------------------------------------

type faultKind int

const (
	faultKill faultKind = iota
	faultPause
	faultPartition
	faultKillNATS
)

var faultNames = []string{"kill", "pause", "partition", "kill-nats"}

func (k faultKind) String() string { return faultNames[k] }

// fault is one planned fault: at its offset from the start, on target (a
// macpd node, or a nats-server for kill-nats), held for hold.
type fault struct {
	at, hold time.Duration
	kind     faultKind
	target   int
	owner    bool // kill: the owner of the most active sessions instead, if any
	mode     int  // partition: proxyBlackHole, proxyRefuse or proxyStall
}

// planFaults draws the schedule: a fault every 0.3-3 s until dur, its
// kind by weight (kill 3, pause 2, partition 3, kill-nats 1), its target
// among those free for its whole planned time (including a margin for a
// restart), at most two macpd nodes faulted at once and one nats-server.
func planFaults(rng *rand.Rand, dur time.Duration) []fault {
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	type span struct {
		from, to time.Duration
		target   int // 0-2 macpd, 3-5 nats-server
	}
	var spans []span
	var out []fault
	for at := time.Second; ; {
		at += between(300*time.Millisecond, 3*time.Second)
		if at >= dur {
			return out
		}
		f := fault{at: at}
		var margin time.Duration
		switch w := rng.IntN(9); {
		case w < 3:
			f.kind, f.hold, f.owner, margin = faultKill, between(100*time.Millisecond, 3*time.Second), rng.IntN(4) != 0, 4*time.Second
		case w < 5:
			f.kind, f.hold, margin = faultPause, between(500*time.Millisecond, 8*time.Second), time.Second
		case w < 8:
			f.kind, f.hold, f.mode, margin = faultPartition, between(500*time.Millisecond, 10*time.Second), proxyBlackHole+rng.IntN(3), time.Second
		default:
			f.kind, f.hold, margin = faultKillNATS, between(500*time.Millisecond, 5*time.Second), 15*time.Second
		}
		end := at + f.hold + margin
		busy := map[int]bool{}
		macpd, natsDown := 0, false
		for _, s := range spans {
			if s.from < end && at < s.to {
				busy[s.target] = true
				if s.target < 3 {
					macpd++
				} else {
					natsDown = true
				}
			}
		}
		base := 0
		if f.kind == faultKillNATS {
			if natsDown {
				continue
			}
			base = 3
		} else if macpd >= 2 {
			continue
		}
		var free []int
		for i := range 3 {
			if !busy[base+i] {
				free = append(free, i)
			}
		}
		if len(free) == 0 {
			continue
		}
		f.target = free[rng.IntN(len(free))]
		spans = append(spans, span{at, end, base + f.target})
		out = append(out, f)
	}
}

// ---- applying it ----------------------------------------------------------

type nemesis struct {
	t       *testing.T
	nodes   []*macpdProc
	proxies [][]*natsProxy // by macpd node, by nats-server
	nc      *natsProcs
	ns      *natsstore.Store
	start   time.Time
	stop    chan struct{}
	halted  sync.Once

	mu         sync.Mutex
	busy       []bool // macpd nodes under a fault
	natsBusy   bool
	active     map[string]bool // sessions under load
	counts     map[string]int  // faults applied, by kind
	skipped    int
	failClosed int
}

func (n *nemesis) logf(format string, args ...any) {
	n.t.Logf("nemesis: +%.1fs "+format, append([]any{time.Since(n.start).Seconds()}, args...)...)
}

// halt ends the holds of faults in progress (they heal at once), the
// faults not started yet and the watchdog.
func (n *nemesis) halt() { n.halted.Do(func() { close(n.stop) }) }

// sleep waits d, or less if halted; false if halted.
func (n *nemesis) sleep(d time.Duration) bool {
	select {
	case <-n.stop:
		return false
	case <-time.After(d):
		return true
	}
}

// claim marks macpd node i (or, for kill-nats, the nats-servers) busy;
// false if it already is.
func (n *nemesis) claim(kind faultKind, i int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if kind == faultKillNATS {
		if n.natsBusy {
			return false
		}
		n.natsBusy = true
		return true
	}
	if n.busy[i] {
		return false
	}
	n.busy[i] = true
	return true
}

func (n *nemesis) release(kind faultKind, i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if kind == faultKillNATS {
		n.natsBusy = false
	} else {
		n.busy[i] = false
	}
}

var ownershipRE = regexp.MustCompile(`msg="partitioned ownership" node=(\S+)`)

// nodeID is the ownership id of macpd node i's current process ("" if
// down or not known yet).
func (n *nemesis) nodeID(i int) string {
	m := n.nodes[i]
	m.mu.Lock()
	p := m.p
	m.mu.Unlock()
	if p == nil {
		return ""
	}
	if mt := ownershipRE.FindStringSubmatch(p.out.String()); mt != nil {
		return mt[1]
	}
	return ""
}

// owned returns, by macpd node, the active sessions whose partition the
// owners bucket says it holds (nil if the bucket cannot be read now).
func (n *nemesis) owned() [][]string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := n.ns.JetStream().KeyValue(ctx, n.ns.Name()+"_owners")
	if err != nil {
		return nil
	}
	holder := map[int]string{}
	for p := range n.ns.Partitions() {
		if e, err := kv.Get(ctx, "p."+strconv.Itoa(p)); err == nil {
			holder[p] = string(e.Value())
		}
	}
	ids := make([]string, len(n.nodes))
	for i := range n.nodes {
		ids[i] = n.nodeID(i)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([][]string, len(n.nodes))
	for sid := range n.active {
		h := holder[n.ns.PartitionOf(sid)]
		for i, id := range ids {
			if id != "" && id == h {
				out[i] = append(out[i], sid)
			}
		}
	}
	return out
}

// run applies f at its planned time and heals it after its hold.
func (n *nemesis) run(f fault) {
	if !n.sleep(time.Until(n.start.Add(f.at))) {
		return
	}
	owned := n.owned()
	target := f.target
	if f.kind == faultKill && f.owner && owned != nil {
		// The owner of the most active sessions among the nodes free now.
		best := -1
		n.mu.Lock()
		for i := range n.nodes {
			if !n.busy[i] && len(owned[i]) > 0 && (best < 0 || len(owned[i]) > len(owned[best])) {
				best = i
			}
		}
		n.mu.Unlock()
		if best >= 0 {
			target = best
		}
	}
	name := fmt.Sprintf("macpd%d", target)
	if f.kind == faultKillNATS {
		name = fmt.Sprintf("nats-server n%d", target)
	}
	if !n.claim(f.kind, target) {
		n.mu.Lock()
		n.skipped++
		n.mu.Unlock()
		n.logf("skip %s %s (still under an earlier fault)", f.kind, name)
		return
	}
	defer n.release(f.kind, target)
	n.mu.Lock()
	n.counts[f.kind.String()]++
	n.mu.Unlock()
	what := ""
	if f.kind != faultKillNATS && owned != nil {
		what = fmt.Sprintf(" (owner of %d sessions)", len(owned[target]))
	}
	switch f.kind {
	case faultKill:
		n.logf("kill %s%s, down for %v", name, what, f.hold.Round(100*time.Millisecond))
		n.nodes[target].kill()
		n.sleep(f.hold)
		t0 := time.Now()
		n.nodes[target].start()
		n.logf("restarted %s (serving after %v)", name, time.Since(t0).Round(100*time.Millisecond))
	case faultPause:
		n.logf("pause %s%s for %v", name, what, f.hold.Round(100*time.Millisecond))
		p := n.proc(target)
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		n.sleep(f.hold)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		n.logf("resumed %s", name)
	case faultPartition:
		n.logf("partition %s%s from NATS for %v (%s)", name, what, f.hold.Round(100*time.Millisecond), partitionModes[f.mode])
		for _, p := range n.proxies[target] {
			p.cut(f.mode)
		}
		n.sleep(f.hold)
		for _, p := range n.proxies[target] {
			p.heal()
		}
		n.logf("healed %s", name)
	case faultKillNATS:
		n.logf("kill %s, down for %v", name, f.hold.Round(100*time.Millisecond))
		n.nc.kill(target)
		n.sleep(f.hold)
		t0 := time.Now()
		n.nc.start(target)
		n.nc.waitReady(target)
		n.logf("restarted %s (ready after %v)", name, time.Since(t0).Round(100*time.Millisecond))
	}
}

func (n *nemesis) proc(i int) *proc {
	m := n.nodes[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p
}

// watchdog checks every 500 ms that no macpd process exited on its own
// (a crash fails the test; the node is started again) and restarts a
// node whose store failed closed (store.ErrFailed, "restart required":
// docs/cluster.md "Failure model"), as its supervisor would.
func (n *nemesis) watchdog() {
	for n.sleep(500 * time.Millisecond) {
		for i, m := range n.nodes {
			if !n.claim(faultKill, i) {
				continue
			}
			p := n.proc(i)
			switch {
			case p == nil:
			case closed(p.exited):
				n.t.Errorf("nemesis: macpd%d exited on its own:\n%s", i, tail(p.out.String(), 4000))
				m.kill()
				m.start()
			case strings.Contains(p.out.String(), "restart required"):
				n.mu.Lock()
				n.failClosed++
				n.mu.Unlock()
				n.logf("restart macpd%d: its store failed closed:\n%s", i, tail(p.out.String(), 2000))
				m.kill()
				m.start()
			}
			n.release(faultKill, i)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// ---- the proxy ------------------------------------------------------------

// natsProxy forwards TCP connections from a macpd node to one
// nats-server. A partition (cut) either closes the connections it carries
// and, until heal, refuses new ones (closed at once) or black-holes them
// (accepted, never answered, closed at heal); or stalls them: bytes stop
// moving both ways, none lost, and move again at heal, while new
// connections are black-holed.
type natsProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  int                   // proxyOpen or a partitionMode
	gate  chan struct{}         // while stalled: closed at heal
	conns map[net.Conn]struct{} // both ends of the connections carried
	holes map[net.Conn]struct{} // black-holed
}

// Partition modes.
const (
	proxyOpen = iota
	proxyBlackHole
	proxyRefuse
	proxyStall
)

var partitionModes = map[int]string{proxyBlackHole: "black-holing new connections", proxyRefuse: "refusing new connections",
	proxyStall: "stalling its connections, black-holing new ones"}

func startNATSProxy(t *testing.T, target string) *natsProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &natsProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, holes: map[net.Conn]struct{}{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		p.heal()
		p.closeAll()
	})
	return p
}

func (p *natsProxy) addr() string { return p.ln.Addr().String() }

// admit records c as carried (or black-holed); false: refused.
func (p *natsProxy) admit(c net.Conn, hole *bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.mode {
	case proxyRefuse:
		return false
	case proxyBlackHole, proxyStall:
		p.holes[c] = struct{}{}
		*hole = true
		return true
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *natsProxy) handle(c net.Conn) {
	hole := false
	if !p.admit(c, &hole) {
		_ = c.Close()
		return
	}
	if hole {
		return // held until heal closes it
	}
	s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	if _, ok := p.conns[c]; !ok { // cut meanwhile
		p.mu.Unlock()
		_ = s.Close()
		return
	}
	p.conns[s] = struct{}{}
	p.mu.Unlock()
	// A cut closes c and s; each copy then ends the other.
	go func() {
		p.pipe(s, c)
		p.drop(s)
		p.drop(c)
	}()
	p.pipe(c, s)
	p.drop(c)
	p.drop(s)
}

// pipe copies src to dst, holding each chunk read while stalled.
func (p *natsProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *natsProxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *natsProxy) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// cut partitions the node from this server in mode (a partitionMode).
func (p *natsProxy) cut(mode int) {
	p.mu.Lock()
	p.mode = mode
	if mode == proxyStall {
		p.gate = make(chan struct{})
	}
	p.mu.Unlock()
	if mode != proxyStall {
		p.closeAll()
	}
}

// heal lets bytes and new connections through again and closes the
// black-holed connections (their clients connect again).
func (p *natsProxy) heal() {
	p.mu.Lock()
	p.mode = proxyOpen
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
	holes := p.holes
	p.holes = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range holes {
		_ = c.Close()
	}
}

// ---- the load -------------------------------------------------------------

// nemInput is one recorded operation on a session: a Proposal or a
// Commitment identified by its message_id, or (read) the final read of
// the stored history.
type nemInput struct {
	sid, msgID string
	commit     bool
	read       bool
}

// nemOutput is its outcome: accepted or refused (SESSION_NOT_OPEN), or
// unknown (no definite answer: it may or may not have taken effect); for
// the read, the stored message ids other than the SessionStart's (sorted,
// joined) and whether a Commitment is stored.
type nemOutput struct {
	accepted bool
	unknown  bool
	ids      string
	resolved bool
}

// Porcupine client ids within a session (its partition), for the
// visualization.
const (
	nemAlice = iota
	nemBob
	nemCommit0
	nemCommit1
	nemReadClient
)

// nemesisModel is sessionModel with unknown outcomes and the final read:
// an operation with an unknown outcome takes effect when porcupine
// linearizes it before the read (it may also place it after the read,
// without effect: its return time is infinite); the read must see
// exactly the model's set of message ids and resolution.
var nemesisModel = porcupine.Model{
	Partition: bySession(func(in any) string { return in.(nemInput).sid }),
	Init:      func() any { return sessionState{ids: "m1"} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(sessionState), input.(nemInput), output.(nemOutput)
		switch {
		case in.read:
			return s.ids == out.ids && s.resolved == out.resolved, s
		case s.has(in.msgID):
			return out.accepted || out.unknown, s
		case s.resolved:
			return !out.accepted, s
		case !out.accepted && !out.unknown:
			return false, s
		}
		n := s.with(in.msgID)
		n.resolved = in.commit
		return true, n
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(nemInput), output.(nemOutput)
		switch {
		case in.read:
			return fmt.Sprintf("read -> [%s] resolved=%v", out.ids, out.resolved)
		case out.unknown:
			return fmt.Sprintf("%s commit=%v -> unknown", in.msgID, in.commit)
		}
		return fmt.Sprintf("%s commit=%v -> %v", in.msgID, in.commit, out.accepted)
	},
	DescribeState: func(state any) string {
		s := state.(sessionState)
		return fmt.Sprintf("[%s] resolved=%v", s.ids, s.resolved)
	},
}

type nemLoad struct {
	t    *testing.T
	nem  *nemesis
	cl   *procClients
	stop chan struct{} // no new sessions, no new Proposals

	mu       sync.Mutex
	ops      []porcupine.Operation
	sessions []string
	oneShots atomic.Int64
}

// slot runs sessions one after another until stop.
func (l *nemLoad) slot(rng *rand.Rand) {
	for !closed(l.stop) {
		l.session(rng)
	}
}

// session starts a session, runs alice's and bob's Proposals and ends it
// with one Commitment or two raced ones, sometimes while the Proposals
// still flow.
func (l *nemLoad) session(rng *rand.Rand) {
	sid := seededSID(rng)
	if !l.definite(rng, initID.Sender, startEnv(sid, "m0", 600_000)) {
		l.t.Errorf("%s: SessionStart refused", sid)
		return
	}
	if !l.definite(rng, aliceID.Sender, proposalEnv(sid, "m1")) {
		l.t.Errorf("%s: first Proposal refused", sid)
		return
	}
	l.mu.Lock()
	l.sessions = append(l.sessions, sid)
	l.mu.Unlock()
	l.nem.mu.Lock()
	l.nem.active[sid] = true
	l.nem.mu.Unlock()
	defer func() {
		l.nem.mu.Lock()
		delete(l.nem.active, sid)
		l.nem.mu.Unlock()
	}()
	var wg sync.WaitGroup
	for ci, who := range []string{aliceID.Sender, bobID.Sender} {
		n := 3 + rng.IntN(40)
		crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(ci)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k <= n && !closed(l.stop); k++ {
				in := nemInput{sid: sid, msgID: fmt.Sprintf("%s-%d", who[len("agent://"):], k)}
				out := l.do(crng, ci, who, in, crng.IntN(25) == 0)
				if !out.accepted && !out.unknown {
					return // the session was resolved
				}
			}
		}()
	}
	early := rng.IntN(4) == 0
	race := rng.IntN(2) == 0
	if early {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	} else {
		wg.Wait()
	}
	var commits sync.WaitGroup
	for c := range 1 + btoi(race) {
		crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(10+c)))
		commits.Add(1)
		go func() {
			defer commits.Done()
			l.do(crng, nemCommit0+c, initID.Sender, nemInput{sid: sid, msgID: fmt.Sprintf("c%d", c), commit: true}, false)
		}()
	}
	commits.Wait()
	wg.Wait()
}

// seededSID is a random UUID drawn from rng: a replay of a seed uses the
// same session ids, so the same partitions.
func seededSID(rng *rand.Rand) string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rng.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rng.Uint64())
	id, err := uuid.NewRandomFromReader(bytes.NewReader(b[:]))
	if err != nil {
		panic(err)
	}
	return id.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// do sends in's envelope as who through a random node and records the
// operation. Unless oneShot, a failure that leaves the outcome open (node
// down, transport error or deadline, INTERNAL_ERROR) is followed by the
// same envelope (same message_id) to the next node until the answer is
// definite. oneShot sends once with a deadline of 5-100 ms and records
// the outcome unknown if it is not definite.
func (l *nemLoad) do(rng *rand.Rand, client int, who string, in nemInput, oneShot bool) nemOutput {
	var env *macpv1.Envelope
	if in.commit {
		env = commitEnv(in.sid, in.msgID, "commit-"+in.msgID)
	} else {
		env = proposalEnv(in.sid, in.msgID)
	}
	if oneShot {
		l.oneShots.Add(1)
	}
	call := time.Now().UnixNano()
	out, ok := l.send(rng, who, env, oneShot)
	ret := time.Now().UnixNano()
	if !ok {
		out = nemOutput{unknown: true}
		ret = math.MaxInt64
	}
	l.mu.Lock()
	l.ops = append(l.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	l.mu.Unlock()
	return out
}

// definite sends env (not recorded: SessionStart and the first Proposal)
// until the answer is definite; true if accepted.
func (l *nemLoad) definite(rng *rand.Rand, who string, env *macpv1.Envelope) bool {
	out, ok := l.send(rng, who, env, false)
	return ok && out.accepted
}

// send returns the definite outcome, or false if there is none: oneShot
// and not definite at once, or no definite answer in 90 s (a test
// failure), or an answer the model has no place for (a test failure).
func (l *nemLoad) send(rng *rand.Rand, who string, env *macpv1.Envelope, oneShot bool) (nemOutput, bool) {
	deadline := time.Now().Add(90 * time.Second)
	first := rng.IntN(3)
	for attempt := first; ; attempt++ {
		if time.Now().After(deadline) {
			l.t.Errorf("%s %s: no definite answer in 90 s", env.SessionId, env.MessageId)
			return nemOutput{}, false
		}
		rpc, ctx := l.cl.client(context.Background(), attempt, who)
		if rpc == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		timeout := 5 * time.Second
		if oneShot {
			timeout = time.Duration(5+rng.IntN(95)) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := rpc.Send(ctx, &macpv1.SendRequest{Envelope: proto.Clone(env).(*macpv1.Envelope)})
		cancel()
		ack := resp.GetAck()
		switch {
		case err != nil, ack == nil, !ack.Ok && ack.GetError().GetCode() == string(coord.CodeInternalError):
			if oneShot {
				return nemOutput{}, false
			}
			time.Sleep(50 * time.Millisecond)
			continue
		case ack.Ok:
			return nemOutput{accepted: true}, true
		case ack.GetError().GetCode() == string(coord.CodeSessionNotOpen):
			return nemOutput{}, true
		default:
			l.t.Errorf("%s %s: %s", env.SessionId, env.MessageId, ackString(ack))
			return nemOutput{}, false
		}
	}
}
