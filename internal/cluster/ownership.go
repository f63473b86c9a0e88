package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// Partitioned ownership (MACP_CLUSTER_OWNERSHIP=partitioned;
// docs/cluster.md "Ownership").
//
// The shards are the history streams (natsstore partitions, fixed for a
// deployment). Each is leased to one node in the JetStream key-value
// bucket <name>_owners:
//
//   - key m.<node>: a node's membership, rewritten every Tick by the node
//     (a random id per process);
//   - key p.<i>: the holder of partition i, rewritten every Tick by its
//     holder with Update(expected revision).
//
// Every node watches the bucket and notes, on its own clock, when each
// key's revision last changed. A member whose key has not changed for
// Lease is dead. Partition i's owner should be live member i mod n
// (members sorted by id, so every node computes the same map): that node
// creates the key if it is absent or deleted, or takes it over with
// Update(last revision seen) when its holder has not rewritten it for
// Lease (one contender wins the compare-and-set); a holder whose partition
// should go to another live node deletes its key (expecting its
// revision), and the new node creates it at once (every node runs a step
// when it sees a key deleted). A node that stops gracefully deletes its
// keys at once; one that dies loses them when another node finds it gone
// (below), or after Lease. Nothing here is needed for safety: every
// append is fenced by the session's expected last subject sequence
// (natsstore), so two
// nodes that both believe they own a partition for a moment cannot both
// append after the same record.
//
// A node that takes a partition loads its OPEN sessions (runtime.Adopt
// via Inspect, arming their deadlines); the runtime evicts idle sessions
// of partitions it does not own (runtime.Release) at every tick. Calls on
// a session this node does not own are forwarded to the holder over NATS
// request/reply (Forward, subject macpd.own.fwd.<name>.<node>); the owner
// serves them as local calls (one hop: a forwarded call is never
// forwarded again). When no holder is known, the holder's lease is stale,
// or no node listens on its subject (it died), the call is served here.
//
// A dead holder is found before its lease lapses: its subject has no
// listener once its NATS connection is gone, so a forwarded request (or a
// probe sent every ProbeInterval while calls wait on it) is answered "no
// responders" at once. Such a node is gone: calls waiting on it are
// answered INTERNAL_ERROR (outcome unknown; resend), later calls are
// served here without a request, and once its membership has not been
// renewed for two Ticks and a second probe still finds no one, its keys
// are deleted (each expecting the revision last seen), so its partitions
// are taken at once instead of after Lease (revoke; RevokeGone, off by
// default). A node that is
// alive but does not answer (paused, stalled) keeps its listener: only
// its lease lapsing moves its partitions, and its appends stay fenced. A
// node cut off from the NATS servers loses its listener as a dead one
// does; it cannot append until it reconnects, and then it is fenced.

// OwnershipOptions tune partitioned ownership; zero values take defaults.
type OwnershipOptions struct {
	// Tick is how often a node rewrites its keys and rebalances (500 ms).
	Tick time.Duration
	// Lease is how long a key may go unchanged before its node counts as
	// dead (3 s; at least 3 Ticks).
	Lease time.Duration
	// RevokeGone deletes the keys of a node found gone (no listener on its
	// subject, its membership two Ticks late, confirmed by a second
	// probe), so its partitions move at once instead of after Lease. Off
	// by default: moving partitions early also moves their sessions'
	// loads (adopt) early, into what is often the same disruption (a NATS
	// server restarting), where they time out and are paid again on
	// demand; calls are served meanwhile either way (the node that finds
	// the owner gone serves them itself), so what it gains is the dead
	// node's deadlines and adoption about 2 s sooner.
	RevokeGone bool
	// ProbeInterval is how often a node that waits for another's answer
	// checks that something still listens on that node's subject (100 ms,
	// at most Tick).
	ProbeInterval time.Duration
	// ForwardTimeout bounds a forwarded call whose context has no deadline
	// (30 s).
	ForwardTimeout time.Duration
	// MaxForwardsInFlight bounds the forwarded calls one node serves at
	// once (4096); beyond, RATE_LIMITED.
	MaxForwardsInFlight int
	Log                 *slog.Logger
}

