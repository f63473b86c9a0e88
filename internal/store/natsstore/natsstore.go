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
	// Name prefixes the stream, the bucket and the subjects (default
	// "macp"): stream <Name>_history with subjects <Name>.hist.>, key-value
	// bucket <Name>_meta. Letters, digits, '-' and '_' only.
	Name string
	// Replicas of the stream and the bucket (default 3; 1 for a single
	// NATS server).
	Replicas int
	// Timeout bounds each JetStream request (default 5 s).
	Timeout time.Duration
	// ResolveTimeout bounds how long an append whose outcome was lost (a
	// timeout, a lost connection) is resolved by reading the stream and
	// retrying, before the store fails closed (default 30 s).
	ResolveTimeout time.Duration
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Store is the JetStream store. It is safe for concurrent use.
type Store struct {
	opts   Options
	nc     *nats.Conn
	owned  bool
	js     jetstream.JetStream
	stream jetstream.Stream
	meta   jetstream.KeyValue
	prefix string // "<Name>.hist."

	closed atomic.Bool
	failed atomic.Pointer[error]

	mu          sync.Mutex
	tips        map[string]tip    // session id -> last known message
	quarantined map[string]string // session id -> why
}

// tip is what the store knows of a session's last stored message.
type tip struct {
	streamSeq uint64 // stream sequence of the session's last message
	seq       uint64 // Seq of its last record
	hash      []byte // Hash of its last record
}

var _ store.Store = (*Store)(nil)

// Open connects (unless Options.Conn is set) and creates or updates the
// stream and the meta bucket.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Name == "" {
		opts.Name = "macp"
	}
	if !validName.MatchString(opts.Name) {
		return nil, fmt.Errorf("natsstore: name %q: letters, digits, '-' and '_' only", opts.Name)
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
	s := &Store{opts: opts, nc: opts.Conn, prefix: opts.Name + ".hist.", tips: make(map[string]tip), quarantined: make(map[string]string)}
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
	cfg := jetstream.StreamConfig{
		Name:               opts.Name + "_history",
		Description:        "macpd accepted session history (internal/store/natsstore)",
		Subjects:           []string{s.prefix + ">"},
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
	s.stream, err = retry(ctx, opts.Timeout*12, opts.Timeout, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, cfg)
	})
	if err != nil {
		s.closeConn()
		return nil, fmt.Errorf("natsstore: stream %s: %w", cfg.Name, err)
	}
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
	return s, nil
}

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

// StreamName is the history stream's name.
func (s *Store) StreamName() string { return s.opts.Name + "_history" }

// Subject returns the history subject of a session.
func (s *Store) Subject(sessionID string) string {
	return s.prefix + base64.RawURLEncoding.EncodeToString([]byte(sessionID))
}

// SessionOf returns the session id of a history subject.
func (s *Store) SessionOf(subject string) (string, bool) {
	tok, ok := strings.CutPrefix(subject, s.prefix)
	if !ok {
		return "", false
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

// ---- Append ---------------------------------------------------------------

// group is one session's part of an Append call.
type group struct {
	id   string
	recs []session.Record
	tip  tip
	last []byte // Hash of the last record, set by build
}

// outMsg is one message of an append.
type outMsg struct {
	g     int // index of its group
	first bool
	msg   *nats.Msg
}

// Append implements store.Store: one message per session (more if its
// records exceed the connection's max payload), all published as one
// JetStream atomic batch, each session's first message carrying
// Nats-Expected-Last-Subject-Sequence. See the package doc.
func (s *Store) Append(ctx context.Context, recs []session.Record) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	var groups []*group
	byID := make(map[string]*group)
	for _, r := range recs {
		if !store.ValidSessionID(r.SessionID) {
			return fmt.Errorf("%w: session id %q", store.ErrInvalid, r.SessionID)
		}
		g := byID[r.SessionID]
		if g == nil {
			g = &group{id: r.SessionID}
			byID[r.SessionID] = g
			groups = append(groups, g)
		}
		g.recs = append(g.recs, r)
	}
	s.mu.Lock()
	for _, g := range groups {
		if why, ok := s.quarantined[g.id]; ok {
			s.mu.Unlock()
			return fmt.Errorf("%w: session %s is quarantined: %s", store.ErrCorrupt, g.id, why)
		}
		g.tip = s.tips[g.id]
	}
	s.mu.Unlock()
	// Check continuity against the cached tips; a tip that does not fit is
	// refreshed from the stream (another node may have appended).
	for _, g := range groups {
		if g.recs[0].Seq == g.tip.seq+1 && g.tip.hash != nil || g.tip.seq == 0 && g.tip.streamSeq == 0 && g.recs[0].Seq == 1 {
			if g.tip.hash == nil {
				g.tip.hash = store.ZeroHash
			}
			continue
		}
		if err := s.refresh(ctx, g); err != nil {
			return err
		}
		if g.recs[0].Seq != g.tip.seq+1 {
			return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, g.id, g.recs[0].Seq, g.tip.seq+1)
		}
	}
	for _, g := range groups {
		for i, r := range g.recs {
			if r.Seq != g.recs[0].Seq+uint64(i) {
				return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, g.id, r.Seq, g.recs[0].Seq+uint64(i))
			}
		}
	}
	appendID := newID()
	for attempt := 0; ; attempt++ {
		msgs, lasts, err := s.build(groups, appendID)
		if err != nil {
			return err
		}
		ack, err := s.publish(ctx, msgs)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			s.stored(groups, lasts, ack, len(msgs))
			return nil
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeWrongLastSeq || apiErr.ErrorCode == errCodeWrongLastSeqConst):
			// Some session moved on (or is being written right now):
			// refresh every tip; if the records still continue them,
			// try again, else it is the caller's conflict.
			for _, g := range groups {
				if err := s.refresh(ctx, g); err != nil {
					return err
				}
				if g.recs[0].Seq != g.tip.seq+1 {
					return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, g.id, g.recs[0].Seq, g.tip.seq+1)
				}
			}
			if attempt >= 50 {
				return fmt.Errorf("%w: session %s: the stream kept refusing the expected sequence", store.ErrConflict, groups[0].id)
			}
			time.Sleep(time.Duration(1+attempt) * time.Millisecond)
		case errors.As(err, &apiErr):
			// A definite refusal of another kind: nothing was written.
			return fmt.Errorf("natsstore: append refused: %w", err)
		default:
			// The outcome is unknown (a timeout, a lost connection).
			return s.resolve(ctx, groups, appendID)
		}
	}
}

