package httpapi

import (
	"context"
	"encoding/json"
	"sync/atomic"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/jsonrpc"
	"github.com/macpd/macpd/internal/wire"
)

// WSSendWindow bounds the macp/send requests one WebSocket connection has
// admitted and not yet answered. The read loop admits each macp/send as it
// arrives (runtime.SendPipelined: admission, decision and submission to the
// group committer, in the order the requests arrive on the connection) and
// hands its wait to the connection's answerer; when WSSendWindow requests
// are outstanding it reads no further message until the oldest is
// answered. Memory per connection is therefore bounded by the window
// (each outstanding request holds its decoded envelope and its Ack) plus
// the outgoing queue.
const WSSendWindow = 64

// wsPending is one admitted macp/send awaiting its Ack.
type wsPending struct {
	req   *jsonrpc.Request // nil: a binary send frame
	frame uint64           // the binary frame's id
	wait  func() *macpv1.Ack
}

// wsPipe answers a connection's pipelined macp/send requests on one
// goroutine, in admission order (within a session that is acceptance
// order). Other methods are answered by the read loop as soon as they are
// handled, so their responses may overtake earlier macp/send answers:
// clients match responses by id (JSON-RPC 2.0 §6 allows any order).
type wsPipe struct {
	slots chan struct{}  // one per outstanding request: the window
	queue chan wsPending // the waits, in admission order
	done  chan struct{}
}

// wsPeakOutstanding is the most macp/send requests any connection has had
// outstanding at once (tests check it never exceeds WSSendWindow).
var wsPeakOutstanding atomic.Int64

func newWSPipe() *wsPipe {
	return &wsPipe{slots: make(chan struct{}, WSSendWindow), queue: make(chan wsPending, WSSendWindow), done: make(chan struct{})}
}

// run answers the queued requests until the queue is closed; enqueue is
// the connection's writer queue.
func (p *wsPipe) run(ctx context.Context, enqueue func(context.Context, []byte) bool) {
	defer close(p.done)
	for pd := range p.queue {
		ack := pd.wait()
		if ctx.Err() == nil { // else the connection ended: nobody reads the answer
			if pd.req == nil {
				enqueue(ctx, appendFrame(frameAck, pd.frame, ack))
			} else if !pd.req.IsNotification() {
				enqueue(ctx, ackReply(pd.req.ID, ackResult(ack)))
			}
		}
		<-p.slots
	}
}

// admit takes a slot, waiting while the window is full, then runs send
// (the synchronous half of runtime.SendPipelined) and queues its wait for
// the answerer. False when ctx ended while waiting: nothing was sent.
func (p *wsPipe) admit(ctx context.Context, req *jsonrpc.Request, send func() func() *macpv1.Ack) bool {
	return p.admitPending(ctx, wsPending{req: req}, send)
}

// admitFrame is admit for a binary send frame with id.
func (p *wsPipe) admitFrame(ctx context.Context, id uint64, send func() func() *macpv1.Ack) bool {
	return p.admitPending(ctx, wsPending{frame: id}, send)
}

func (p *wsPipe) admitPending(ctx context.Context, pd wsPending, send func() func() *macpv1.Ack) bool {
	select {
	case p.slots <- struct{}{}:
	default:
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
	}
	if n := int64(len(p.slots)); n > wsPeakOutstanding.Load() {
		wsPeakOutstanding.Store(n) // a high-water mark; races only lower it
	}
	pd.wait = send()
	p.queue <- pd // never blocks: a slot is held
	return true
}

// stop closes the queue once the read loop returned and waits for the
// answerer; the connection's context is cancelled first, so outstanding
// waits return promptly.
func (p *wsPipe) stop() {
	close(p.queue)
	<-p.done
}

// ackReply is the JSON-RPC response carrying ack, built directly (the
// request's id was decoded from valid JSON, the Ack is compact JSON), as
// jsonrpc.Reply would encode it, without another pass of encoding/json.
func ackReply(id json.RawMessage, ack json.RawMessage) []byte {
	const head, mid = `{"jsonrpc":"2.0","id":`, `,"result":`
	b := make([]byte, 0, len(head)+len(id)+len(mid)+len(ack)+1)
	b = append(b, head...)
	b = append(b, id...)
	b = append(b, mid...)
	b = append(b, ack...)
	return append(b, '}')
}

// ackResult is macp/send's result: the Ack itself (issue #14).
func ackResult(ack *macpv1.Ack) json.RawMessage {
	ab, err := wire.Compact(ack)
	if err != nil {
		return json.RawMessage(`{"ok":false,"error":{"code":"INTERNAL_ERROR","message":"the ack could not be encoded"}}`)
	}
	return json.RawMessage(ab)
}