// Ownership is one node's part of partitioned ownership; it implements
// runtime.Forwarder. Create it before the runtime (runtime.Options.
// Forwarder), Start it after the runtime's recovery.
type Ownership struct {
	st    *natsstore.Store
	kv    jetstream.KeyValue
	self  string
	parts int
	opts  OwnershipOptions
	mine  []atomic.Bool // partitions this node holds

	mu   sync.Mutex
	keys map[string]*keySeen
	// peers are the other nodes calls were forwarded to: whether they are
	// gone, and the calls waiting on them.
	peers map[string]*peer
	kick  chan struct{} // runs step now (a key was deleted)

	life     context.Context // ends at Stop: probes stop
	endLife  context.CancelFunc
	revoked  atomic.Int64 // nodes whose keys this node deleted (revoke)
	adopting atomic.Int64 // adopt goroutines running
	rt       *runtime.Runtime
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	sub      *nats.Subscription
	sem      chan struct{}
	serving  sync.WaitGroup // forwarded calls being served
	abandon  atomic.Bool
	resident atomic.Int64
	// scanned: the partitions held at the last release scan, and the
	// steps since (step's goroutine only).
	scanned   []bool
	sinceScan int
	fwdOut    atomic.Int64 // calls forwarded to another node
	fwdIn     atomic.Int64 // forwarded calls served here
}

// peer is another node as a forwarding target.
type peer struct {
	// ctx ends when the node is found gone (no one listens on its
	// subject) or its membership stale: calls waiting on it give up.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	waiters int  // forwarded calls waiting for its answer
	probing bool // a probe goroutine runs
	doneAt  time.Time
	doneRev uint64 // its membership key's revision when ctx ended
	revoked bool   // its keys were deleted (gone only)
}

var (
	errPeerGone  = errors.New("no node listens on its subject any more (it died or lost its NATS connection)")
	errPeerStale = errors.New("its lease is stale (it stopped renewing it)")
)

// keySeen is the last entry of a key this node saw, and when (its clock).
type keySeen struct {
	val  string
	rev  uint64
	at   time.Time
	gone bool // deleted or purged
}

type forwardedKey struct{}

// NewOwnership opens (creating if needed) the owners bucket of st's
// deployment.
func NewOwnership(ctx context.Context, st *natsstore.Store, opts OwnershipOptions) (*Ownership, error) {
	if opts.Tick <= 0 {
		opts.Tick = 500 * time.Millisecond
	}
	if opts.Lease < 3*opts.Tick {
		opts.Lease = max(3*time.Second, 3*opts.Tick)
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 100 * time.Millisecond
	}
	opts.ProbeInterval = min(opts.ProbeInterval, opts.Tick)
	if opts.ForwardTimeout <= 0 {
		opts.ForwardTimeout = 30 * time.Second
	}
	if opts.MaxForwardsInFlight <= 0 {
		opts.MaxForwardsInFlight = 4096
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	kv, err := st.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      st.Name() + "_owners",
		Description: "macpd partition ownership leases (internal/cluster)",
		Storage:     jetstream.FileStorage,
		Replicas:    st.Replicas(),
		History:     1,
		TTL:         time.Hour, // members and leases of nodes long gone
	})
	if err != nil {
		return nil, fmt.Errorf("ownership bucket: %w", err)
	}
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	life, endLife := context.WithCancel(context.Background())
	return &Ownership{
		st: st, kv: kv, self: hex.EncodeToString(nb[:]), parts: max(1, st.Partitions()), opts: opts,
		mine: make([]atomic.Bool, max(1, st.Partitions())), keys: map[string]*keySeen{},
		peers: map[string]*peer{}, kick: make(chan struct{}, 1), life: life, endLife: endLife,
		sem: make(chan struct{}, opts.MaxForwardsInFlight),
	}, nil
}

// Partitions is how many partitions there are.
func (w *Ownership) Partitions() int { return w.parts }

// ID is this node's id in the bucket.
func (w *Ownership) ID() string { return w.self }

// Resident is how many sessions the runtime held after the last tick.
func (w *Ownership) Resident() int { return int(w.resident.Load()) }

