package natsstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/record"
)

// Header names of history messages.
const (
	// HeaderAppend identifies the Append call that wrote a message (random,
	// 16 bytes hex): it is how an append whose outcome was lost in transit
	// is recognised in the stream.
	HeaderAppend = "Macp-Append"
	// HeaderSeq is the Seq of the first record in the message.
	HeaderSeq = "Macp-Seq"
	// HeaderCount is the number of records in the message.
	HeaderCount = "Macp-Count"
)

// JetStream API error codes the store branches on.
const (
	errCodeWrongLastSeq      = 10071 // wrong last sequence: {seq}
	errCodeWrongLastSeqConst = 10164 // wrong last sequence (subject in flight)
)

// Options configure Open.
type Options struct {
	// Conn is an established connection to use; the store does not close
	// it. If nil, the store dials URL with NATSOptions and owns the
	// connection.
	Conn *nats.Conn
	// URL is a comma-separated list of NATS server URLs.
	URL string
	// NATSOptions are extra connection options (credentials, TLS).
	NATSOptions []nats.Option
	// Name prefixes the streams, the bucket and the subjects (default
	// "macp"): see the package doc's Layout. Letters, digits, '-' and '_'
	// only.
	Name string
	// Partitions is how many history streams a new deployment spreads its
	// sessions over (0: DefaultPartitions). An existing deployment keeps
	// the layout recorded when it was created (a deployment from before
	// partitions, with the one stream <Name>_history, is 1); a non-zero
	// Partitions that differs from it makes Open fail.
	Partitions int
	// Replicas of the streams and the bucket (default 3; 1 for a single
	// NATS server).
	Replicas int
	// Timeout bounds each JetStream request (default 5 s).
	Timeout time.Duration
	// ResolveTimeout bounds how long an append whose outcome was lost (a
	// timeout, a lost connection) is resolved by reading the stream and
	// retrying, before the store fails closed (default 30 s).
	ResolveTimeout time.Duration
	// ConsumerReadMin is the number of records from which Read gets a
	// session's messages from an ephemeral consumer (one batch) rather
	// than one request per message (0: DefaultConsumerReadMin; negative:
	// never).
	ConsumerReadMin int
}

// DefaultConsumerReadMin: a consumer costs about as much as 15 requests
// (created, fetched, deleted: three JetStream round trips, two of them
// through the meta leader), so shorter sessions are read one message at
// a time (BenchmarkReadLongSession).
const DefaultConsumerReadMin = 16

// DefaultPartitions is the number of history streams of a new deployment
// when Options.Partitions is 0.
const DefaultPartitions = 8

// MaxPartitions bounds Options.Partitions.
const MaxPartitions = 64

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Store is the JetStream store. It is safe for concurrent use.
type Store struct {
	opts    Options
	nc      *nats.Conn
	owned   bool
	js      jetstream.JetStream
	streams []jetstream.Stream // one per partition
	meta    jetstream.KeyValue
	prefix  string // "<Name>.hist."
	// instance starts the Macp-Append id of every message this store value
	// writes (16 random hex digits, then 16 more per Append call): Own
	// tells its messages from other nodes'.
	instance string

	closed atomic.Bool
	failed atomic.Pointer[error]

	amu sync.Mutex // AppendAsync's check-and-queue step

	mu          sync.Mutex
	tips        map[string]tip     // session id -> last known message
	pend        map[string]pending // session id -> parts in flight
	quarantined map[string]string  // session id -> why
	// fenced: sessions an append of which failed, refused until Unfence
	// (store.Fencer).
	fenced map[string]struct{}
}

// tip is what the store knows of a session's last stored message.
type tip struct {
	streamSeq uint64 // stream sequence of the session's last message
	seq       uint64 // Seq of its last record
	hash      []byte // Hash of its last record
}

var _ store.Store = (*Store)(nil)

