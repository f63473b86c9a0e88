package bus

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// The read side of the binding: accepted envelopes published on NATS
// subjects (docs/cluster.md "Message-bus binding").
//
// One publisher for the whole cluster, the deliverer holding the lease:
// it reads the replicated history streams (one per partition, each with an
// ordered consumer), so it publishes only what a quorum stored (after
// durability), in each stream's order (a session's records are all in one
// stream: each session's records in sequence order), on one
// connection (NATS keeps one publisher's order per subject). Each record
// goes to
//
//	<name>.sessions.<session id>.accepted                      every record (observers, auditors)
//	<name>.sessions.<session id>.accepted.<base64url(agent)>   once per member: initiator, declared participants
//
// with the envelope (protobuf macp.v1.Envelope) as body, empty for a record
// without one (a TTL expiry), and the headers Macp-Seq (the record's
// sequence number, the cursor of every binding), Macp-Kind and
// Macp-Session-State. Per-member subjects exist so that NATS permissions
// can let an agent read the sessions it belongs to and no others: a
// session's records are published under an agent's token only if the
// agent is its initiator or a declared participant (AgentPermissions).
//
// The lease is the key "lease" in the bucket <name>_deliver: its value
// names the holder and, for each history stream, the stream sequence
// delivered so far (the checkpoint). The holder rewrites it every RenewEvery with the key's
// revision as expectation; another node takes it over, with the same
// expectation (only one can win), when it has seen no new revision for
// LeaseTimeout, and resumes after the checkpoint. A holder that could not
// renew for LeaseTimeout, or finds the key rewritten, stops publishing.
// Delivery is at least once: around a take-over, records published after
// the last checkpoint are published again (same Macp-Seq), in order.
// Subscribers skip a Macp-Seq at or below the last one they handled;
// after a gap (core NATS drops messages for a slow subscriber) they read
// the missing records from a node (StreamSession after their last Seq).

// Delivery headers.
const (
	HeaderSeq   = "Macp-Seq"
	HeaderKind  = "Macp-Kind"
	HeaderState = "Macp-Session-State"
)

// Lease timing defaults (DeliverOptions).
const (
	RenewEvery   = time.Second
	LeaseTimeout = 5 * time.Second
)

// maxMembersCached bounds the deliverer's cache of session members; past
// it the cache starts over (members are read again from the store).
const maxMembersCached = 1 << 16

func token(agent string) string { return base64.RawURLEncoding.EncodeToString([]byte(agent)) }

// AcceptedSubject is the subject every accepted record of a session is
// published on (for observers).
func AcceptedSubject(name, sessionID string) string {
	return name + ".sessions." + sessionID + ".accepted"
}

// MemberSubject is the subject a member's copy of each accepted record of
// a session is published on.
func MemberSubject(name, sessionID, agent string) string {
	return AcceptedSubject(name, sessionID) + "." + token(agent)
}

// InboxPrefix is the inbox prefix an agent's NATS connection must use
// (nats.CustomInboxPrefix), so that its permissions let it receive its own
// submissions' Acks and no one else's.
func InboxPrefix(agent string) string { return "_INBOX_" + token(agent) }

// AgentPermissions returns what the NATS user of agent may publish and
// subscribe to: submit as itself, read the sessions it belongs to, and
// its own inbox. Every other subject (other agents' submissions and
// deliveries, the history stream, the JetStream API) is refused by the
// NATS server. docs/cluster.md shows them in a server configuration.
func AgentPermissions(name, agent string) (publish, subscribe []string) {
	return []string{SubmitSubject(name, agent)},
		[]string{name + ".sessions.*.accepted." + token(agent), InboxPrefix(agent) + ".>"}
}

// DeliverOptions tune Deliver; zero values take the defaults.
type DeliverOptions struct {
	RenewEvery, LeaseTimeout time.Duration
	Log                      *slog.Logger
}

// Deliverer is one node's contender for the delivery lease.
type Deliverer struct {
	st      *natsstore.Store
	kv      jetstream.KeyValue
	node    string
	opts    DeliverOptions
	cancel  context.CancelFunc
	done    chan struct{}
	leading atomic.Bool

	members map[string][]string // session → members; deliverer goroutine only
}