// Owned returns the partitions this node holds.
func (w *Ownership) Owned() []int {
	var out []int
	for p := range w.mine {
		if w.mine[p].Load() {
			out = append(out, p)
		}
	}
	return out
}

// Forwarded returns the calls this node forwarded and those it served for
// other nodes.
func (w *Ownership) Forwarded() (out, in int64) { return w.fwdOut.Load(), w.fwdIn.Load() }

// Adopting reports whether this node is still loading the OPEN sessions
// of partitions it took.
func (w *Ownership) Adopting() bool { return w.adopting.Load() > 0 }

// Revoked is how many gone nodes' keys this node deleted (revoke).
func (w *Ownership) Revoked() int64 { return w.revoked.Load() }

func (w *Ownership) subject(node string) string {
	return "macpd.own.fwd." + w.st.Name() + "." + node
}

func partKey(p int) string { return "p." + strconv.Itoa(p) }

// Start serves forwarded calls with rt and starts taking this node's share
// of partitions. It returns once the bucket's current state is known.
func (w *Ownership) Start(ctx context.Context, rt *runtime.Runtime) error {
	w.rt = rt
	sub, err := w.st.Conn().Subscribe(w.subject(w.self), w.serve)
	if err != nil {
		return err
	}
	w.sub = sub
	ctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	watch, err := w.kv.WatchAll(ctx)
	if err != nil {
		cancel()
		_ = sub.Unsubscribe()
		return err
	}
	ready := make(chan struct{})
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		defer func() { _ = watch.Stop() }()
		once := sync.Once{}
		for {
			select {
			case e, ok := <-watch.Updates():
				if !ok {
					return
				}
				if e == nil {
					once.Do(func() { close(ready) })
					continue
				}
				gone := e.Operation() != jetstream.KeyValuePut
				w.note(e.Key(), string(e.Value()), e.Revision(), gone)
				if gone && (strings.HasPrefix(e.Key(), "p.") || strings.HasPrefix(e.Key(), "m.")) {
					w.kickStep() // a partition may be free to take
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		w.opts.Log.Warn("the ownership bucket's state did not arrive in time; starting without it")
	case <-ctx.Done():
	}
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(w.opts.Tick)
		defer t.Stop()
		for {
			w.step(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-w.kick:
			}
		}
	}()
	return nil
}

// note records an entry of key seen (watch) or written (this node); older
// revisions are ignored. A partition this node believed it held and that
// now names another node (or none) is no longer this node's.
func (w *Ownership) note(key, val string, rev uint64, gone bool) {
	w.mu.Lock()
	k := w.keys[key]
	if k == nil {
		k = &keySeen{}
		w.keys[key] = k
	}
	newer := rev > k.rev
	if newer {
		k.val, k.rev, k.at, k.gone = val, rev, time.Now(), gone
	}
	w.mu.Unlock()
	if p, ok := strings.CutPrefix(key, "p."); ok && newer && (gone || val != w.self) {
		if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(w.mine) {
			w.mine[i].Store(false)
		}
	}
}

// step renews this node's membership and leases, releases partitions that
// should go to another node, takes those that should be its own, loads
// the sessions of partitions taken and evicts those of others.
func (w *Ownership) step(ctx context.Context) {
	now := time.Now()
	rctx, cancel := context.WithTimeout(ctx, w.opts.Lease)
	defer cancel()
	if rev, err := w.kv.Put(rctx, "m."+w.self, []byte(w.self)); err == nil {
		w.note("m."+w.self, w.self, rev, false)
	} else if ctx.Err() == nil {
		w.opts.Log.Warn("renewing cluster membership failed", "err", err)
	}
	w.revoke(rctx, now)
	w.mu.Lock()
	live := []string{w.self}
	for key, k := range w.keys {
		if id, ok := strings.CutPrefix(key, "m."); ok && id != w.self && !k.gone && now.Sub(k.at) < w.opts.Lease {
			live = append(live, id)
		}
	}
	held := make([]keySeen, w.parts)
	for p := range held {
		if k := w.keys[partKey(p)]; k != nil {
			held[p] = *k
		} else {
			held[p].gone = true
		}
	}
	w.checkPeersLocked(now)
	w.mu.Unlock()
	slices.Sort(live)
	var taken []int
	for p := range w.parts {
		if ctx.Err() != nil {
			return
		}
		want, h, key := live[p%len(live)], held[p], partKey(p)
		var rev uint64
		var err error
		switch {
		case !h.gone && h.val == w.self && want != w.self:
			w.mine[p].Store(false)
			if err := w.kv.Delete(rctx, key, jetstream.LastRevision(h.rev)); err != nil {
				w.opts.Log.Debug("handing a partition over failed", "partition", p, "err", err)
			}
			continue
		case !h.gone && h.val == w.self:
			rev, err = w.kv.Update(rctx, key, []byte(w.self), h.rev)
		case want != w.self:
			continue
		case h.gone:
			rev, err = w.kv.Create(rctx, key, []byte(w.self))
		case now.Sub(h.at) >= w.opts.Lease: // its holder stopped renewing
			rev, err = w.kv.Update(rctx, key, []byte(w.self), h.rev)
		default:
			continue // its holder hands it over at its next tick
		}
		if err != nil {
			if h.val == w.self {
				w.mine[p].Store(false)
				w.opts.Log.Warn("renewing a partition lease failed", "partition", p, "err", err)
			}
			continue
		}
		w.note(key, w.self, rev, false)
		if !w.mine[p].Swap(true) {
			taken = append(taken, p)
		}
	}
	if len(taken) > 0 {
		// Off the loop: loading many long sessions must not hold up the
		// renewals, or this node's leases would lapse meanwhile.
		w.wg.Add(1)
		w.adopting.Add(1)
		go func() {
			defer w.wg.Done()
			defer w.adopting.Add(-1)
			w.adopt(ctx, taken)
		}()
	}
	w.resident.Store(int64(w.release()))
}

// releaseEvery is how many steps may pass without a release scan while no
// partition was lost (what it then drops: sessions loaded here for a
// read or a follower that has left).
const releaseEvery = 20

// release evicts the idle sessions of partitions this node no longer
// holds (runtime.Release) when it lost one since the last scan, or every
// releaseEvery steps, and returns how many sessions stay resident. The
// scan visits every resident session holding the runtime's session map
// (every Send waits meanwhile), so it does not run on every step: with
// 10^5 resident sessions one scan takes tens of milliseconds.
func (w *Ownership) release() int {
	if w.scanned == nil {
		w.scanned = make([]bool, len(w.mine))
	}
	lost := false
	for p := range w.mine {
		held := w.mine[p].Load()
		lost = lost || (w.scanned[p] && !held)
		w.scanned[p] = held
	}
	if w.sinceScan++; !lost && w.sinceScan < releaseEvery {
		return w.rt.Resident()
	}
	w.sinceScan = 0
	return w.rt.Release()
}

// adopt loads the OPEN sessions of partitions just taken, so that their
// deadlines are armed here, on up to 8 goroutines.
func (w *Ownership) adopt(ctx context.Context, parts []int) {
	t0 := time.Now()
	ids := make(chan string)
	var wg sync.WaitGroup
	var loaded atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				info, err := w.st.Info(ctx, id)
				if err != nil || info.Status.Terminal() || info.Quarantined != "" || !w.Owns(id) {
					continue
				}
				if cerr := w.rt.Inspect(ctx, id, func(*session.Session) {}); cerr != nil {
					w.opts.Log.Warn("loading a session of a partition taken failed", "session_id", id, "err", cerr)
					continue
				}
				loaded.Add(1)
			}
		}()
	}
	for _, p := range parts {
		list, err := w.st.PartitionIDs(ctx, p)
		if err != nil {
			w.opts.Log.Warn("listing a partition's sessions failed; they load when asked for", "partition", p, "err", err)
			continue
		}
		for _, id := range list {
			ids <- id
		}
	}
	close(ids)
	wg.Wait()
	w.opts.Log.Info("partitions taken: OPEN sessions loaded", "partitions", parts, "sessions", loaded.Load(), "took", time.Since(t0).Round(time.Millisecond))
}