// Open connects (unless Options.Conn is set), reads or records the
// deployment's layout, and creates or updates the streams and the meta
// bucket.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Name == "" {
		opts.Name = "macp"
	}
	if !validName.MatchString(opts.Name) {
		return nil, fmt.Errorf("natsstore: name %q: letters, digits, '-' and '_' only", opts.Name)
	}
	if opts.Partitions < 0 || opts.Partitions > MaxPartitions {
		return nil, fmt.Errorf("natsstore: partitions %d: between 1 and %d (0: the recorded layout, else %d)", opts.Partitions, MaxPartitions, DefaultPartitions)
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 3
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.ResolveTimeout <= 0 {
		opts.ResolveTimeout = 30 * time.Second
	}
	if opts.ConsumerReadMin == 0 {
		opts.ConsumerReadMin = DefaultConsumerReadMin
	}
	s := &Store{opts: opts, nc: opts.Conn, prefix: opts.Name + ".hist.", instance: newID()[:16],
		tips: make(map[string]tip), pend: make(map[string]pending), quarantined: make(map[string]string), fenced: make(map[string]struct{})}
	if s.nc == nil {
		nopts := append([]nats.Option{
			nats.Name("macpd"),
			nats.MaxReconnects(-1),
			// Publishes while disconnected fail at once instead of being
			// buffered and sent later (an append's outcome stays knowable).
			nats.ReconnectBufSize(-1),
		}, opts.NATSOptions...)
		nc, err := nats.Connect(opts.URL, nopts...)
		if err != nil {
			return nil, fmt.Errorf("natsstore: connect %s: %w", opts.URL, err)
		}
		s.nc, s.owned = nc, true
	}
	js, err := jetstream.New(s.nc, jetstream.WithDefaultTimeout(opts.Timeout))
	if err != nil {
		s.closeConn()
		return nil, fmt.Errorf("natsstore: %w", err)
	}
	s.js = js
	s.meta, err = retry(ctx, opts.Timeout*12, opts.Timeout, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      opts.Name + "_meta",
			Description: "macpd registrations (internal/store/natsstore)",
			Storage:     jetstream.FileStorage,
			Replicas:    opts.Replicas,
			History:     1,
		})
	})
	if err != nil {
		s.closeConn()
		return nil, fmt.Errorf("natsstore: meta bucket: %w", err)
	}
	parts, err := retry(ctx, opts.Timeout*12, opts.Timeout, s.layout)
	if err != nil {
		s.closeConn()
		return nil, err
	}
	if opts.Partitions != 0 && opts.Partitions != parts {
		s.closeConn()
		return nil, fmt.Errorf("natsstore: %s keeps its history in %d stream(s), as recorded in bucket %s_meta when the deployment was created; MACP_NATS_PARTITIONS (Options.Partitions) %d does not match: leave it unset (0) or set it to %d",
			opts.Name, parts, opts.Name, opts.Partitions, parts)
	}
	s.opts.Partitions = parts
	for i := 0; i < parts; i++ {
		cfg := jetstream.StreamConfig{
			Name:               s.streamName(i),
			Description:        "macpd accepted session history (internal/store/natsstore)",
			Subjects:           []string{s.partPrefix(i) + ">"},
			Storage:            jetstream.FileStorage,
			Replicas:           opts.Replicas,
			Retention:          jetstream.LimitsPolicy,
			Discard:            jetstream.DiscardNew,
			MaxMsgs:            -1,
			MaxBytes:           -1,
			MaxAge:             0,
			AllowAtomicPublish: true,
			DenyDelete:         true,
		}
		st, err := retry(ctx, opts.Timeout*12, opts.Timeout, func(ctx context.Context) (jetstream.Stream, error) {
			return js.CreateOrUpdateStream(ctx, cfg)
		})
		if err != nil {
			s.closeConn()
			return nil, fmt.Errorf("natsstore: stream %s: %w", cfg.Name, err)
		}
		s.streams = append(s.streams, st)
	}
	return s, nil
}