// Deliver starts node's contender for the delivery lease over st's
// connection; the holder publishes every stored record (see above).
func Deliver(st *natsstore.Store, opts DeliverOptions) (*Deliverer, error) {
	if opts.RenewEvery <= 0 {
		opts.RenewEvery = RenewEvery
	}
	if opts.LeaseTimeout <= opts.RenewEvery {
		opts.LeaseTimeout = max(LeaseTimeout, 3*opts.RenewEvery)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	kv, err := st.JetStream().CreateOrUpdateKeyValue(cctx, jetstream.KeyValueConfig{
		Bucket:      st.Name() + "_deliver",
		Description: "macpd message-bus delivery lease (internal/bus)",
		Storage:     jetstream.FileStorage,
		Replicas:    st.Replicas(),
		History:     1,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("delivery lease bucket: %w", err)
	}
	d := &Deliverer{st: st, kv: kv, node: uuid.NewString(), opts: opts, cancel: cancel, done: make(chan struct{}), members: map[string][]string{}}
	go d.run(ctx)
	return d, nil
}

// Leading reports whether this node holds the lease and publishes.
func (d *Deliverer) Leading() bool { return d.leading.Load() }

// Stop ends the contender; a holder hands the lease over at once (the
// next node resumes after the checkpoint without waiting LeaseTimeout).
func (d *Deliverer) Stop() {
	d.cancel()
	<-d.done
}

const leaseKey = "lease"

// lease value: "<node> <checkpoint>"; node "" = released. The checkpoint
// is the stream sequences delivered so far, comma separated, by partition
// (one number with one partition, as before partitions).
func leaseValue(node string, cp natsstore.Position) []byte {
	b := []byte(node + " ")
	for i, n := range cp {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, n, 10)
	}
	return b
}

func parseLease(v []byte, parts int) (node string, cp natsstore.Position, ok bool) {
	node, list, found := strings.Cut(string(v), " ")
	if !found {
		return "", make(natsstore.Position, parts), false
	}
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return "", make(natsstore.Position, parts), false
		}
		cp = append(cp, n)
	}
	if len(cp) != parts {
		return "", make(natsstore.Position, parts), false
	}
	return node, cp, true
}

func (d *Deliverer) run(ctx context.Context) {
	defer close(d.done)
	for ctx.Err() == nil {
		cp, rev, ok := d.acquire(ctx)
		if !ok {
			return
		}
		d.opts.Log.Info("message-bus delivery: this node publishes", "after_stream_seq", cp)
		d.lead(ctx, cp, rev)
		d.opts.Log.Info("message-bus delivery: this node stopped publishing")
	}
}

// acquire waits until this node holds the lease; it returns the
// checkpoint and the lease's revision.
func (d *Deliverer) acquire(ctx context.Context) (natsstore.Position, uint64, bool) {
	var seenRev uint64
	seenAt := time.Now()
	for {
		rctx, cancel := context.WithTimeout(ctx, d.opts.LeaseTimeout)
		e, err := d.kv.Get(rctx, leaseKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// No deliverer ever ran: deliver what is stored from now on.
			var cp natsstore.Position
			if cp, err = d.st.LastPosition(rctx); err == nil {
				var rev uint64
				if rev, err = d.kv.Create(rctx, leaseKey, leaseValue(d.node, cp)); err == nil {
					cancel()
					return cp, rev, true
				}
			}
		case err == nil:
			holder, cp, valid := parseLease(e.Value(), d.st.Partitions())
			if e.Revision() != seenRev {
				seenRev, seenAt = e.Revision(), time.Now()
			}
			if !valid || holder == "" || holder == d.node || time.Since(seenAt) >= d.opts.LeaseTimeout {
				if rev, err := d.kv.Update(rctx, leaseKey, leaseValue(d.node, cp), e.Revision()); err == nil {
					cancel()
					return cp, rev, true
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return nil, 0, false
		case <-time.After(d.opts.RenewEvery):
		}
	}
}

// lead publishes stored records after cp until the lease is lost or ctx
// ends.
func (d *Deliverer) lead(ctx context.Context, cp natsstore.Position, rev uint64) {
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu         sync.Mutex // serializes publishing with the step-down
		delivered  = slices.Clone(cp)
		steppedOut bool
		ccs        []jetstream.ConsumeContext
		err        error
	)
	// Every stream's consumer first, then the consumption: the node
	// publishes only once it reads every stream.
	var conss []jetstream.Consumer
	for i, name := range d.st.StreamNames() {
		var stream jetstream.Stream
		if stream, err = d.st.JetStream().Stream(lctx, name); err != nil {
			break
		}
		var cons jetstream.Consumer
		cons, err = stream.OrderedConsumer(lctx, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:   cp[i] + 1,
		})
		if err != nil {
			break
		}
		conss = append(conss, cons)
	}
	if err == nil {
		d.leading.Store(true)
		for i, cons := range conss {
			var cc jetstream.ConsumeContext
			cc, err = cons.Consume(func(m jetstream.Msg) {
				md, err := m.Metadata()
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if steppedOut || md.Sequence.Stream <= delivered[i] {
					return
				}
				d.publish(lctx, m)
				delivered[i] = md.Sequence.Stream
			})
			if err != nil {
				break
			}
			ccs = append(ccs, cc)
		}
	}
	if err != nil {
		d.opts.Log.Warn("message-bus delivery: reading the history stream failed", "err", err)
		// Keep the lease only as long as it can be renewed; retry reading.
		for _, cc := range ccs {
			cc.Stop()
		}
		ccs = nil
	}
	var cc jetstream.ConsumeContext // non-nil: every stream is read
	if len(ccs) > 0 {
		cc = ccs[0]
	}
	d.leading.Store(cc != nil)
	defer func() {
		d.leading.Store(false)
		for _, cc := range ccs {
			cc.Stop()
		}
		mu.Lock()
		steppedOut = true
		last := slices.Clone(delivered)
		mu.Unlock()
		if ctx.Err() != nil {
			// Stopped: hand the lease over at once (best effort).
			hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = d.kv.Update(hctx, leaseKey, leaseValue("", last), rev)
			cancel()
		}
	}()
	renewed := time.Now()
	t := time.NewTicker(d.opts.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if cc == nil {
			return // give the lease up; acquire again (it is ours until it times out)
		}
		mu.Lock()
		last := slices.Clone(delivered)
		mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, d.opts.LeaseTimeout)
		r, err := d.kv.Update(rctx, leaseKey, leaseValue(d.node, last), rev)
		cancel()
		switch {
		case err == nil:
			rev, renewed = r, time.Now()
		case isAPIError(err):
			return // the server refused the revision: another node took the lease over
		case time.Since(renewed) >= d.opts.LeaseTimeout-d.opts.RenewEvery:
			// Others may take it over any moment: stop publishing first.
			return
		}
	}
}

