package server

import (
	goruntime "runtime"
	"sync"
	"sync/atomic"

	"github.com/macpd/macpd/internal/runtime"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Stream buffers held by gRPC (docs/security.md "Stream buffers").
//
// A record a stream hands to gRPC (Send) stays in gRPC's HTTP/2 send
// queue, encoded, until its bytes are written to the connection, which a
// client that does not read may never allow. Its charge to the stream's
// window (runtime.StreamCost) is therefore released only when gRPC frees
// the encoded message: requestCodec.Marshal encodes a charged message
// into a buffer whose return to its "pool" (gRPC frees a message's buffer
// once it has written the last byte, or dropped the stream) releases the
// charge; should gRPC drop the buffer without freeing it (a connection
// that ends with data queued), the garbage collector's cleanup of the
// buffer does. A stream that ends (stalled, cancelled, failed) keeps its
// window open until gRPC has let go of everything it was handed, so what
// a never-reading client leaves in the transport stays within the budget.

// heldMessages maps a message being sent (its pointer) to the charge that
// requestCodec.Marshal attaches to its encoding.
var heldMessages sync.Map // any (proto.Message) -> *heldCharge

// heldCharge is one message's charge; done releases it once.
type heldCharge struct {
	released atomic.Bool
	release  func()
}

func (h *heldCharge) done() {
	if h.released.CompareAndSwap(false, true) {
		h.release()
	}
}

// releasePool is the mem.BufferPool of one charged message's encoding:
// gRPC puts the buffer back when it is done with it.
type releasePool struct{ h *heldCharge }

func (p releasePool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (p releasePool) Put(*[]byte) { p.h.done() }

// Marshal encodes v like gRPC's proto codec; a message registered in
// heldMessages is encoded into a buffer that releases its charge when
// gRPC frees it (or it is collected).
func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	hv, ok := heldMessages.LoadAndDelete(v)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	h := hv.(*heldCharge)
	m, ok := v.(proto.Message)
	if !ok {
		h.done()
		return c.CodecV2.Marshal(v)
	}
	size := proto.Size(m)
	c0 := max(size, 1)
	for mem.IsBelowBufferPoolingThreshold(c0) { // small buffers are not pooled: no Put
		c0 *= 2
	}
	buf, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, 0, c0), m)
	if err != nil {
		h.done()
		return nil, err
	}
	p := &buf
	goruntime.AddCleanup(p, (*heldCharge).done, h)
	return mem.BufferSlice{mem.NewBuffer(p, releasePool{h})}, nil
}

// sendWindow is a stream's runtime.StreamWindow as gRPC transports use
// it: charges of sent messages are released when gRPC frees them (see
// above), and the window closes once the call has ended and gRPC holds
// nothing of it. Every holder (the call, its sender goroutine, each sent
// message) takes a hold; the last one to drop closes the window.
type sendWindow struct {
	w     *runtime.StreamWindow
	holds atomic.Int64
}

// newSendWindow opens a window held by the call (end drops that hold).
func newSendWindow(rt *runtime.Runtime) *sendWindow {
	sw := &sendWindow{w: rt.StreamBudget().NewWindow()}
	sw.holds.Store(1)
	return sw
}

func (sw *sendWindow) hold() { sw.holds.Add(1) }

func (sw *sendWindow) drop() {
	if sw.holds.Add(-1) == 0 {
		sw.w.Close() // returns what was charged and never sent too
	}
}

// end drops the call's hold.
func (sw *sendWindow) end() { sw.drop() }

// send calls send (stream.Send(m)) for m, charged cost to the window:
// the charge counts as sent from now on and is released when gRPC frees
// m's encoding, or now if send failed before encoding m.
func (sw *sendWindow) send(m proto.Message, cost int64, send func() error) error {
	if cost <= 0 {
		return send()
	}
	sw.hold()
	h := &heldCharge{release: func() { sw.w.ReleaseSent(cost); sw.drop() }}
	heldMessages.Store(m, h)
	sw.w.Sent(cost)
	err := send()
	if _, ok := heldMessages.LoadAndDelete(m); ok {
		h.done() // never encoded: gRPC holds nothing of it
	}
	return err
}
