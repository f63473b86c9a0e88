package httpapi

import (
	"context"
	"encoding/json"
)

// Catch-up in bulk (issue 33; docs/resume.md "Batched envelope
// notifications"): a session/resume or macp/subscribe with "batch": true
// on a WebSocket connection lets the writer send the attachment's envelope
// notifications that are queued together as one message:
//
//	notifications/macp/envelopes {"sessionId", "envelopes": [{"sessionEventId": N, "envelope": <Envelope JSON>}, ...]}
//
// The items are consecutive envelope notifications of one session, in
// order (their sessionEventIds increasing, as they would have come one by
// one); a state notification (N.5) or any other message ends a batch and
// follows it, so the id rules are those of single notifications. A batch
// holds at most wsBatchMax envelopes and about wsBatchBytes bytes (one
// larger envelope goes alone). An envelope that is alone in the queue
// still leaves as notifications/macp/envelope: a client that asks for
// batches takes both. Nothing is held back to make a batch: the writer
// takes only what is already queued, so batches form when the client or
// the connection is slower than the feed (catch-up), and live delivery
// is not delayed. Binary connections (ws_binary.go) are unaffected: their
// envelope frames are already one binary message each.

const (
	rpcEnvelopes = "notifications/macp/envelopes"
	wsBatchMax   = 256
	wsBatchBytes = 1 << 20
)

// batchSink is a carrier that can batch envelope notifications.
type batchSink interface {
	enqueueBatchable(ctx context.Context, msg []byte, c *feedCharge, sid string) bool
}

// enqueueBatchable is enqueueCharged for an envelope notification of sid
// (envelopeNotification) that may leave in a batch.
func (wc *wsConn) enqueueBatchable(ctx context.Context, msg []byte, c *feedCharge, sid string) bool {
	return enqueueOut(wc.out, ctx, wc.ctx, outMsg{b: msg, charge: c, batch: sid})
}

// gather takes the batchable messages of first's session queued right
// behind it (without waiting), within the bounds. next is the first
// message taken that does not belong to the batch (to be written after
// it), or nil.
func (wc *wsConn) gather(first outMsg) (batch []outMsg, next *outMsg) {
	batch = []outMsg{first}
	size := len(first.b)
	for len(batch) < wsBatchMax && size < wsBatchBytes {
		select {
		case m := <-wc.out:
			if m.batch != first.batch || size+len(m.b) > wsBatchBytes {
				return batch, &m
			}
			batch = append(batch, m)
			size += len(m.b)
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// batchNotification merges envelope notifications of one session into
// one notifications/macp/envelopes: each item is the single
// notification's params without the sessionId.
func batchNotification(batch []outMsg) []byte {
	sidJSON, _ := json.Marshal(batch[0].batch)
	const head = `{"jsonrpc":"2.0","method":"` + rpcEnvelopes + `","params":{"sessionId":`
	skip := len(envelopeHead) + len(sidJSON) + 1 // through the sessionId and its comma
	n := len(head) + len(sidJSON) + 32
	for _, m := range batch {
		n += len(m.b) - skip + 1
	}
	out := make([]byte, 0, n)
	out = append(out, head...)
	out = append(out, sidJSON...)
	out = append(out, `,"envelopes":[`...)
	for i, m := range batch {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '{')
		out = append(out, m.b[skip:len(m.b)-2]...) // "sessionEventId":N,"envelope":{...}
		out = append(out, '}')
	}
	return append(out, "]}}"...)
}