// isAPIError reports whether the server answered err (as opposed to a
// timeout or a lost connection).
func isAPIError(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) || errors.Is(err, jetstream.ErrKeyExists)
}

// publish sends the records of one history message to their subjects.
func (d *Deliverer) publish(ctx context.Context, m jetstream.Msg) {
	md, _ := m.Metadata()
	sid, recs, err := d.st.Decode(m.Subject(), m.Headers(), m.Data(), md.Sequence.Stream)
	if err != nil {
		d.opts.Log.Warn("message-bus delivery: undecodable history message skipped", "subject", m.Subject(), "err", err)
		return
	}
	nc := d.st.Conn()
	name := d.st.Name()
	for _, rec := range recs {
		members := d.membersOf(ctx, sid, rec)
		msg := &nats.Msg{Header: nats.Header{}}
		msg.Header.Set(HeaderSeq, strconv.FormatUint(rec.Seq, 10))
		msg.Header.Set(HeaderKind, rec.Kind.String())
		msg.Header.Set(HeaderState, rec.Status.String())
		if rec.Envelope != nil {
			if msg.Data, err = proto.Marshal(rec.Envelope); err != nil {
				continue
			}
		}
		msg.Subject = AcceptedSubject(name, sid)
		_ = nc.PublishMsg(msg)
		for _, a := range members {
			msg.Subject = MemberSubject(name, sid, a)
			_ = nc.PublishMsg(msg)
		}
		if rec.Status.Terminal() {
			delete(d.members, sid)
		}
	}
}

// membersOf returns the initiator and declared participants of sid, from
// rec if it is the start record, else from the cache or the store.
func (d *Deliverer) membersOf(ctx context.Context, sid string, rec session.Record) []string {
	if m, ok := d.members[sid]; ok {
		return m
	}
	start := rec
	if rec.Kind != session.KindStart {
		found := false
		_ = d.st.Read(ctx, sid, 1, func(r session.Record) error {
			start, found = r, true
			return errStop
		})
		if !found {
			return nil
		}
	}
	var p macpv1.SessionStartPayload
	if start.Envelope == nil || proto.Unmarshal(start.Envelope.Payload, &p) != nil {
		return nil
	}
	members := []string{start.Envelope.Sender}
	for _, a := range p.Participants {
		if !slices.Contains(members, a) {
			members = append(members, a)
		}
	}
	if len(d.members) >= maxMembersCached {
		clear(d.members)
	}
	d.members[sid] = members
	return members
}

var errStop = errors.New("stop")
