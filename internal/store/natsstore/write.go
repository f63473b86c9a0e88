package natsstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/record"
)

// part is one session's share of an Append call: its records, published
// as one message (an atomic batch of several only if they exceed the
// connection's max payload) with the session's expected last sequence.
// Parts of one call are independent of each other; a part waits for the
// session's previous part (dep) before it is published.
type part struct {
	id       string
	recs     []session.Record
	stream   int      // partition index
	appendID string   // Macp-Append of its messages
	tip      tip      // the tip it continues (dep == nil: known when queued)
	dep      *part    // the session's previous part, in flight when queued (cleared when settled)
	base     []byte   // the PrevHash values were encoded with
	values   [][]byte // encoded records, chained from base
	last     []byte   // Hash of the last record

	// succ is the session's next part, queued while this one was in
	// flight; claimed: it is published together with an earlier part
	// (its leader settles it). Both under Store.mu.
	succ    *part
	claimed bool

	done chan struct{} // closed when err is final
	err  error
}

// pending is a session with parts in flight: the Seq and Hash its last
// queued record will have, and that part.
type pending struct {
	seq  uint64
	hash []byte
	part *part
}

var (
	_ store.Pipeliner = (*Store)(nil)
	_ store.Fencer    = (*Store)(nil)
)

// Unfence implements store.Fencer: the session's appends are judged by
// their sequence numbers again.
func (s *Store) Unfence(sessionID string) {
	s.mu.Lock()
	delete(s.fenced, sessionID)
	s.mu.Unlock()
}

// Append implements store.Store: AppendAsync, then its wait.
func (s *Store) Append(ctx context.Context, recs []session.Record) error {
	wait, err := s.AppendAsync(ctx, recs)
	if err != nil {
		return err
	}
	return wait()
}

// AppendAsync implements store.Pipeliner. It checks recs against what the
// store knows of each session (its appends still in flight included, else
// its cached tip, refreshed from the stream if it does not fit), encodes
// them, and publishes each session's part at once, or as soon as the
// session's previous part is acknowledged (its stream sequence is the next
// part's expectation). wait returns when every part was acknowledged by
// the stream, or the first error (store.ErrFailed before any other). See
// the package doc ("Pipelined appends").
func (s *Store) AppendAsync(ctx context.Context, recs []session.Record) (func() error, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return func() error { return nil }, nil
	}
	var parts []*part
	byID := make(map[string]*part)
	for _, r := range recs {
		if !store.ValidSessionID(r.SessionID) {
			return nil, fmt.Errorf("%w: session id %q", store.ErrInvalid, r.SessionID)
		}
		p := byID[r.SessionID]
		if p == nil {
			p = &part{id: r.SessionID, stream: s.partition(r.SessionID), done: make(chan struct{})}
			byID[r.SessionID] = p
			parts = append(parts, p)
		}
		if n := len(p.recs); n > 0 && r.Seq != p.recs[0].Seq+uint64(n) {
			return nil, fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, p.id, r.Seq, p.recs[0].Seq+uint64(n))
		}
		p.recs = append(p.recs, r)
	}
	// One caller at a time checks and queues: a session's parts are queued
	// in the order of the calls.
	s.amu.Lock()
	defer s.amu.Unlock()
	for _, p := range parts {
		if err := s.place(ctx, p); err != nil {
			return nil, err
		}
	}
	appendID := s.instance + newID()[:16]
	limit := int(s.nc.MaxPayload()) - 1024 // headers
	for _, p := range parts {
		p.appendID = appendID
		if err := p.encode(limit, s.nc.MaxPayload()); err != nil {
			return nil, err
		}
	}
	// Nothing can fail any more before publishing: queue. Each goroutine
	// gets its part's dep now: once queued, a part may be claimed and
	// settled by an earlier one, which clears its links.
	deps := make([]*part, len(parts))
	for i, p := range parts {
		deps[i] = p.dep
	}
	s.mu.Lock()
	for _, p := range parts {
		if p.dep != nil {
			p.dep.succ = p
		}
		s.pend[p.id] = pending{seq: p.recs[len(p.recs)-1].Seq, hash: p.last, part: p}
	}
	s.mu.Unlock()
	// A part is settled whatever becomes of the caller's context: its
	// outcome must be known.
	bg := context.WithoutCancel(ctx)
	for i, p := range parts {
		go s.run(bg, p, deps[i])
	}
	return func() error {
		var first error
		for _, p := range parts {
			<-p.done
			if p.err != nil && (first == nil || errors.Is(p.err, store.ErrFailed) && !errors.Is(first, store.ErrFailed)) {
				first = p.err
			}
		}
		if first == nil {
			// An earlier append failed closed: so does every later one.
			if e := s.failed.Load(); e != nil {
				first = fmt.Errorf("%w: %w", store.ErrFailed, *e)
			}
		}
		return first
	}, nil
}

