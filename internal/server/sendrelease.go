package server

import (
	"context"
	goruntime "runtime"
	"sync"
	"sync/atomic"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/streambudget"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Stream buffers held by gRPC (docs/security.md "Stream buffers").
//
// A record a stream hands to gRPC (Send) stays in gRPC's HTTP/2 send
// queue, encoded, until its bytes are written to the connection, which a
// client that does not read may never allow. Its charge to the stream's
// window (streambudget.Cost) is therefore released only when gRPC frees
// the encoded message: requestCodec.Marshal hands a charged record to
// gRPC in a buffer whose return to its "pool" (gRPC frees a message's buffer
// once it has written the last byte, or dropped the stream) releases the
// charge; should gRPC drop the buffer without freeing it (a connection
// that ends with data queued), the garbage collector's cleanup of the
// buffer does. A stream that ends (stalled, cancelled, failed) keeps its
// window open until gRPC has let go of everything it was handed, so what
// a never-reading client leaves in the transport stays within the budget.

// heldMessages maps a message being sent (its pointer) to the charge that
// requestCodec.Marshal attaches to its encoding.
var heldMessages sync.Map // any (proto.Message) -> *heldCharge

// heldCharge is one sent message's charge to its stream's window; done
// releases it once.
type heldCharge struct {
	released atomic.Bool
	sw       *sendWindow
	cost     int64
}

func (h *heldCharge) done() {
	if h.released.CompareAndSwap(false, true) {
		h.sw.w.ReleaseSent(h.cost)
		h.sw.drop()
	}
}

// releasePool is the mem.BufferPool of one charged message's encoding:
// gRPC puts the buffer back when it is done with it, which releases the
// charge. Nothing is pooled.
type releasePool struct{ h *heldCharge }

func (p releasePool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (p releasePool) Put(*[]byte) { p.h.done() }

// marshalHeld encodes v like gRPC's proto codec; a message registered in
// heldMessages (WatchSignals responses: sendWindow.send) is encoded into
// a buffer that releases its charge when gRPC frees it (or it is
// collected).
func (c requestCodec) marshalHeld(v any) (mem.BufferSlice, error) {
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

// encodedRecord is a delivered record's StreamSessionResponse, encoded
// once for every stream that delivers it (records, respcache.go), as one stream hands
// it to gRPC (stream.SendMsg): requestCodec.Marshal recognises it and
// returns the shared bytes instead of encoding the message again, in a
// buffer of this stream's whose release returns this stream's charge
// (slot). gRPC does not keep the value passed to SendMsg: a stream's
// sender reuses one (recordSender).
type encodedRecord struct {
	b      []byte      // shared and read-only; cap >= gRPC's pooling threshold
	slot   *heldCharge // the charge; nil: none
	anchor *[]byte     // the buffer's data pointer: the GC backstop's object
	taken  bool        // Marshal handed b to gRPC
}

// GC backstop of charged records: the buffers of up to chargeGroupSize
// records a stream hands to gRPC in a row share a data pointer (anchor;
// gRPC reads a buffer's bytes through its own copy of the slice and
// passes the pointer back only to the pool's Put), to which one cleanup
// is attached: once none of them is reachable, it releases whatever
// charge of the group gRPC did not free. One cleanup per group instead
// of per record: attaching one costs a search of the span's specials.
const chargeGroupSize = 64

// chargeGroup holds the charges of one group of a stream's records.
type chargeGroup struct {
	n     atomic.Int32 // slots in use
	slots [chargeGroupSize]heldCharge
}

// releaseAll is the group's cleanup.
func (g *chargeGroup) releaseAll() {
	for i := range g.n.Load() {
		g.slots[i].done()
	}
}

// Marshal encodes v like gRPC's proto codec; an encodedRecord is not
// encoded again (see encodedRecord).
func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	e, ok := v.(*encodedRecord)
	if !ok {
		return c.marshalHeld(v)
	}
	e.taken = true
	if e.slot == nil {
		return mem.BufferSlice{mem.SliceBuffer(e.b)}, nil
	}
	*e.anchor = e.b // read once, by NewBuffer
	return mem.BufferSlice{mem.NewBuffer(e.anchor, releasePool{e.slot})}, nil
}

// encodeRecord is the StreamSessionResponse carrying env, encoded, in a
// slice whose capacity is at least gRPC's buffer pooling threshold (a
// smaller one would be handed to gRPC unpooled, so its release would
// never be seen).
func encodeRecord(env *macpv1.Envelope) ([]byte, error) {
	m := &macpv1.StreamSessionResponse{Response: &macpv1.StreamSessionResponse_Envelope{Envelope: env}}
	c := max(proto.Size(m), 1)
	for mem.IsBelowBufferPoolingThreshold(c) {
		c *= 2
	}
	return proto.MarshalOptions{}.MarshalAppend(make([]byte, 0, c), m)
}

// sendWindow is a stream's streambudget.Window as gRPC transports use
// it: charges of sent messages are released when gRPC frees them (see
// above), and the window closes once the call has ended and gRPC holds
// nothing of it. Every holder (the call, its sender goroutine, each sent
// message) takes a hold; the last one to drop closes the window. When the
// call's connection ends, the window closes at once (guardedConn.Close):
// gRPC writes nothing of that connection any more, and what it still
// referenced is garbage, so its charges go back deterministically, not
// when the collector finds the buffers (the cleanups above stay as a
// safety net only).
type sendWindow struct {
	w     *streambudget.Window
	holds atomic.Int64
	conn  *guardedConn // the call's connection, if the guard knows it
}

// newSendWindow opens a window held by the call in ctx (end drops that
// hold), counted against the caller's share (streambudget.Window.Bind)
// and closed when the call's connection ends.
func (s *Service) newSendWindow(ctx context.Context) *sendWindow {
	sw := &sendWindow{w: s.rt.StreamBudget().NewWindow()}
	sw.holds.Store(1)
	if id, ok := identityFrom(ctx); ok {
		sw.w.Bind(id.Sender, "")
	}
	if s.guard != nil {
		if gc := s.guard.connOf(ctx); gc != nil {
			gc.addWindow(sw)
		}
	}
	return sw
}

func (sw *sendWindow) hold() { sw.holds.Add(1) }

func (sw *sendWindow) drop() {
	if sw.holds.Add(-1) == 0 {
		sw.w.Close() // returns what was charged and never sent too
		if sw.conn != nil {
			sw.conn.removeWindow(sw)
		}
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
	h := &heldCharge{sw: sw, cost: cost}
	heldMessages.Store(m, h)
	sw.w.Sent(cost)
	err := send()
	if _, ok := heldMessages.LoadAndDelete(m); ok {
		h.done() // never encoded: gRPC holds nothing of it
	}
	return err
}

// recordSender hands a stream's encoded records to gRPC, charged to its
// window; only the stream's sender goroutine uses it. Dropping it (the
// sender returned) leaves the current group's anchor to the buffers gRPC
// still holds.
type recordSender struct {
	sw     *sendWindow
	g      *chargeGroup
	anchor *[]byte
	m      encodedRecord
}

// send hands the encoded record b to gRPC (send: stream.SendMsg), charged
// cost to the window: the charge counts as sent from now on and is
// released when gRPC frees this stream's buffer of b, or now if send
// failed before taking b.
func (rs *recordSender) send(b []byte, cost int64, send func(any) error) error {
	rs.m = encodedRecord{b: b}
	defer func() { rs.m = encodedRecord{} }()
	if cost <= 0 {
		return send(&rs.m)
	}
	if rs.g == nil || rs.g.n.Load() == chargeGroupSize {
		rs.g = &chargeGroup{}
		rs.anchor = new([]byte)
		goruntime.AddCleanup(rs.anchor, (*chargeGroup).releaseAll, rs.g)
	}
	slot := &rs.g.slots[rs.g.n.Load()]
	slot.sw, slot.cost = rs.sw, cost
	rs.g.n.Add(1)
	rs.sw.hold()
	rs.sw.w.Sent(cost)
	rs.m.slot, rs.m.anchor = slot, rs.anchor
	err := send(&rs.m)
	if !rs.m.taken {
		slot.done() // never encoded: gRPC holds nothing of it
	}
	return err
}