// Owns implements runtime.Forwarder.
func (w *Ownership) Owns(sessionID string) bool {
	return w.mine[w.st.PartitionOf(sessionID)].Load()
}

// holder is the node to forward partition p's calls to ("": serve here):
// its holder, unless its lease is stale or the node is gone.
func (w *Ownership) holder(p int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := w.keys[partKey(p)]
	if k == nil || k.gone || k.val == w.self || time.Since(k.at) >= w.opts.Lease {
		return ""
	}
	if pr := w.peers[k.val]; pr != nil && pr.ctx.Err() != nil {
		return "" // gone, or its membership stale
	}
	return k.val
}

// await registers a call waiting for node's answer, and probes node's
// subject while calls wait; done unregisters it.
func (w *Ownership) await(node string) (pr *peer, done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pr = w.peerLocked(node)
	pr.waiters++
	if !pr.probing && pr.ctx.Err() == nil {
		pr.probing = true
		go w.probe(node, pr)
	}
	return pr, func() {
		w.mu.Lock()
		pr.waiters--
		w.mu.Unlock()
	}
}

// peerLocked returns node's entry, creating it (w.mu held).
func (w *Ownership) peerLocked(node string) *peer {
	pr := w.peers[node]
	if pr == nil {
		pr = &peer{}
		pr.ctx, pr.cancel = context.WithCancelCause(w.life)
		w.peers[node] = pr
	}
	return pr
}