// build encodes the groups' records chained after their tips into messages.
// lasts[i] is the index in msgs of group i's last message.
func (s *Store) build(groups []*group, appendID string) ([]outMsg, []int, error) {
	limit := int(s.nc.MaxPayload()) - 1024 // headers
	var msgs []outMsg
	lasts := make([]int, len(groups))
	for gi, g := range groups {
		prev := g.tip.hash
		var values [][]byte
		size, first := 0, g.recs[0].Seq
		flush := func(isFirst bool) {
			m := nats.NewMsg(s.Subject(g.id))
			m.Header.Set(HeaderAppend, appendID)
			m.Header.Set(HeaderSeq, strconv.FormatUint(first, 10))
			m.Header.Set(HeaderCount, strconv.Itoa(len(values)))
			if isFirst {
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(g.tip.streamSeq, 10))
			}
			m.Data = encodeValues(values)
			msgs = append(msgs, outMsg{g: gi, first: isFirst, msg: m})
			first += uint64(len(values))
			values, size = nil, 0
		}
		isFirst := true
		for _, r := range g.recs {
			v, hash, err := record.Encode(r, prev)
			if err != nil {
				return nil, nil, err
			}
			if len(v)+binary.MaxVarintLen64 > limit {
				return nil, nil, fmt.Errorf("%w: session %s record %d: %d bytes, more than the NATS max payload %d", store.ErrInvalid, g.id, r.Seq, len(v), s.nc.MaxPayload())
			}
			if size+len(v)+binary.MaxVarintLen64 > limit {
				flush(isFirst)
				isFirst = false
			}
			values = append(values, v)
			size += len(v) + binary.MaxVarintLen64
			prev = hash
		}
		flush(isFirst)
		lasts[gi] = len(msgs) - 1
		g.last = prev
	}
	return msgs, lasts, nil
}

// pubAck is the JetStream answer to a publish or a batch commit.
type pubAck struct {
	Stream string              `json:"stream"`
	Seq    uint64              `json:"seq"`
	Count  int                 `json:"count"`
	Error  *jetstream.APIError `json:"error"`
}

// publish sends msgs as one message or one atomic batch and returns the
// stream sequence of the last one. An *jetstream.APIError is a definite
// refusal (nothing written); any other error leaves the outcome unknown.
func (s *Store) publish(ctx context.Context, msgs []outMsg) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if len(msgs) > 1 {
		batch := newID()
		for i, m := range msgs {
			m.msg.Header.Set("Nats-Batch-Id", batch)
			m.msg.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
			if i == len(msgs)-1 {
				m.msg.Header.Set("Nats-Batch-Commit", "1")
				break
			}
			if err := s.nc.PublishMsg(m.msg); err != nil {
				return 0, err
			}
		}
	}
	resp, err := s.nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1].msg)
	if err != nil {
		return 0, err
	}
	var ack pubAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("natsstore: bad publish answer %q: %w", resp.Data, err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if ack.Seq == 0 {
		return 0, fmt.Errorf("natsstore: publish answer without a sequence: %q", resp.Data)
	}
	return ack.Seq, nil
}

// stored updates the tips after an acknowledged append: an atomic batch is
// stored contiguously, ending at last.
func (s *Store) stored(groups []*group, lasts []int, last uint64, n int) {
	first := last - uint64(n) + 1
	s.mu.Lock()
	defer s.mu.Unlock()
	for gi, g := range groups {
		r := g.recs[len(g.recs)-1]
		t := tip{streamSeq: first + uint64(lasts[gi]), seq: r.Seq, hash: g.last}
		if old, ok := s.tips[g.id]; !ok || old.streamSeq < t.streamSeq {
			s.tips[g.id] = t
		}
	}
}