// layoutKey is the meta bucket key of the deployment's layout (not a meta
// key: those start with "k").
const layoutKey = "layout"

// layoutValue is the recorded layout.
type layoutValue struct {
	Partitions int `json:"partitions"`
}

// layout returns the deployment's number of history streams: the recorded
// one; else 1 if the stream of the one-stream layout exists (a deployment
// from before partitions), else Options.Partitions or DefaultPartitions;
// recorded by the first node to get there.
func (s *Store) layout(ctx context.Context) (int, error) {
	read := func(e jetstream.KeyValueEntry) (int, error) {
		var v layoutValue
		if err := json.Unmarshal(e.Value(), &v); err != nil || v.Partitions < 1 || v.Partitions > MaxPartitions {
			return 0, fmt.Errorf("natsstore: bucket %s_meta key %s: bad layout %q", s.opts.Name, layoutKey, e.Value())
		}
		return v.Partitions, nil
	}
	e, err := s.meta.Get(ctx, layoutKey)
	if err == nil {
		return read(e)
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("natsstore: reading the layout: %w", err)
	}
	parts := s.opts.Partitions
	if parts == 0 {
		parts = DefaultPartitions
	}
	_, err = s.js.Stream(ctx, s.opts.Name+"_history")
	switch {
	case err == nil:
		parts = 1
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return 0, fmt.Errorf("natsstore: looking for stream %s_history: %w", s.opts.Name, err)
	}
	b, _ := json.Marshal(layoutValue{Partitions: parts})
	if _, err := s.meta.Create(ctx, layoutKey, b); err != nil {
		if e, gerr := s.meta.Get(ctx, layoutKey); gerr == nil {
			return read(e) // another node recorded it first
		}
		return 0, fmt.Errorf("natsstore: recording the layout: %w", err)
	}
	return parts, nil
}

// streamName is partition i's stream: <Name>_history with one partition
// (the layout from before partitions), else <Name>_history_<i>.
func (s *Store) streamName(i int) string {
	if s.opts.Partitions == 1 {
		return s.opts.Name + "_history"
	}
	return s.opts.Name + "_history_" + strconv.Itoa(i)
}

// partPrefix is the subject prefix of partition i's sessions.
func (s *Store) partPrefix(i int) string {
	if s.opts.Partitions == 1 {
		return s.prefix
	}
	return s.prefix + strconv.Itoa(i) + "."
}

// partition is the partition of a session: FNV-1a (32 bits) of its id,
// modulo the number of partitions. It must never change for a layout.
func (s *Store) partition(id string) int {
	if s.opts.Partitions <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % uint32(s.opts.Partitions))
}

// PartitionOf is the partition (history stream index) of a session.
func (s *Store) PartitionOf(id string) int { return s.partition(id) }

// PartitionIDs returns the ids of the sessions stored in partition p.
func (s *Store) PartitionIDs(ctx context.Context, p int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*s.opts.Timeout)
	defer cancel()
	si, err := s.streams[p].Info(ctx, jetstream.WithSubjectFilter(s.partPrefix(p)+">"))
	if err != nil {
		return nil, fmt.Errorf("natsstore: list sessions of partition %d: %w", p, err)
	}
	var ids []string
	for subj := range si.State.Subjects {
		if id, ok := s.SessionOf(subj); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (s *Store) streamOf(id string) jetstream.Stream { return s.streams[s.partition(id)] }

// retry runs fn, each attempt bounded by attempt, until it succeeds or
// budget (or ctx) runs out: stream and bucket creation fail or go
// unanswered while a cluster is still electing its leaders.
func retry[T any](ctx context.Context, budget, attempt time.Duration, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, attempt)
		v, err := fn(actx)
		acancel()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Store) closeConn() {
	if s.owned && s.nc != nil {
		s.nc.Close()
	}
}

// Conn returns the store's connection (the runtime's cluster watcher and
// the bus binding share it).
func (s *Store) Conn() *nats.Conn { return s.nc }