// probe pings node's subject every ProbeInterval while calls wait on it,
// and finds it gone when no one listens there.
func (w *Ownership) probe(node string, pr *peer) {
	t := time.NewTicker(w.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-pr.ctx.Done():
		}
		w.mu.Lock()
		if pr.waiters == 0 || pr.ctx.Err() != nil {
			pr.probing = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		if errors.Is(w.ping(node), errPeerGone) {
			w.gone(node)
		}
	}
}

// ping asks whether something listens on node's subject: errPeerGone when
// NATS answers that no one does. A node that is alive answers; a paused or
// busy one may not answer in time (a timeout, not errPeerGone). The wait is
// one ProbeInterval only: a ping taken by a node that dies before
// answering must not hold up the next probe, which finds it gone.
func (w *Ownership) ping(node string) error {
	m := nats.NewMsg(w.subject(node))
	m.Header.Set(hdrOp, "ping")
	_, err := w.st.Conn().RequestMsg(m, w.opts.ProbeInterval)
	if errors.Is(err, nats.ErrNoResponders) {
		return errPeerGone
	}
	return err
}

// gone notes that no one listens on node's subject: calls waiting on it
// give up, later ones are served here, and step revokes its keys.
func (w *Ownership) gone(node string) {
	w.mu.Lock()
	pr := w.peerLocked(node)
	if pr.ctx.Err() == nil {
		pr.cancel(errPeerGone)
		pr.doneAt = time.Now()
		if k := w.keys["m."+node]; k != nil {
			pr.doneRev = k.rev
		}
		w.opts.Log.Info("a node is gone: no one listens on its subject", "node", node)
	}
	w.mu.Unlock()
	w.kickStep()
}

func (w *Ownership) kickStep() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// checkPeersLocked (w.mu held, every step) ends the wait on nodes whose
// membership went stale (paused, cut off: no answer is coming), forgets
// nodes found gone or stale that renewed their membership since (they
// reconnected), and entries no longer needed.
func (w *Ownership) checkPeersLocked(now time.Time) {
	for node, pr := range w.peers {
		k := w.keys["m."+node]
		if pr.ctx.Err() == nil {
			if k != nil && (k.gone || now.Sub(k.at) >= w.opts.Lease) {
				pr.cancel(errPeerStale)
				pr.doneAt, pr.doneRev = now, k.rev
			} else if pr.waiters == 0 && !pr.probing {
				delete(w.peers, node) // created again when needed
			}
			continue
		}
		renewed := k != nil && !k.gone && k.rev > pr.doneRev && now.Sub(k.at) < w.opts.Lease
		if pr.waiters == 0 && !pr.probing && (renewed || now.Sub(pr.doneAt) >= w.opts.Lease) {
			delete(w.peers, node)
		}
	}
}

