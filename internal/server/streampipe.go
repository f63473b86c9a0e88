package server

import (
	"context"
	"sync"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// streamAckWindow bounds the envelopes one StreamSession call has admitted
// and not yet answered (each holds its decided records in the group
// committer until they are durable). It equals the stream's outgoing
// queue (StreamSession's out channel) and the load generator's default
// window. When it is full the receive loop waits for the oldest.
const streamAckWindow = 64

// ackPipe answers a stream's pipelined envelopes (runtime.SendPipelined)
// in admission order on one goroutine, so the receive loop can admit the
// next envelope while earlier ones are being committed. answer runs with
// each Ack, in order, once the runtime has it (ok only once durable).
type ackPipe struct {
	answer func(*macpv1.Ack)
	slots  chan struct{}           // one per outstanding envelope
	queue  chan func() *macpv1.Ack // the waits, in admission order
	start  sync.Once
	done   chan struct{} // closed when the goroutine returned
}

func newAckPipe(answer func(*macpv1.Ack)) *ackPipe {
	return &ackPipe{
		answer: answer,
		slots:  make(chan struct{}, streamAckWindow),
		queue:  make(chan func() *macpv1.Ack, streamAckWindow),
		done:   make(chan struct{}),
	}
}

// admit takes a slot (waiting while the window is full), runs send (the
// synchronous half: admission, decision, submission) and queues the wait
// it returns. It returns ctx's error if the call ended while waiting.
func (p *ackPipe) admit(ctx context.Context, send func() func() *macpv1.Ack) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.start.Do(func() { go p.run() })
	p.queue <- send() // never blocks: a slot is held
	return nil
}

func (p *ackPipe) run() {
	defer close(p.done)
	for wait := range p.queue {
		p.answer(wait())
		<-p.slots
	}
}

// flush waits until every admitted envelope has been answered (or ctx
// ended); the window is empty again afterwards.
func (p *ackPipe) flush(ctx context.Context) {
	n := 0
	defer func() {
		for range n {
			<-p.slots
		}
	}()
	for range streamAckWindow {
		select {
		case p.slots <- struct{}{}:
			n++
		case <-ctx.Done():
			return
		}
	}
}

// stop ends the pipe once the call is over: the caller has cancelled the
// call's context first, so outstanding waits return at once (their
// commits complete in the background) and nothing is answered on the
// stream after it (the sender has stopped). It returns once the goroutine
// has.
func (p *ackPipe) stop() {
	close(p.queue)
	p.start.Do(func() { close(p.done) })
	<-p.done
}