// JetStream returns the store's JetStream context.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Name returns the prefix of the store's stream, bucket and subjects.
func (s *Store) Name() string { return s.opts.Name }

// Replicas returns the replicas of the stream and buckets macpd creates.
func (s *Store) Replicas() int { return s.opts.Replicas }

// Partitions returns the number of history streams (the deployment's
// recorded layout).
func (s *Store) Partitions() int { return s.opts.Partitions }

// StreamName names the deployment's history: the stream itself with one
// partition, else the prefix of the streams' names (StreamNames).
func (s *Store) StreamName() string { return s.opts.Name + "_history" }

// StreamNames returns the history streams' names, by partition.
func (s *Store) StreamNames() []string {
	out := make([]string, s.opts.Partitions)
	for i := range out {
		out[i] = s.streamName(i)
	}
	return out
}

// Subject returns the history subject of a session.
func (s *Store) Subject(sessionID string) string {
	return s.partPrefix(s.partition(sessionID)) + base64.RawURLEncoding.EncodeToString([]byte(sessionID))
}

// SessionOf returns the session id of a history subject.
func (s *Store) SessionOf(subject string) (string, bool) {
	tok, ok := strings.CutPrefix(subject, s.prefix)
	if !ok {
		return "", false
	}
	if s.opts.Partitions > 1 {
		p, rest, ok := strings.Cut(tok, ".")
		if !ok {
			return "", false
		}
		tok = rest
		id, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || strconv.Itoa(s.partition(string(id))) != p {
			return "", false
		}
		return string(id), true
	}
	id, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", false
	}
	return string(id), true
}

func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if e := s.failed.Load(); e != nil {
		return fmt.Errorf("%w: %w", store.ErrFailed, *e)
	}
	return nil
}

func (s *Store) fail(err error) error {
	s.failed.CompareAndSwap(nil, &err)
	return fmt.Errorf("%w: %w", store.ErrFailed, err)
}

// ---- encoding -----------------------------------------------------------

// encodeValues packs stored record values into one message body: each
// value preceded by its length as a uvarint.
func encodeValues(values [][]byte) []byte {
	n := 0
	for _, v := range values {
		n += binary.MaxVarintLen64 + len(v)
	}
	out := make([]byte, 0, n)
	for _, v := range values {
		out = binary.AppendUvarint(out, uint64(len(v)))
		out = append(out, v...)
	}
	return out
}

// decodeMsg returns the records of one history message, self-checked (not
// yet chained).
func decodeMsg(id string, m *jetstream.RawStreamMsg) ([]session.Record, error) {
	first, err := strconv.ParseUint(m.Header.Get(HeaderSeq), 10, 64)
	if err != nil || first == 0 {
		return nil, record.Corruptf(id, 0, "message %d: bad %s header", m.Sequence, HeaderSeq)
	}
	data := m.Data
	var recs []session.Record
	for seq := first; len(data) > 0; seq++ {
		n, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < n {
			return nil, record.Corruptf(id, seq, "message %d: truncated record", m.Sequence)
		}
		r, err := record.Decode(data[k:k+int(n)], id, seq)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
		data = data[k+int(n):]
	}
	if c := m.Header.Get(HeaderCount); c != strconv.Itoa(len(recs)) {
		return nil, record.Corruptf(id, first, "message %d: %d records, header says %s", m.Sequence, len(recs), c)
	}
	return recs, nil
}