// place finds what p continues: the session's part in flight, or its tip
// (cached, or read from the stream when the cache does not fit). A record
// that continues neither is store.ErrConflict.
func (s *Store) place(ctx context.Context, p *part) error {
	first := p.recs[0].Seq
	for {
		s.mu.Lock()
		if why, ok := s.quarantined[p.id]; ok {
			s.mu.Unlock()
			return fmt.Errorf("%w: session %s is quarantined: %s", store.ErrCorrupt, p.id, why)
		}
		if _, ok := s.fenced[p.id]; ok {
			s.mu.Unlock()
			return fmt.Errorf("%w: session %s: an earlier append of the session failed and the session was not rebuilt from the store since (Unfence)", store.ErrConflict, p.id)
		}
		if pd, ok := s.pend[p.id]; ok {
			s.mu.Unlock()
			if first == pd.seq+1 {
				p.dep, p.base = pd.part, pd.hash
				return nil
			}
			// It does not continue what is in flight: decide once that
			// is settled.
			<-pd.part.done
			continue
		}
		t := s.tips[p.id]
		s.mu.Unlock()
		if t.hash != nil && first == t.seq+1 || t.streamSeq == 0 && t.seq == 0 && first == 1 {
			if t.hash == nil {
				t.hash = store.ZeroHash
			}
			p.tip, p.base = t, t.hash
			return nil
		}
		t, err := s.loadTip(ctx, p.id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if first != t.seq+1 {
			return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, p.id, first, t.seq+1)
		}
		p.tip, p.base = t, t.hash
		return nil
	}
}

// encode chains p's records after base.
func (p *part) encode(limit int, maxPayload int64) error {
	prev := p.base
	p.values = p.values[:0]
	for _, r := range p.recs {
		v, hash, err := record.Encode(r, prev)
		if err != nil {
			return err
		}
		if len(v)+binary.MaxVarintLen64 > limit {
			return fmt.Errorf("%w: session %s record %d: %d bytes, more than the NATS max payload %d", store.ErrInvalid, p.id, r.Seq, len(v), maxPayload)
		}
		p.values = append(p.values, v)
		prev = hash
	}
	p.last = prev
	return nil
}

// msgs builds p's messages: the first carries the expected last subject
// sequence (p.tip.streamSeq).
func (s *Store) msgs(p *part) []*nats.Msg {
	limit := int(s.nc.MaxPayload()) - 1024
	var out []*nats.Msg
	var values [][]byte
	size, first := 0, p.recs[0].Seq
	flush := func() {
		m := nats.NewMsg(s.Subject(p.id))
		m.Header.Set(HeaderAppend, p.appendID)
		m.Header.Set(HeaderSeq, strconv.FormatUint(first, 10))
		m.Header.Set(HeaderCount, strconv.Itoa(len(values)))
		if len(out) == 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.tip.streamSeq, 10))
		}
		m.Data = encodeValues(values)
		out = append(out, m)
		first += uint64(len(values))
		values, size = nil, 0
	}
	for _, v := range p.values {
		if size+len(v)+binary.MaxVarintLen64 > limit {
			flush()
		}
		values = append(values, v)
		size += len(v) + binary.MaxVarintLen64
	}
	flush()
	return out
}

// run publishes p once its session's previous part is settled, together
// with the session's parts queued behind p meanwhile (one message, or an
// atomic batch if they exceed the max payload: a hot session's appends
// go out as one publish per round trip, not one each), and settles them.
func (s *Store) run(ctx context.Context, p, dep *part) {
	var depErr error
	if dep != nil {
		<-dep.done
		depErr = dep.err
	}
	s.mu.Lock()
	if p.claimed {
		s.mu.Unlock()
		return // settled with an earlier part
	}
	group := []*part{p}
	for q := p.succ; q != nil && !q.claimed; q = q.succ {
		// q waits for the part before it, which is in group: not started.
		q.claimed = true
		group = append(group, q)
	}
	s.mu.Unlock()
	m := p
	if len(group) > 1 {
		m = &part{id: p.id, stream: p.stream, appendID: p.appendID, tip: p.tip, base: p.base}
		for _, q := range group {
			m.recs = append(m.recs, q.recs...)
			m.values = append(m.values, q.values...)
		}
		m.last = group[len(group)-1].last
	}
	err := s.runPart(ctx, m, dep != nil, depErr)
	s.mu.Lock()
	for _, q := range group {
		if pd, ok := s.pend[q.id]; ok && pd.part == q {
			delete(s.pend, q.id)
		}
		q.err = err
		// No chain of settled parts is kept alive through its links.
		q.dep, q.succ = nil, nil
	}
	if err != nil {
		delete(s.tips, p.id)
		s.fenced[p.id] = struct{}{}
	}
	s.mu.Unlock()
	for _, q := range group {
		close(q.done)
	}
}

