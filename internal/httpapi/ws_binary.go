package httpapi

import (
	"context"
	"encoding/binary"
	"net/http"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/wire"
	"google.golang.org/protobuf/proto"
)

// WSSubprotocolProto is the WebSocket subprotocol of the binary option
// (issue 33; docs/resume.md "Binary WebSocket frames"). A client that
// offers it in Sec-WebSocket-Protocol at the upgrade gets it; JSON-RPC
// text messages stay available on the same connection for every method,
// and a client that offers no subprotocol gets JSON-RPC only, as before.
//
// A binary message is one frame:
//
//	byte 0      kind
//	bytes 1..8  id, a big-endian uint64
//	bytes 9..   a protobuf message (binary wire format), by kind:
//
//	0x01 send      client -> server  id: the request id    body: macp.v1.Envelope
//	0x02 ack       server -> client  id: the request id    body: macp.v1.Ack
//	0x03 envelope  server -> client  id: sessionEventId    body: macp.v1.Envelope (its session_id names the session)
//	0x04 error     server -> client  id: the request id    body: macp.v1.MACPError (the frame was refused)
//
// A send frame is macp/send: admitted by runtime.SendPipelined in arrival
// order with the JSON requests of the connection, within the same window
// (WSSendWindow), and answered by an ack frame (a rejection is an Ack with
// ok=false, as on gRPC). A frame that is shorter than 9 bytes, of an
// unknown or server-to-client kind, or whose body is not a valid Envelope
// is answered by an error frame (INVALID_ENVELOPE) with the id it carried
// (0 if it had none); the connection stays open. A binary message over the
// size limit closes the connection with 1009, as a text one does. On a
// connection that did not negotiate the subprotocol, a binary message
// closes it with 1003.
//
// Subscriptions (macp/subscribe) and protocol-mode attachments
// (session/resume, session/start) of a binary connection deliver each
// envelope as an envelope frame instead of notifications/macp/envelope,
// in the same order, with the same sessionEventId rules; every other
// notification (end, error, state, detached) stays JSON-RPC text.
const WSSubprotocolProto = "macp.v1+proto"

const (
	frameSend     byte = 0x01
	frameAck      byte = 0x02
	frameEnvelope byte = 0x03
	frameError    byte = 0x04
	frameHeader        = 9
)

// isFrame tells a binary frame from a JSON-RPC text message in the
// connection's outgoing queue: JSON text always starts with '{'.
func isFrame(b []byte) bool { return len(b) > 0 && b[0] < 0x20 }

func appendFrame(kind byte, id uint64, m proto.Message) []byte {
	out := make([]byte, frameHeader, frameHeader+proto.Size(m))
	out[0] = kind
	binary.BigEndian.PutUint64(out[1:], id)
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(out, m)
	if err != nil {
		return errorFrame(id, coord.Errorf(coord.CodeInternalError, "the message could not be encoded"))
	}
	return out
}

func errorFrame(id uint64, e *coord.Error) []byte {
	return appendFrame(frameError, id, wire.ErrorOf(e))
}

// envelopeFrame is a binary connection's envelope notification.
func envelopeFrame(seq uint64, env *macpv1.Envelope) []byte {
	return appendFrame(frameEnvelope, seq, env)
}

// negotiateSubprotocol reads the subprotocols the client offers: proto
// when it offers WSSubprotocolProto; an error (answered 400 before the
// upgrade) when it offers subprotocols and none of them is known.
func negotiateSubprotocol(r *http.Request) (bool, *coord.Error) {
	var offered []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				offered = append(offered, p)
			}
		}
	}
	if len(offered) == 0 {
		return false, nil
	}
	for _, p := range offered {
		if p == WSSubprotocolProto {
			return true, nil
		}
	}
	return false, coord.Errorf(coord.CodeInvalidEnvelope, "unknown WebSocket subprotocol %q: macpd speaks %q (binary frames), or JSON-RPC text with no subprotocol", strings.Join(offered, ", "), WSSubprotocolProto)
}

// binaryFrame handles one binary message of a binary connection.
func (wc *wsConn) binaryFrame(msg []byte) {
	if len(msg) < frameHeader {
		wc.enqueue(wc.ctx, errorFrame(0, coord.Errorf(coord.CodeInvalidEnvelope, "a binary frame is at least %d bytes: a kind byte and an 8-byte id (got %d)", frameHeader, len(msg))))
		return
	}
	id := binary.BigEndian.Uint64(msg[1:frameHeader])
	if msg[0] != frameSend {
		wc.enqueue(wc.ctx, errorFrame(id, coord.Errorf(coord.CodeInvalidEnvelope, "frame kind 0x%02x is not one a client sends (0x01: send)", msg[0])))
		return
	}
	env := &macpv1.Envelope{}
	if err := proto.Unmarshal(msg[frameHeader:], env); err != nil {
		wc.enqueue(wc.ctx, errorFrame(id, coord.Errorf(coord.CodeInvalidEnvelope, "the send frame's body is not a protobuf macp.v1.Envelope: %v", err)))
		return
	}
	ctx := wc.ctx
	wc.pipe.admitFrame(ctx, id, func() func() *macpv1.Ack { return wc.s.rt.SendPipelined(ctx, wc.id, env) })
}

func (wc *wsConn) binaryFeed() bool { return wc.binary }

// writeMsg writes one queued message: a frame as a binary message, the
// rest as text.
func (wc *wsConn) writeMsg(ctx context.Context, b []byte) error {
	if isFrame(b) {
		return wc.c.Write(ctx, websocketBinary, b)
	}
	return wc.c.Write(ctx, websocketText, b)
}