func (s *Store) quarantine(id string, err error) {
	if !errors.Is(err, store.ErrCorrupt) {
		return
	}
	s.mu.Lock()
	if _, ok := s.quarantined[id]; !ok {
		s.quarantined[id] = err.Error()
	}
	s.mu.Unlock()
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ---- reads ----------------------------------------------------------------

// Read implements store.Store. It first gets the session's last message
// (one request). If that message holds the record before from, or the
// session's first record, it alone is read, its chain checked from its
// first record. Otherwise the session's messages are read in stream order
// and the chain is checked from record 1: through an ephemeral consumer
// when the session has at least ConsumerReadMin records (one batch; the
// messages up to the last one seen), then one request per message for
// what that did not deliver (all of it when the consumer could not be
// made) and for anything appended since.
func (s *Store) Read(ctx context.Context, id string, from uint64, fn func(session.Record) error) error {
	if err := s.check(); err != nil {
		return err
	}
	last, err := s.lastMsg(ctx, id)
	if err != nil {
		return err
	}
	first, err := strconv.ParseUint(last.Header.Get(HeaderSeq), 10, 64)
	if err == nil && first > 0 && (first < from || first == 1) {
		recs, err := decodeMsg(id, last)
		if err != nil {
			s.quarantine(id, err)
			return err
		}
		chain := &record.Chain{SessionID: id, Seq: recs[0].Seq - 1, Hash: recs[0].PrevHash}
		if first == 1 {
			chain = record.NewChain(id)
		}
		return s.deliver(id, chain, recs, from, fn)
	}
	subj, st := s.Subject(id), s.streamOf(id)
	chain := record.NewChain(id)
	next := uint64(1)
	each := func(m *jetstream.RawStreamMsg) error {
		recs, err := decodeMsg(id, m)
		if err != nil {
			s.quarantine(id, err)
			return err
		}
		if err := s.deliver(id, chain, recs, from, fn); err != nil {
			return err
		}
		next = m.Sequence + 1
		return nil
	}
	if n := s.opts.ConsumerReadMin; n > 0 && first >= uint64(n) {
		if err := s.readConsumer(ctx, st, subj, last.Sequence, each); err != nil {
			return err
		}
	}
	for {
		gctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		m, err := st.GetMsg(gctx, next, jetstream.WithGetMsgSubject(subj))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fmt.Errorf("natsstore: read session %s: %w", id, err)
		}
		if s.closed.Load() {
			return store.ErrClosed
		}
		if err := each(m); err != nil {
			return err
		}
	}
	if next == 1 {
		return store.ErrNotFound // purged since its last message was read
	}
	return nil
}

