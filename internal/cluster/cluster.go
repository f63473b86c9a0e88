// Package cluster runs one macpd node of several sharing a NATS JetStream
// store (MACP_STORE=nats; docs/cluster.md). It keeps the node's runtime
// current with what the other nodes store:
//
//   - a JetStream ordered consumer on each history stream (one per
//     partition), started after the stream's last sequence taken before
//     the runtime's recovery (natsstore.LastPosition), hands
//     every stored message's records to runtime.ApplyStored (followers on
//     this node see envelopes accepted on other nodes; sessions started
//     elsewhere become resident, so their TTL is armed here too), or, with
//     partitioned ownership (ownership.go), only to the lifecycle feed for
//     sessions another node owns and this one does not hold;
//   - with partitioned ownership, leases on the history partitions in the
//     <name>_owners bucket, and calls forwarded to the owner (ownership.go);
//   - a watch on the meta key-value bucket reloads the extension-mode and
//     policy registries (registry.Registry.Reload) when any node changes
//     them, once when it starts, and again after a failed reload until one
//     succeeds;
//   - a core NATS subject carries "one active connection" notices
//     (runtime.Attachments): a session/resume on one node ends the same
//     identity's follows of that session on every other node.
//
// Acceptance itself needs none of this: the store's per-session expected
// sequence decides it (natsstore, runtime/cluster.go). The feed only keeps
// copies fresh; a copy that is stale is caught up when an append of its
// own conflicts.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// Node is the feed of one node. Stop it before closing the runtime.
type Node struct {
	cancel context.CancelFunc
	cc     []jetstream.ConsumeContext // one per history stream
	wg     sync.WaitGroup
	sup    *nats.Subscription
	rt     *runtime.Runtime
}

// supersedeNotice is one node's Attachments.Supersede, for the others.
type supersedeNotice struct {
	Node    string `json:"node"`
	Sender  string `json:"sender"`
	Session string `json:"session"`
}

// supersedeSubject is the core NATS subject of the notices of the cluster
// that shares st's history stream.
func supersedeSubject(st *natsstore.Store) string {
	return "macpd.attach.supersede." + st.StreamName()
}

// Start feeds rt with every message stored after position after
// (natsstore.LastPosition, taken before rt.Start), and reg (the
// registries rt resolves modes and policies through) with registry
// changes. A session's messages are all in one stream, so each session's
// records reach rt in order.
//
// With own (partitioned ownership, ownership.go), records of sessions this
// node neither owns nor holds only reach rt's lifecycle feed.
func Start(ctx context.Context, st *natsstore.Store, rt *runtime.Runtime, reg *registry.Registry, after natsstore.Position, log *slog.Logger, own *Ownership) (*Node, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names := st.StreamNames()
	if len(after) != len(names) {
		return nil, fmt.Errorf("cluster: a position of %d streams for %d history streams", len(after), len(names))
	}
	ctx, cancel := context.WithCancel(ctx)
	n := &Node{cancel: cancel}
	stopAll := func() {
		for _, cc := range n.cc {
			cc.Stop()
		}
		cancel()
	}
	for i, name := range names {
		stream, err := st.JetStream().Stream(ctx, name)
		if err != nil {
			stopAll()
			return nil, err
		}
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:   after[i] + 1,
		})
		if err != nil {
			stopAll()
			return nil, err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			if st.Own(m.Headers()) {
				// This node's own append: its runtime applied it when
				// the store acknowledged it, or rebuilds the session
				// from the store after a failed one.
				return
			}
			md, err := m.Metadata()
			if err != nil {
				return
			}
			_, recs, err := st.Decode(m.Subject(), m.Headers(), m.Data(), md.Sequence.Stream)
			if err != nil {
				log.Warn("undecodable history message; sessions read it from the store", "subject", m.Subject(), "err", err)
				return
			}
			if own != nil && len(recs) > 0 && !own.Owns(recs[0].SessionID) {
				if _, resident := rt.LastSeq(recs[0].SessionID); !resident {
					lifecycleElsewhere(rt, recs)
					return
				}
			}
			rt.ApplyStored(recs)
		})
		if err != nil {
			stopAll()
			return nil, err
		}
		n.cc = append(n.cc, cc)
	}
	w, err := st.MetaBucket().WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		stopAll()
		return nil, err
	}
	// One active connection per caller and session, cluster-wide: this
	// node's Supersedes go to the others, theirs end follows here.
	var nb [16]byte
	_, _ = rand.Read(nb[:])
	self := hex.EncodeToString(nb[:])
	subject := supersedeSubject(st)
	n.sup, err = st.Conn().Subscribe(subject, func(m *nats.Msg) {
		var sn supersedeNotice
		if json.Unmarshal(m.Data, &sn) != nil || sn.Node == self {
			return
		}
		rt.Attachments().SupersedeLocal(sn.Sender, sn.Session)
	})
	if err != nil {
		_ = w.Stop()
		stopAll()
		return nil, err
	}
	n.rt = rt
	rt.Attachments().SetPublish(func(sender, sessionID string) {
		b, _ := json.Marshal(supersedeNotice{Node: self, Sender: sender, Session: sessionID})
		if err := st.Conn().Publish(subject, b); err != nil {
			log.Warn("the one-active-connection notice did not reach the other nodes", "session_id", sessionID, "err", err)
		}
	})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { _ = w.Stop() }()
		watchRegistries(ctx, w.Updates(), reg, log)
	}()
	return n, nil
}

// watchRegistries reloads reg on every update of the meta bucket until
// updates closes or ctx ends.
func watchRegistries(ctx context.Context, updates <-chan jetstream.KeyValueEntry, reg *registry.Registry, log *slog.Logger) {
	// Reload once now: a change made between the runtime's own load and
	// the watch's start has no update of its own.
	retry := reloadRetry(ctx, reg, log, true)
	for {
		select {
		case e, ok := <-updates:
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			retry = reloadRetry(ctx, reg, log, true)
		case <-retry:
			// The last reload failed (the bucket may not have answered in
			// time under load): try again, or the change is never seen
			// here, since its update has been consumed.
			retry = reloadRetry(ctx, reg, log, false)
		case <-ctx.Done():
			return
		}
	}
}

// reloadBackoff is the wait before reloading registries again after a
// failed reload.
var reloadBackoff = 250 * time.Millisecond

// reloadRetry reloads reg from the store; on failure it
// returns a channel that fires when the reload should be tried again,
// else nil (a nil channel never fires). first: the first attempt for a
// change (a failure is logged once per change, not per retry).
func reloadRetry(ctx context.Context, reg *registry.Registry, log *slog.Logger, first bool) <-chan time.Time {
	err := reg.Reload(ctx)
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	if first {
		log.Warn("reloading registries from the shared store failed; retrying", "err", err)
	}
	return time.After(reloadBackoff)
}

// Stop ends the feed.
func (n *Node) Stop() {
	n.rt.Attachments().SetPublish(nil)
	_ = n.sup.Unsubscribe()
	for _, cc := range n.cc {
		cc.Stop()
	}
	n.cancel()
	n.wg.Wait()
}