// revoke deletes the keys of nodes found gone whose membership has not
// been renewed for two Ticks, once a probe confirms no one listens on
// their subject: their partitions are free at once, instead of after
// Lease. Each delete expects the revision last seen, so a key the node
// (or a new holder) rewrote meanwhile is left alone. Safety does not rest
// on this: appends are fenced by the store.
func (w *Ownership) revoke(ctx context.Context, now time.Time) {
	if !w.opts.RevokeGone {
		return
	}
	w.mu.Lock()
	var nodes []string
	for node, pr := range w.peers {
		if pr.revoked || context.Cause(pr.ctx) != errPeerGone {
			continue
		}
		if k := w.keys["m."+node]; k != nil && !k.gone && now.Sub(k.at) < 2*w.opts.Tick {
			continue // renewed lately: give a reconnecting node its chance
		}
		nodes = append(nodes, node)
	}
	w.mu.Unlock()
	for _, node := range nodes {
		if err := w.ping(node); !errors.Is(err, errPeerGone) {
			if err == nil { // it answers again: not gone
				w.mu.Lock()
				if pr := w.peers[node]; pr != nil && pr.waiters == 0 && !pr.probing {
					delete(w.peers, node)
				}
				w.mu.Unlock()
			}
			continue
		}
		type keyRev struct {
			key string
			rev uint64
		}
		var keys []keyRev
		w.mu.Lock()
		for key, k := range w.keys {
			if !k.gone && k.val == node && (key == "m."+node || strings.HasPrefix(key, "p.")) {
				keys = append(keys, keyRev{key, k.rev})
			}
		}
		w.mu.Unlock()
		all := true
		for _, kr := range keys {
			if err := w.kv.Delete(ctx, kr.key, jetstream.LastRevision(kr.rev)); err != nil {
				all = false
				w.opts.Log.Debug("revoking a gone node's key failed", "node", node, "key", kr.key, "err", err)
				continue
			}
			w.mu.Lock()
			if k := w.keys[kr.key]; k != nil && k.rev == kr.rev {
				k.gone, k.val = true, "" // the watch brings the delete's revision
			}
			w.mu.Unlock()
		}
		if all {
			w.mu.Lock()
			if pr := w.peers[node]; pr != nil {
				pr.revoked = true
			}
			w.mu.Unlock()
			w.revoked.Add(1)
			w.opts.Log.Info("a gone node's leases revoked", "node", node, "keys", len(keys))
		}
	}
}

// Forward headers.
const (
	hdrOp       = "Macp-Fwd-Op"
	hdrIdentity = "Macp-Fwd-Identity"
	hdrSession  = "Macp-Fwd-Session"
	hdrReason   = "Macp-Fwd-Reason"
	// hdrProfile is the forwarding node's profile: a SessionStart binds the
	// profile of the node the client reached, not the owner's.
	hdrProfile = "Macp-Fwd-Profile"
	hdrErr     = "Macp-Fwd-Error" // JSON coord.Error of Cancel, Suspend, Resume
)