// refresh loads g's tip from the stream.
func (s *Store) refresh(ctx context.Context, g *group) error {
	t, err := s.loadTip(ctx, g.id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	g.tip = t
	return nil
}

// loadTip reads a session's last message; ErrNotFound (with a zero tip
// whose hash is ZeroHash) if it has none.
func (s *Store) loadTip(ctx context.Context, id string) (tip, error) {
	m, err := s.lastMsg(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		s.mu.Lock()
		delete(s.tips, id)
		s.mu.Unlock()
		return tip{hash: store.ZeroHash}, err
	}
	if err != nil {
		return tip{}, err
	}
	recs, err := decodeMsg(id, m)
	if err != nil {
		s.quarantine(id, err)
		return tip{}, err
	}
	last := recs[len(recs)-1]
	t := tip{streamSeq: m.Sequence, seq: last.Seq, hash: last.Hash}
	s.mu.Lock()
	s.tips[id] = t
	s.mu.Unlock()
	return t, nil
}

func (s *Store) lastMsg(ctx context.Context, id string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	m, err := s.stream.GetLastMsgForSubject(ctx, s.Subject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("natsstore: session %s: %w", id, err)
	}
	return m, nil
}

// resolve decides an append whose answer was lost. Its first group's
// message, if stored, is the first message on that subject after the tip
// it expected; the batch is atomic, so that message tells for all of them.
// Not there yet: publish again with the same expectations (at most one of
// the attempts can be stored). Another append's message there: conflict.
// Undecided when ResolveTimeout runs out: the store fails closed.
func (s *Store) resolve(ctx context.Context, groups []*group, appendID string) error {
	deadline := time.Now().Add(s.opts.ResolveTimeout)
	g := groups[0]
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if s.closed.Load() {
			return s.fail(errors.New("closed while an append's outcome was unknown"))
		}
		if time.Now().After(deadline) {
			return s.fail(fmt.Errorf("session %s: the outcome of an append is unknown", g.id))
		}
		gctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		m, err := s.stream.GetMsg(gctx, g.tip.streamSeq+1, jetstream.WithGetMsgSubject(s.Subject(g.id)))
		cancel()
		switch {
		case err == nil && m.Header.Get(HeaderAppend) == appendID:
			// Stored. The tips are reloaded when next needed.
			s.forgetTips(groups)
			return nil
		case err == nil:
			s.forgetTips(groups)
			return fmt.Errorf("%w: session %s: another append was stored first", store.ErrConflict, g.id)
		case errors.Is(err, jetstream.ErrMsgNotFound):
			msgs, _, berr := s.build(groups, appendID)
			if berr != nil {
				return berr
			}
			// Any answer but success (a refusal: the first attempt
			// was stored meanwhile, or is in flight) is decided by
			// reading again.
			if _, perr := s.publish(ctx, msgs); perr == nil {
				s.forgetTips(groups)
				return nil
			}
		}
		time.Sleep(wait)
	}
}

func (s *Store) forgetTips(groups []*group) {
	s.mu.Lock()
	for _, g := range groups {
		delete(s.tips, g.id)
	}
	s.mu.Unlock()
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

// Read implements store.Store. It reads the session's messages in stream
// order, one request each, and checks the chain from record 1.
func (s *Store) Read(ctx context.Context, id string, from uint64, fn func(session.Record) error) error {
	if err := s.check(); err != nil {
		return err
	}
	subj := s.Subject(id)
	chain := record.NewChain(id)
	next := uint64(1)
	found := false
	for {
		gctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		m, err := s.stream.GetMsg(gctx, next, jetstream.WithGetMsgSubject(subj))
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
		found = true
		next = m.Sequence + 1
		recs, err := decodeMsg(id, m)
		if err != nil {
			s.quarantine(id, err)
			return err
		}
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
	}
	if !found {
		return store.ErrNotFound
	}
	return nil
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

// ids returns every stored session id in order.
func (s *Store) ids(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*s.opts.Timeout)
	defer cancel()
	si, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("natsstore: list sessions: %w", err)
	}
	ids := make([]string, 0, len(si.State.Subjects))
	for subj := range si.State.Subjects {
		if id, ok := s.SessionOf(subj); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// List implements store.Store: one request for the subjects, then one per
// session.
func (s *Store) List(ctx context.Context, fn func(store.SessionInfo) error) error {
	if err := s.check(); err != nil {
		return err
	}
	ids, err := s.ids(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		info, err := s.Info(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			return err
		}
		if err := fn(info); err != nil {
			return err
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
	if err := s.stream.Purge(pctx, jetstream.WithPurgeSubject(s.Subject(id))); err != nil {
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

// LastStreamSeq returns the stream's last sequence number: a consumer that
// starts after it sees every later append.
func (s *Store) LastStreamSeq(ctx context.Context) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("natsstore: stream info: %w", err)
	}
	return info.State.LastSeq, nil
}
