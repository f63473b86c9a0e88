package cluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cluster"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// waitBalanced waits until the nodes live hold every partition between
// them, each at least its fair share.
func (e *env) waitBalanced(t testing.TB, live []int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		total, fair := 0, true
		parts := 0
		for _, i := range live {
			own := e.node(i).Ownership()
			parts = own.Partitions()
			n := len(own.Owned())
			total += n
			fair = fair && n >= parts/len(live)
		}
		if fair && total == parts {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions not balanced over nodes %v: %d held", live, total)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// foWaitAdopted waits until no node is loading the sessions of partitions
// it took: the next kill then starts from a settled cluster, and (e) does
// not count replays left over from the previous restart's rebalancing.
func (e *env) foWaitAdopted(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		busy := false
		for i := range e.nodes {
			if a := e.node(i); a != nil && a.Ownership().Adopting() {
				busy = true
			}
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes still loading the sessions of partitions taken after 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownerOf is the node (of those up) that owns sid, or -1.
func (e *env) ownerOf(sid string) int {
	for i := range e.nodes {
		if a := e.node(i); a != nil && a.Ownership().Owns(sid) {
			return i
		}
	}
	return -1
}

// failoverKills is how many owners TestOwnershipMove kills: 3, or
// MACP_FAILOVER_KILLS (20 for the long configuration).
func failoverKills() int {
	if n, err := strconv.Atoi(os.Getenv("MACP_FAILOVER_KILLS")); err == nil && n > 0 {
		return n
	}
	if soak() {
		return 20
	}
	return 3
}

// ownershipFailover runs three nodes under load (one client per session,
// each envelope entering through the next node, so most are forwarded)
// and, kills times, kills the owner of some sessions (app.Kill: no
// drain, leases left to expire), measures the time from the kill to the
// next envelope of one of its sessions accepted through another node,
// restarts it and waits for the partitions to be balanced again. Then it
// checks every session's history: sequence numbers 1..N, every
// acknowledged envelope stored exactly once.
func ownershipFailover(t testing.TB, kills, sessions int) []time.Duration {
	t0 := time.Now()
	e := newEnv(t, 3, 3)
	e.waitBalanced(t, []int{0, 1, 2})
	t.Logf("cluster up and balanced in %v", time.Since(t0))
	// Each client moves to a new session every perSession envelopes, so
	// that no history grows long enough to make loading it (a replay on
	// the node that takes it) the figure.
	const perSession = 200
	type accepted struct {
		at    time.Time
		entry int
		sid   string
	}
	var mu sync.Mutex
	current := make([]string, sessions) // each client's session now
	var acks []accepted
	acked := map[string][]string{} // session -> acknowledged message ids
	// definite sends env through node first, then the next ones, until
	// the answer is definite; the node that accepted it, or -1 when
	// refused.
	definite := func(first int, who string, env func() *macpv1.Envelope) (int, bool) {
		for attempt := 0; ; attempt++ {
			n := (first + attempt) % 3
			a := e.send(n, coord.Identity{Sender: who}, env())
			if a.GetOk() {
				return n, true
			}
			if a != nil && a.GetError().GetCode() != "INTERNAL_ERROR" {
				t.Errorf("through node %d: %s", n, ackString(a))
				return -1, false
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for si := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sid string
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if k%perSession == 0 {
					// One initiator per client: an initiator may hold 100
					// OPEN sessions on a node, and a long loop starts more.
					next := newSID()
					if _, ok := definite(si+k, initiator(100+si).Sender, func() *macpv1.Envelope { return startEnv(next, "m0", 600_000) }); !ok {
						return
					}
					sid = next
					mu.Lock()
					current[si] = sid
					mu.Unlock()
				}
				id := fmt.Sprintf("p%d", k)
				n, ok := definite(si+k, aliceID.Sender, func() *macpv1.Envelope { return proposalEnv(sid, id) })
				if !ok {
					return
				}
				mu.Lock()
				acks = append(acks, accepted{time.Now(), n, sid})
				acked[sid] = append(acked[sid], id)
				mu.Unlock()
			}
		}()
	}
	for {
		mu.Lock()
		started := !slices.Contains(current, "")
		mu.Unlock()
		if started {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var times []time.Duration
	for kill := 0; kill < kills; kill++ {
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		now := slices.Clone(current)
		mu.Unlock()
		victim := e.ownerOf(now[kill%sessions])
		if victim < 0 {
			t.Fatalf("kill %d: no owner of session %s", kill, now[kill%sessions])
		}
		affected := map[string]bool{}
		for _, sid := range now {
			if e.ownerOf(sid) == victim {
				affected[sid] = true
			}
		}
		mu.Lock()
		from := len(acks)
		mu.Unlock()
		tk := time.Now()
		e.kill(victim)
		killed := time.Since(tk)
		var took time.Duration
		for took == 0 {
			if time.Since(tk) > 60*time.Second {
				t.Fatalf("kill %d: no envelope of the victim's sessions accepted for 60 s", kill)
			}
			time.Sleep(time.Millisecond)
			mu.Lock()
			for _, a := range acks[from:] {
				if affected[a.sid] && a.at.After(tk) && a.entry != victim && (took == 0 || a.at.Sub(tk) < took) {
					took = a.at.Sub(tk)
				}
			}
			mu.Unlock()
		}
		times = append(times, took)
		t.Logf("kill %d: node %d (owner of %d sessions, Kill took %v): next accepted after %v", kill, victim, len(affected), killed, took)
		t1 := time.Now()
		e.startNode(victim)
		t2 := time.Now()
		e.waitBalanced(t, []int{0, 1, 2})
		t3 := time.Now()
		e.foWaitAdopted(t)
		t.Logf("kill %d: restart %v, balanced %v later, sessions of the partitions taken loaded %v after that", kill, t2.Sub(t1), t3.Sub(t2), time.Since(t3))
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	ns := e.reader()
	total := 0
	for sid, ids := range acked {
		recs := history(t, ns, sid)
		seen := map[string]int{}
		for i, r := range recs {
			if r.Seq != uint64(i+1) {
				t.Fatalf("session %s: record %d has seq %d", sid, i, r.Seq)
			}
			if r.Envelope != nil && r.Envelope.MessageType == "Proposal" {
				seen[r.Envelope.MessageId]++
			}
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("session %s: %s stored %d times", sid, id, n)
			}
		}
		for _, id := range ids {
			if seen[id] != 1 {
				t.Errorf("session %s: acknowledged %s stored %d times", sid, id, seen[id])
			}
		}
		total += len(ids)
	}
	t.Logf("%d envelopes acknowledged over %d sessions, %d owner kills", total, len(acked), kills)
	return times
}

// TestOwnershipMove: owners killed under load; their sessions continue
// through the other nodes with nothing acknowledged lost or duplicated.
func TestOwnershipMove(t *testing.T) {
	if testOwnership() != config.OwnershipPartitioned {
		t.Skip("partitioned ownership only")
	}
	times := ownershipFailover(t, failoverKills(), 6)
	slices.Sort(times)
	t.Logf("failover: median %v, max %v over %d kills", times[len(times)/2], times[len(times)-1], len(times))
}

// BenchmarkFailover reports figure (e): the time from the kill of an owner
// to the next envelope of one of its sessions accepted through another
// node, median and max over MACP_FAILOVER_KILLS kills (default 3; 20 in
// the long configuration, MACP_CLUSTER_SOAK=1). docs/benchmarks.md.
//
//	MACP_FAILOVER_KILLS=20 go test -run '^$' -bench BenchmarkFailover -benchtime 1x ./internal/cluster/
func BenchmarkFailover(b *testing.B) {
	if testOwnership() != config.OwnershipPartitioned {
		b.Skip("partitioned ownership only")
	}
	for n := 0; n < b.N; n++ {
		times := ownershipFailover(b, failoverKills(), 6)
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "failover_median_ms")
		b.ReportMetric(float64(times[len(times)-1].Microseconds())/1000, "failover_max_ms")
		b.ReportMetric(float64(len(times)), "kills")
	}
}

// foNode is one node of the failover tests below: a runtime on its own
// store connection with partitioned ownership (tick 100 ms, lease lease,
// RevokeGone).
type foNode struct {
	ns   *natsstore.Store
	rt   *runtime.Runtime
	own  *cluster.Ownership
	node *cluster.Node
}

func foStartNode(t *testing.T, url string, parts int, lease time.Duration) *foNode {
	t.Helper()
	ctx := context.Background()
	ns, err := natsstore.Open(ctx, natsstore.Options{URL: url, Replicas: 1, Partitions: parts, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(ns, builtin.Modes(), policy.DefaultOnly{}, registry.Options{})
	if err := reg.Load(ctx); err != nil {
		t.Fatal(err)
	}
	own, err := cluster.NewOwnership(ctx, ns, cluster.OwnershipOptions{Tick: 100 * time.Millisecond, Lease: lease, RevokeGone: true})
	if err != nil {
		t.Fatal(err)
	}
	rt := runtime.New(ns, reg, reg, runtime.Options{Forwarder: own})
	rt.EnableSharedStore()
	after, err := ns.LastPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	node, err := cluster.Start(ctx, ns, rt, reg, after, nil, own)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Start(ctx, rt); err != nil {
		t.Fatal(err)
	}
	n := &foNode{ns: ns, rt: rt, own: own, node: node}
	t.Cleanup(n.stop)
	return n
}

func (n *foNode) stop() {
	n.own.Stop()
	n.node.Stop()
	n.rt.Close()
	_ = n.ns.Close()
}

// A node that holds partitions and dies (its NATS connection gone) loses
// them at once, not when its lease lapses; one that is connected but does
// not answer (paused, cut off from the other nodes) keeps them: calls
// forwarded to it wait, and no other node takes its partitions. The lease
// is an hour, so only the owner's death can move anything here.
func TestOwnershipGoneHolderRevoked(t *testing.T) {
	srv := natstest.Run(t)
	ctx := context.Background()
	// A silent holder: a membership and both partitions' keys, a listener
	// on its subject that never answers, no renewals.
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a0 := foStartNode(t, srv.ClientURL(), 2, time.Hour) // creates the streams and bucket
	a0.stop()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "macp_owners")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"p.0", "p.1"} { // a0's keys, deleted at its Stop
		if e, err := kv.Get(ctx, key); err == nil && e.Operation() == jetstream.KeyValuePut {
			t.Fatalf("%s still held by %s after a graceful stop", key, e.Value())
		}
	}
	const silent = "5ilent"
	if _, err := nc.SubscribeSync("macpd.own.fwd.macp." + silent); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"m." + silent, "p.0", "p.1"} {
		if _, err := kv.Put(ctx, key, []byte(silent)); err != nil {
			t.Fatal(err)
		}
	}
	a := foStartNode(t, srv.ClientURL(), 2, time.Hour)
	sid := newSID()
	res := make(chan *macpv1.Ack, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res <- a.rt.Send(cctx, initID, startEnv(sid, "m0", 600_000))
	}()
	// Probes (every 100 ms) are not answered, but something listens: the
	// holder may be alive, so the call waits and its partitions stay.
	time.Sleep(time.Second)
	select {
	case ack := <-res:
		t.Fatalf("a call forwarded to a connected holder was answered without it: %s", ackString(ack))
	default:
	}
	if got := a.own.Owned(); len(got) != 0 || a.own.Revoked() != 0 {
		t.Fatalf("partitions %v taken (revoked %d) from a holder that is still connected", got, a.own.Revoked())
	}
	nc.Close() // the holder dies
	var ack *macpv1.Ack
	select {
	case ack = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("a call waiting on a dead holder was not answered")
	}
	if ack.GetOk() || ack.GetError().GetCode() != "INTERNAL_ERROR" {
		t.Fatalf("call waiting on a dead holder: %s, want INTERNAL_ERROR (outcome unknown, resend)", ackString(ack))
	}
	if a := a.rt.Send(ctx, initID, startEnv(sid, "m0", 600_000)); !a.GetOk() {
		t.Fatalf("resend after the holder died: %s", ackString(a))
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(a.own.Owned()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the dead holder's partitions were not taken (held here: %v, revoked %d); its lease is an hour", a.own.Owned(), a.own.Revoked())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a.own.Revoked() != 1 {
		t.Fatalf("revoked %d nodes, want 1", a.own.Revoked())
	}
	out, _ := a.own.Forwarded()
	if b := a.rt.Send(ctx, aliceID, proposalEnv(sid, "p1")); !b.GetOk() {
		t.Fatalf("proposal on the partition taken: %s", ackString(b))
	}
	if o, _ := a.own.Forwarded(); o != out {
		t.Fatalf("a call on a partition now held here was forwarded")
	}
}