// Forward implements runtime.Forwarder: a call on a session another live
// node holds is sent to it, and its answer returned.
func (w *Ownership) Forward(ctx context.Context, id coord.Identity, call runtime.ForwardCall) (*macpv1.Ack, *coord.Error, bool) {
	if ctx.Value(forwardedKey{}) != nil {
		return nil, nil, false // one hop
	}
	sid := call.SessionID
	if call.Env != nil {
		if call.Env.MessageType == coord.TypeSignal || call.Env.MessageType == coord.TypeProgress {
			return nil, nil, false
		}
		sid = call.Env.SessionId
	}
	if !coord.ValidSessionID(sid) {
		return nil, nil, false
	}
	p := w.st.PartitionOf(sid)
	if w.mine[p].Load() {
		return nil, nil, false
	}
	node := w.holder(p)
	if node == "" {
		return nil, nil, false
	}
	pr, done := w.await(node)
	defer done()
	if pr.ctx.Err() != nil {
		return nil, nil, false // found gone or stale meanwhile: serve here
	}
	idj, _ := json.Marshal(id)
	m := nats.NewMsg(w.subject(node))
	m.Header.Set(hdrOp, call.Op)
	m.Header.Set(hdrIdentity, string(idj))
	m.Header.Set(hdrSession, call.SessionID)
	m.Header.Set(hdrReason, call.Reason)
	m.Header.Set(hdrProfile, w.rt.Profile())
	if call.Env != nil {
		b, err := proto.Marshal(call.Env)
		if err != nil {
			return nil, nil, false
		}
		m.Data = b
	}
	rctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, w.opts.ForwardTimeout)
		defer cancel()
	}
	// A holder that dies after taking the request never answers: give up
	// when the probe of its subject (every ProbeInterval while calls wait
	// on it) finds no one there (its connection closed), or its membership
	// is found stale (step), not at the deadline. A holder that hands the
	// partition over meanwhile still answers (it serves the call as a
	// local one).
	rctx, cancel := context.WithCancelCause(rctx)
	defer cancel(nil)
	defer context.AfterFunc(pr.ctx, func() { cancel(context.Cause(pr.ctx)) })()
	reply, err := w.st.Conn().RequestMsgWithContext(rctx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		w.gone(node)
		return nil, nil, false // the holder is gone: serve here (fenced by the store)
	}
	w.fwdOut.Add(1)
	if err != nil {
		// Unknown outcome: the owner may have stored it. A resend with the
		// same message_id is answered as a duplicate if it did.
		why := err.Error()
		if c := context.Cause(rctx); c != nil && c != err {
			why = c.Error()
		}
		msg := "the session's owner node did not answer: " + why + "; retry"
		if call.Env == nil {
			return nil, coord.Errorf(coord.CodeInternalError, "%s", msg), true
		}
		return &macpv1.Ack{Ok: false, MessageId: call.Env.MessageId, SessionId: sid,
			Error: &macpv1.MACPError{Code: string(coord.CodeInternalError), Message: msg, SessionId: sid, MessageId: call.Env.MessageId}}, nil, true
	}
	var cerr *coord.Error
	if e := reply.Header.Get(hdrErr); e != "" {
		cerr = &coord.Error{}
		if json.Unmarshal([]byte(e), cerr) != nil {
			cerr = coord.Errorf(coord.CodeInternalError, "undecodable answer of the session's owner node")
		}
	}
	var ack *macpv1.Ack
	if len(reply.Data) > 0 {
		ack = &macpv1.Ack{}
		if proto.Unmarshal(reply.Data, ack) != nil {
			ack = nil
			cerr = coord.Errorf(coord.CodeInternalError, "undecodable answer of the session's owner node")
		}
	}
	if ack == nil && cerr == nil {
		cerr = coord.Errorf(coord.CodeInternalError, "empty answer of the session's owner node")
	}
	if call.Env != nil && ack == nil {
		ack = &macpv1.Ack{Ok: false, MessageId: call.Env.MessageId, SessionId: sid,
			Error: &macpv1.MACPError{Code: string(cerr.Code), Message: cerr.Message, SessionId: sid, MessageId: call.Env.MessageId}}
	}
	return ack, cerr, true
}