// deliver checks recs against chain and hands those from from on to fn.
func (s *Store) deliver(id string, chain *record.Chain, recs []session.Record, from uint64, fn func(session.Record) error) error {
	for _, r := range recs {
		if err := chain.Next(r); err != nil {
			s.quarantine(id, err)
			return err
		}
		if r.Seq < from {
			continue
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// readConsumer hands each of the subject's messages up to stream sequence
// through to each, in order, from an ephemeral pull consumer (no acks, in
// memory, one replica; fetched in batches), and deletes the consumer. An
// error of each is returned; a failure of the consumer is not (Read goes
// on with one request per message from where it stopped). Not an ordered
// consumer: its Fetch recreates the consumer each time, retrying without
// a bound while the meta leader is away.
func (s *Store) readConsumer(ctx context.Context, st jetstream.Stream, subj string, through uint64, each func(*jetstream.RawStreamMsg) error) error {
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	// Creating a consumer goes through the JetStream meta leader, which
	// the per-message reads do not need: while it is being elected, fall
	// back soon.
	mctx, mcancel := context.WithTimeout(cctx, min(s.opts.Timeout, time.Second))
	cons, err := st.CreateConsumer(mctx, jetstream.ConsumerConfig{
		FilterSubject: subj, DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		MemoryStorage: true, Replicas: 1, InactiveThreshold: s.opts.Timeout,
	})
	mcancel()
	if err != nil {
		return nil
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
		defer cancel()
		_ = st.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	for {
		batch, err := cons.Fetch(256, jetstream.FetchContext(cctx))
		if err != nil {
			return nil
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil
			}
			raw := &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp}
			if err := each(raw); err != nil {
				return err
			}
			if md.Sequence.Stream >= through {
				return nil
			}
		}
		if batch.Error() != nil {
			return nil
		}
	}
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(ctx context.Context, id string) (uint64, error) {
	info, err := s.Info(ctx, id)
	if err != nil {
		return 0, err
	}
	return info.LastSeq, nil
}

// Info implements store.Store: the summary of the session's last record.
func (s *Store) Info(ctx context.Context, id string) (store.SessionInfo, error) {
	if err := s.check(); err != nil {
		return store.SessionInfo{}, err
	}
	m, err := s.lastMsg(ctx, id)
	if err != nil {
		return store.SessionInfo{}, err
	}
	info := store.SessionInfo{SessionID: id}
	recs, err := decodeMsg(id, m)
	if err != nil {
		s.quarantine(id, err)
		info.Quarantined = err.Error()
		return info, nil
	}
	info = record.InfoOf(recs[len(recs)-1])
	s.mu.Lock()
	info.Quarantined = s.quarantined[id]
	s.mu.Unlock()
	return info, nil
}

// ids returns every stored session id in order: the subjects of every
// partition's stream.
func (s *Store) ids(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*s.opts.Timeout)
	defer cancel()
	var ids []string
	for i, st := range s.streams {
		si, err := st.Info(ctx, jetstream.WithSubjectFilter(s.partPrefix(i)+">"))
		if err != nil {
			return nil, fmt.Errorf("natsstore: list sessions: %w", err)
		}
		for subj := range si.State.Subjects {
			if id, ok := s.SessionOf(subj); ok {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// listInFlight bounds the last-message requests List keeps in flight, and
// listWindow how many summaries it reads ahead of fn.
const (
	listInFlight = 16
	listWindow   = 256
)

// List implements store.Store: one request for the subjects, then one per
// session, up to listInFlight at a time (a boot with many stored sessions
// waits for their round trips side by side, not one after another), fn
// called in id order.
func (s *Store) List(ctx context.Context, fn func(store.SessionInfo) error) error {
	if err := s.check(); err != nil {
		return err
	}
	ids, err := s.ids(ctx)
	if err != nil {
		return err
	}
	infos := make([]store.SessionInfo, min(len(ids), listWindow))
	errs := make([]error, len(infos))
	for len(ids) > 0 {
		win := ids[:min(len(ids), listWindow)]
		ids = ids[len(win):]
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(listInFlight)
		for i, id := range win {
			g.Go(func() error {
				infos[i], errs[i] = s.Info(gctx, id)
				if errs[i] != nil && !errors.Is(errs[i], store.ErrNotFound) {
					return errs[i] // stops the window's other requests
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		for i := range win {
			if errors.Is(errs[i], store.ErrNotFound) {
				continue // purged meanwhile
			}
			if err := fn(infos[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// ListOpen implements store.Store. It filters List: its cost grows with
// all stored sessions (see the package doc).
func (s *Store) ListOpen(ctx context.Context, fn func(store.SessionInfo) error) error {
	return s.List(ctx, store.OpenOnly(fn))
}

// Purge implements store.Store: the session's subject is purged.
func (s *Store) Purge(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	info, err := s.Info(ctx, id)
	if err != nil {
		return err
	}
	if info.Quarantined != "" {
		return fmt.Errorf("%w: session %s is quarantined: %s", store.ErrCorrupt, id, info.Quarantined)
	}
	if !info.Status.Terminal() {
		return fmt.Errorf("%w: session %s is %s", store.ErrNotTerminal, id, info.Status)
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := s.streamOf(id).Purge(pctx, jetstream.WithPurgeSubject(s.Subject(id))); err != nil {
		return fmt.Errorf("natsstore: purge session %s: %w", id, err)
	}
	s.mu.Lock()
	delete(s.tips, id)
	s.mu.Unlock()
	return nil
}

// ---- meta -------------------------------------------------------------------

// metaKey maps a meta key to a bucket key (hex: any bytes, order kept).
func metaKey(k string) string { return "k" + hex.EncodeToString([]byte(k)) }

// PutMeta implements store.Store.
func (s *Store) PutMeta(ctx context.Context, key string, val []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%w: empty meta key", store.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if _, err := s.meta.Put(ctx, metaKey(key), val); err != nil {
		return fmt.Errorf("natsstore: put meta %q: %w", key, err)
	}
	return nil
}

// DeleteMeta implements store.Store.
func (s *Store) DeleteMeta(ctx context.Context, key string) error {
	if err := s.check(); err != nil {
		return err
	}
	if key == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := s.meta.Delete(ctx, metaKey(key)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("natsstore: delete meta %q: %w", key, err)
	}
	return nil
}

// ListMeta implements store.Store: a snapshot of the bucket, filtered and
// sorted.
func (s *Store) ListMeta(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	if err := s.check(); err != nil {
		return err
	}
	kvs, err := s.MetaSnapshot(ctx)
	if err != nil {
		return err
	}
	for _, e := range kvs {
		if !strings.HasPrefix(e.Key, prefix) {
			continue
		}
		if err := fn(e.Key, e.Value); err != nil {
			return err
		}
	}
	return nil
}

// MetaEntry is one meta key and its value.
type MetaEntry struct {
	Key   string
	Value []byte
}

// MetaSnapshot returns every meta entry in key order.
func (s *Store) MetaSnapshot(ctx context.Context) ([]MetaEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*s.opts.Timeout)
	defer cancel()
	w, err := s.meta.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("natsstore: list meta: %w", err)
	}
	defer w.Stop()
	var out []MetaEntry
	for {
		select {
		case e := <-w.Updates():
			if e == nil { // the initial values are done
				slices.SortFunc(out, func(a, b MetaEntry) int { return strings.Compare(a.Key, b.Key) })
				return out, nil
			}
			k, ok := MetaKeyOf(e.Key())
			if ok {
				out = append(out, MetaEntry{Key: k, Value: slices.Clone(e.Value())})
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("natsstore: list meta: %w", ctx.Err())
		}
	}
}

// MetaKeyOf returns the meta key of a bucket key.
func MetaKeyOf(bucketKey string) (string, bool) {
	h, ok := strings.CutPrefix(bucketKey, "k")
	if !ok {
		return "", false
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// MetaBucket returns the meta key-value bucket (the runtime's cluster
// watcher watches it for registry changes made by other nodes).
func (s *Store) MetaBucket() jetstream.KeyValue { return s.meta }

// Close implements store.Store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.closeConn()
	return nil
}

// Decode returns the session and records of a history message delivered
// by a consumer (self-checked, not chained to earlier messages).
func (s *Store) Decode(subject string, hdr nats.Header, data []byte, streamSeq uint64) (string, []session.Record, error) {
	id, ok := s.SessionOf(subject)
	if !ok {
		return "", nil, fmt.Errorf("natsstore: %q is not a history subject", subject)
	}
	recs, err := decodeMsg(id, &jetstream.RawStreamMsg{Subject: subject, Sequence: streamSeq, Header: hdr, Data: data})
	return id, recs, err
}

// Own reports whether a history message (its headers, from a consumer)
// was written by this store value: a node's feed skips its own appends,
// which its runtime has already applied (or will rebuild from the store).
func (s *Store) Own(hdr nats.Header) bool {
	return strings.HasPrefix(hdr.Get(HeaderAppend), s.instance)
}

// Position is a point in the history: the last stream sequence of each
// partition's stream, by partition.
type Position []uint64

// LastPosition returns every history stream's last sequence: consumers
// that start after it (one per stream) see every later append.
func (s *Store) LastPosition(ctx context.Context) (Position, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	pos := make(Position, len(s.streams))
	for i, st := range s.streams {
		info, err := st.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("natsstore: stream info: %w", err)
		}
		pos[i] = info.State.LastSeq
	}
	return pos, nil
}
