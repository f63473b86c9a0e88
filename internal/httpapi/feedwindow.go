package httpapi

import (
	"context"
	"encoding/json"
	goruntime "runtime"
	"strconv"
	"sync/atomic"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/streambudget"
)

// Stream buffers of the HTTP feeds (docs/security.md "Stream buffers"):
// every follower of this package (an SSE feed, a WebSocket macp/subscribe
// subscription, a protocol-mode attachment) reads the session through a
// streambudget.Window, so what it holds for a client that does not read
// counts against the same per-stream bound and global budget as a gRPC
// StreamSession. A record is charged (streambudget.Cost) before the
// follower reads it, and released once its message has been written to
// the connection (the write returned: the bytes are in the kernel), or
// dropped. The JSON of a record (base64 payload, about 1.34 times the
// encoded envelope) is within its cost. A feed whose client takes nothing
// for MACP_STREAM_STALL_TIMEOUT_MS while it holds something ends with
// RATE_LIMITED, and the client resumes with its cursor.

// feedWindow is one follower's window. The follower holds it until it
// ends (end), and every queued message until it is written or dropped;
// the window closes when the last hold is dropped, so a message still
// queued for the writer after its follower ended stays charged.
type feedWindow struct {
	w     *streambudget.Window
	holds atomic.Int64
}

func (s *Server) newFeedWindow() *feedWindow {
	f := &feedWindow{w: s.rt.StreamBudget().NewWindow()}
	f.holds.Store(1)
	return f
}

func (f *feedWindow) drop() {
	if f.holds.Add(-1) == 0 {
		f.w.Close()
	}
}

// end drops the follower's hold.
func (f *feedWindow) end() { f.drop() }

// queued returns the charge of a record the follower charged cost for,
// held until done.
func (f *feedWindow) queued(cost int64) *feedCharge {
	f.holds.Add(1)
	return &feedCharge{f: f, cost: cost}
}

// feedCharge is one record's charge while its message is encoded, queued
// and written.
type feedCharge struct {
	f     *feedWindow
	cost  int64 // charged by the follower (pending until moved)
	moved bool  // cost was moved to sent (grow)
	extra int64 // charged by grow (sent)
	once  atomic.Bool
}

// grow charges more when the feed holds more than the record's cost for
// it (held bytes in all: a JSON encoding larger than the record's wire
// size, or the decoded record and its JSON at once while an SSE event is
// written), waiting while the budget does not allow it. Called by the
// follower only.
func (c *feedCharge) grow(ctx context.Context, held int64) error {
	n := held - c.cost - c.extra
	if n <= 0 {
		return nil
	}
	if !c.moved {
		// Nothing of this stream is pending now, so the per-stream bound
		// lets the follower take n (as it lets it take one record).
		c.f.w.Sent(c.cost)
		c.moved = true
	}
	if err := c.f.w.Acquire(ctx, n); err != nil {
		return err
	}
	c.f.w.Sent(n)
	c.extra += n
	return nil
}

// done ends the charge: written (the message was written to the
// connection) or dropped. Only the first call counts.
func (c *feedCharge) done(written bool) {
	if !c.once.CompareAndSwap(false, true) {
		return
	}
	w := c.f.w
	switch {
	case c.moved:
		w.ReleaseSent(c.cost + c.extra)
	case written:
		w.Sent(c.cost)
		w.ReleaseSent(c.cost)
	default:
		w.Release(c.cost)
	}
	c.f.drop()
}

// outMsg is one message queued for a connection's writer; its charge
// (if any) is done once it was written (true) or dropped (false).
type outMsg struct {
	b      []byte
	charge *feedCharge
	// batch: the session of a notifications/macp/envelope that may leave
	// in a notifications/macp/envelopes with its neighbours (wsbatch.go);
	// "" for every other message.
	batch string
}

func (m outMsg) finish(written bool) {
	if m.charge != nil {
		m.charge.done(written)
	}
}

// enqueueOut queues m on out until ctx or conn ends; a message not queued
// is dropped (finish(false)).
func enqueueOut(out chan<- outMsg, ctx, conn context.Context, m outMsg) bool {
	if ctx.Err() != nil || conn.Err() != nil {
		m.finish(false)
		return false
	}
	select {
	case out <- m:
		return true
	case <-ctx.Done():
	case <-conn.Done():
	}
	m.finish(false)
	return false
}

// drainOut drops what is left in out once nothing enqueues any more.
func drainOut(out <-chan outMsg) {
	for {
		select {
		case m := <-out:
			m.finish(false)
		default:
			return
		}
	}
}

// envelopeNotification is the notifications/macp/envelope message for an
// envelope's JSON b (json.RawMessage as jsonrpc.Notify would write it,
// built in one allocation of its exact size: a large envelope is not
// copied again through encoding/json).
const envelopeHead = `{"jsonrpc":"2.0","method":"` + rpcEnvelope + `","params":{"sessionId":`

func envelopeNotification(sid string, seq uint64, b []byte) []byte {
	sidJSON, _ := json.Marshal(sid)
	const (
		head = envelopeHead
		mid  = `,"sessionEventId":`
		env  = `,"envelope":`
		tail = `}}`
	)
	out := make([]byte, 0, len(head)+len(sidJSON)+len(mid)+20+len(env)+len(b)+len(tail))
	out = append(out, head...)
	out = append(out, sidJSON...)
	out = append(out, mid...)
	out = strconv.AppendUint(out, seq, 10)
	out = append(out, env...)
	out = append(out, b...)
	return append(out, tail...)
}

// encodeSlots bounds how many followers encode an envelope's JSON at
// once: encoding is CPU work, so more at once than there are CPUs only
// adds the transient copies of a large envelope (its base64 and JSON)
// that a follower holds while it encodes.
var encodeSlots = make(chan struct{}, max(goruntime.GOMAXPROCS(0), 2))

// encodeFeed is s.enc.encode within an encode slot.
func (s *Server) encodeFeed(ctx context.Context, seq uint64, env *macpv1.Envelope, view bool) ([]byte, error) {
	select {
	case encodeSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-encodeSlots }()
	return s.enc.encode(seq, env, view)
}