// serve answers a call another node forwarded, on its own goroutine.
func (w *Ownership) serve(m *nats.Msg) {
	if m.Header.Get(hdrOp) == "ping" {
		_ = m.Respond(nil)
		return
	}
	select {
	case w.sem <- struct{}{}:
	default:
		r := nats.NewMsg(m.Reply)
		b, _ := json.Marshal(coord.Errorf(coord.CodeRateLimited, "too many forwarded calls in flight on the session's owner node"))
		r.Header.Set(hdrErr, string(b))
		_ = m.RespondMsg(r)
		return
	}
	w.fwdIn.Add(1)
	w.serving.Add(1)
	go func() {
		defer w.serving.Done()
		defer func() { <-w.sem }()
		ctx := context.WithValue(context.Background(), forwardedKey{}, true)
		ctx, cancel := context.WithTimeout(ctx, w.opts.ForwardTimeout)
		defer cancel()
		var id coord.Identity
		r := nats.NewMsg(m.Reply)
		var ack *macpv1.Ack
		var cerr *coord.Error
		sid, reason := m.Header.Get(hdrSession), m.Header.Get(hdrReason)
		if json.Unmarshal([]byte(m.Header.Get(hdrIdentity)), &id) != nil {
			cerr = coord.Errorf(coord.CodeInternalError, "undecodable forwarded call")
		} else {
			switch m.Header.Get(hdrOp) {
			case "send":
				env := &macpv1.Envelope{}
				if proto.Unmarshal(m.Data, env) != nil {
					cerr = coord.Errorf(coord.CodeInvalidEnvelope, "undecodable envelope")
					break
				}
				ack = w.rt.Send(runtime.WithStartProfile(ctx, m.Header.Get(hdrProfile)), id, env)
			case "cancel":
				ack, cerr = w.rt.Cancel(ctx, id, sid, reason)
			case "suspension":
				ack, cerr = w.rt.Suspend(ctx, id, sid, reason)
			case "resumption":
				ack, cerr = w.rt.Resume(ctx, id, sid, reason)
			default:
				cerr = coord.Errorf(coord.CodeInternalError, "unknown forwarded call %q", m.Header.Get(hdrOp))
			}
		}
		if ack != nil {
			r.Data, _ = proto.Marshal(ack)
		}
		if cerr != nil {
			b, _ := json.Marshal(cerr)
			r.Header.Set(hdrErr, string(b))
		}
		_ = m.RespondMsg(r)
	}()
}

// lifecycleElsewhere publishes on rt's lifecycle feed the events of
// records of a session this node neither owns nor holds: its start (the
// session replayed from its first records) and its end (the last
// record's Final metadata). Suspensions and resumptions of such sessions
// are not published here.
func lifecycleElsewhere(rt *runtime.Runtime, recs []session.Record) {
	now := rt.Clock().Now().UnixMilli()
	event := func(st session.Status, md *macpv1.SessionMetadata) {
		t := macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED
		switch st {
		case session.Resolved:
			t = macpv1.SessionLifecycleEvent_EVENT_TYPE_RESOLVED
		case session.Cancelled:
			t = macpv1.SessionLifecycleEvent_EVENT_TYPE_CANCELLED
		}
		rt.Lifecycle.Publish(runtime.LifecycleEvent{Type: t, Session: md, ObservedMs: now})
	}
	if recs[0].Seq == 1 {
		s, err := replay.Records(recs, replay.Options{Modes: rt.ReplayModes(), Limits: rt.Limits()})
		if err != nil {
			return
		}
		rt.Lifecycle.Publish(runtime.LifecycleEvent{Type: macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED, Session: s.Metadata(), ObservedMs: now})
		if s.Status.Terminal() {
			event(s.Status, s.Metadata())
		}
		return
	}
	if last := recs[len(recs)-1]; last.Final != nil && last.Status.Terminal() {
		event(last.Status, last.Final)
	}
}

// Stop ends ownership. Unless Abandon was called, this node's leases and
// membership are deleted first, so other nodes take its partitions at
// their next tick instead of after Lease.
func (w *Ownership) Stop() {
	w.endLife()
	if w.cancel == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
	_ = w.sub.Unsubscribe()
	if !w.abandon.Load() {
		w.serving.Wait() // answer the calls taken before the runtime closes
	}
	for p := range w.mine {
		w.mine[p].Store(false)
	}
	if w.abandon.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w.mu.Lock()
	var mine []string
	var revs []uint64
	for key, k := range w.keys {
		if !k.gone && k.val == w.self {
			mine, revs = append(mine, key), append(revs, k.rev)
		}
	}
	w.mu.Unlock()
	for i, key := range mine {
		_ = w.kv.Delete(ctx, key, jetstream.LastRevision(revs[i]))
	}
}

// Abandon makes Stop leave the leases to expire, as a crash would (tests).
func (w *Ownership) Abandon() { w.abandon.Store(true) }

var _ runtime.Forwarder = (*Ownership)(nil)