// runPart publishes p, whose session's previous part (if hasDep) ended
// with depErr.
func (s *Store) runPart(ctx context.Context, p *part, hasDep bool, depErr error) error {
	if hasDep {
		if err := depErr; err != nil {
			if errors.Is(err, store.ErrFailed) {
				return err
			}
			return fmt.Errorf("%w: session %s record %d: an earlier append of the session failed: %v", store.ErrConflict, p.id, p.recs[0].Seq, err)
		}
		s.mu.Lock()
		t, ok := s.tips[p.id]
		s.mu.Unlock()
		if !ok || t.seq+1 != p.recs[0].Seq {
			var err error
			if t, err = s.loadTip(ctx, p.id); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if t.seq+1 != p.recs[0].Seq {
				return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, p.id, p.recs[0].Seq, t.seq+1)
			}
		}
		p.tip = t
	}
	limit := int(s.nc.MaxPayload()) - 1024
	for attempt := 0; ; attempt++ {
		if !bytes.Equal(p.tip.hash, p.base) {
			// The session's stored tip is not the one the records were
			// chained to (another node stored it): chain them again.
			p.base = p.tip.hash
			if err := p.encode(limit, s.nc.MaxPayload()); err != nil {
				return err
			}
		}
		msgs := s.msgs(p)
		ack, err := s.publish(ctx, msgs)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			s.mu.Lock()
			t := tip{streamSeq: ack, seq: p.recs[len(p.recs)-1].Seq, hash: p.last}
			if old, ok := s.tips[p.id]; !ok || old.streamSeq < t.streamSeq {
				s.tips[p.id] = t
			}
			s.mu.Unlock()
			return nil
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeWrongLastSeq || apiErr.ErrorCode == errCodeWrongLastSeqConst):
			// The session moved on (or is being written right now):
			// refresh its tip; if the records still continue it, try
			// again, else it is the caller's conflict.
			t, err := s.loadTip(ctx, p.id)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if p.recs[0].Seq != t.seq+1 {
				return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, p.id, p.recs[0].Seq, t.seq+1)
			}
			p.tip = t
			if attempt >= 50 {
				return fmt.Errorf("%w: session %s: the stream kept refusing the expected sequence", store.ErrConflict, p.id)
			}
			time.Sleep(time.Duration(1+attempt) * time.Millisecond)
		case errors.As(err, &apiErr):
			// A definite refusal of another kind: nothing was written.
			return fmt.Errorf("natsstore: append refused: %w", err)
		default:
			// The outcome is unknown (a timeout, a lost connection).
			return s.resolve(ctx, p)
		}
	}
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
func (s *Store) publish(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if len(msgs) > 1 {
		batch := newID()
		for i, m := range msgs {
			m.Header.Set("Nats-Batch-Id", batch)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
			if i == len(msgs)-1 {
				m.Header.Set("Nats-Batch-Commit", "1")
				break
			}
			if err := s.nc.PublishMsg(m); err != nil {
				return 0, err
			}
		}
	}
	resp, err := s.nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1])
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
	m, err := s.streamOf(id).GetLastMsgForSubject(ctx, s.Subject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("natsstore: session %s: %w", id, err)
	}
	return m, nil
}

// resolve decides a part whose answer was lost. Its first message, if
// stored, is the first message on the session's subject after the tip it
// expected (a part of several messages is an atomic batch, so that message
// tells for all of them). Not there yet: publish again with the same
// expectation (at most one of the attempts can be stored). Another
// append's message there: conflict. Undecided when ResolveTimeout runs
// out: the store fails closed.
func (s *Store) resolve(ctx context.Context, p *part) error {
	deadline := time.Now().Add(s.opts.ResolveTimeout)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if s.closed.Load() {
			return s.fail(errors.New("closed while an append's outcome was unknown"))
		}
		if time.Now().After(deadline) {
			return s.fail(fmt.Errorf("session %s: the outcome of an append is unknown", p.id))
		}
		gctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		m, err := s.streamOf(p.id).GetMsg(gctx, p.tip.streamSeq+1, jetstream.WithGetMsgSubject(s.Subject(p.id)))
		cancel()
		switch {
		case err == nil && m.Header.Get(HeaderAppend) == p.appendID:
			// Stored. The tip is reloaded when next needed.
			s.forgetTip(p.id)
			return nil
		case err == nil:
			s.forgetTip(p.id)
			return fmt.Errorf("%w: session %s: another append was stored first", store.ErrConflict, p.id)
		case errors.Is(err, jetstream.ErrMsgNotFound):
			// Any answer but success (a refusal: the first attempt
			// was stored meanwhile, or is in flight) is decided by
			// reading again.
			if _, perr := s.publish(ctx, s.msgs(p)); perr == nil {
				s.forgetTip(p.id)
				return nil
			}
		}
		time.Sleep(wait)
	}
}

func (s *Store) forgetTip(id string) {
	s.mu.Lock()
	delete(s.tips, id)
	s.mu.Unlock()
}
