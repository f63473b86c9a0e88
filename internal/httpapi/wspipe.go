package httpapi

import (
	"context"
	"encoding/json"

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
	req  *jsonrpc.Request
	wait func() *macpv1.Ack
}

// wsPipe answers a connection's pipelined macp/send requests on one
// goroutine, in admission order (within a session that is acceptance
// order). Other methods are answered by the read loop as soon as they are
// handled, so their responses may overtake earlier macp/send answers:
// clients match responses by id (JSON-RPC 2.0 §6 allows any order).
type wsPipe struct {
	queue chan wsPending // capacity WSSendWindow: the window
	done  chan struct{}
}

func newWSPipe() *wsPipe {
	return &wsPipe{queue: make(chan wsPending, WSSendWindow), done: make(chan struct{})}
}

// run answers the queued requests until the queue is closed; enqueue is
// the connection's writer queue.
func (p *wsPipe) run(ctx context.Context, enqueue func(context.Context, []byte) bool) {
	defer close(p.done)
	for pd := range p.queue {
		ack := pd.wait()
		if ctx.Err() != nil {
			continue // the connection ended: nobody reads the answer
		}
		if b := jsonrpc.Reply(pd.req, ackResult(ack), nil); b != nil {
			enqueue(ctx, b)
		}
	}
}

// push queues an admitted request, waiting while the window is full; false
// when ctx ended first (the wait is then run and dropped here).
func (p *wsPipe) push(ctx context.Context, pd wsPending) bool {
	select {
	case p.queue <- pd:
		return true
	default:
	}
	select {
	case p.queue <- pd:
		return true
	case <-ctx.Done():
		pd.wait()
		return false
	}
}

// stop closes the queue once the read loop returned and waits for the
// answerer; the connection's context is cancelled first, so outstanding
// waits return promptly.
func (p *wsPipe) stop() {
	close(p.queue)
	<-p.done
}

// ackResult is macp/send's result: the Ack itself (issue #14).
func ackResult(ack *macpv1.Ack) any {
	ab, err := wire.Compact(ack)
	if err != nil {
		return json.RawMessage(`{"ok":false,"error":{"code":"INTERNAL_ERROR","message":"the ack could not be encoded"}}`)
	}
	return json.RawMessage(ab)
}
