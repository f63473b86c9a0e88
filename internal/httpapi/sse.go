package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/wire"
	"google.golang.org/protobuf/proto"
)

// sseRetryMs is the reconnection delay sent to EventSource clients.
const sseRetryMs = 2000

// sseKeepBuffer is the largest event buffer an SSE feed keeps between
// events; a larger one (a large envelope) is dropped once written.
const sseKeepBuffer = 64 << 10

// sseCursor reads the resume point: Last-Event-ID (sent by a reconnecting
// EventSource) or ?after_sequence=; both, and different, is an error, and
// so is a repeated Last-Event-ID header.
func sseCursor(r *http.Request) (uint64, *coord.Error) {
	q, qok, cerr := queryValue(r.URL.Query(), "after_sequence")
	if cerr != nil {
		return 0, cerr
	}
	h, hok := r.Header.Get("Last-Event-ID"), len(r.Header.Values("Last-Event-ID")) > 0
	if len(r.Header.Values("Last-Event-ID")) > 1 {
		return 0, coord.Errorf(coord.CodeInvalidEnvelope, "the Last-Event-ID header is repeated; send it once")
	}
	var a, b uint64
	if qok {
		if a, cerr = parseSeq("after_sequence", q); cerr != nil {
			return 0, cerr
		}
	}
	if hok {
		if b, cerr = parseSeq("Last-Event-ID", h); cerr != nil {
			return 0, cerr
		}
	}
	if qok && hok && a != b {
		return 0, coord.Errorf(coord.CodeInvalidEnvelope, "Last-Event-ID %d and after_sequence %d disagree; send one", b, a)
	}
	return max(a, b), nil
}

// payloadView reads ?payload=json|base64 (default base64: byte-exact).
func payloadView(r *http.Request) (bool, *coord.Error) {
	v, ok, cerr := queryValue(r.URL.Query(), "payload")
	if cerr != nil || !ok {
		return false, cerr
	}
	switch v {
	case "base64":
		return false, nil
	case "json":
		return true, nil
	}
	return false, coord.Errorf(coord.CodeInvalidEnvelope, "payload=%q: use base64 (default) or json", v)
}

// encodeEnvelope is the envelope JSON of a feed: proto3 JSON (payload as
// base64 of the exact bytes), or the canonical view with decoded
// payloads. In the view, a Commitment also carries "commitment_hash", its
// RFC-MACP-0013 hash (internal/cmthash), so a reader can name it in a
// later Commitment's supersedes without computing it (absent when the
// payload is not hashable under macp-commitment-hash/1).
func encodeEnvelope(env *macpv1.Envelope, view bool) ([]byte, error) {
	if !view {
		return wire.EncodeEnvelope(env)
	}
	if env.GetMessageType() == "Commitment" {
		var p macpv1.CommitmentPayload
		if proto.Unmarshal(env.GetPayload(), &p) == nil {
			if h, err := cmthash.Hash(&p); err == nil {
				return json.Marshal(struct {
					wire.CanonicalEnvelope
					CommitmentHash string `json:"commitment_hash"`
				}{wire.Canonical(env), h})
			}
		}
	}
	return wire.EncodeCanonical(env)
}

// sse streams a session's accepted envelopes as Server-Sent Events: one
// event per envelope, id = its sequence number, data = its JSON. Resumes
// after Last-Event-ID or ?after_sequence=. Replay, then live; a terminal
// session's stream ends after its last envelope with an "end" event, and
// a reconnect to a terminal session with nothing left is answered 204,
// which stops EventSource from reconnecting.
func (s *Server) sse(w http.ResponseWriter, r *http.Request) {
	openedMs := s.nowMs()
	id, _, cerr := s.Identify(r, true, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	sid := r.PathValue("id")
	after, cerr := sseCursor(r)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	view, cerr := payloadView(r)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	gctx, gcancel := s.unaryCtx(r)
	md, cerr := s.rt.GetSession(gctx, id, sid)
	gcancel()
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	if !liveState(md.GetState()) { // a SUSPENDED session is live: it may resume
		if last, ok := s.rt.LastSeq(sid); ok && after >= last {
			w.WriteHeader(http.StatusNoContent) // nothing left, nothing will come
			return
		}
	}
	release, cerr := s.acquireStream(id, sid)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	defer release()

	ctx, cancel := contextWithDrain(r.Context(), s.drain)
	defer cancel()
	rc := http.NewResponseController(w)
	var (
		mu      sync.Mutex
		started bool
		buf     bytes.Buffer
		lastID  = after
	)
	// write sends buf's content with the write deadline; the caller holds
	// mu. flush also flushes it to the client; events use write and leave
	// the flush to the flusher goroutine, so that events accepted in a burst
	// leave in one chunk (one syscall) instead of one each.
	write := func(flush bool) error {
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil && flush {
			err = rc.Flush()
		}
		if err != nil {
			cancel()
		}
		return err
	}
	dirty := make(chan struct{}, 1)
	flusherDone := make(chan struct{})
	go func() {
		defer close(flusherDone)
		for {
			select {
			case <-dirty:
				runtime.Gosched() // let a burst's next events join this flush
				mu.Lock()
				_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
				if err := rc.Flush(); err != nil {
					cancel()
				}
				mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	onStart := func(last, from uint64) {
		mu.Lock()
		defer mu.Unlock()
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set(HeaderSessionSeq, strconv.FormatUint(last, 10))
		h.Set(HeaderResumeAfter, strconv.FormatUint(from, 10))
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(&buf, "retry: %d\n\n", sseRetryMs)
		started, lastID = true, from
		_ = write(true)
	}
	stopKA := make(chan struct{})
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		t := s.rt.Clock().NewTicker(s.opts.KeepAlive)
		defer t.Stop()
		for {
			select {
			case <-t.C():
				mu.Lock()
				if started {
					buf.WriteString(": keep-alive\n\n")
					_ = write(true)
				}
				mu.Unlock()
			case <-stopKA:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	// A session/resume (or session/start) of the same identity and
	// session makes its connection the only active one: this feed then
	// ends with a final "superseded" event (runtime/attach.go).
	var superseded atomic.Bool
	untrack := s.rt.Attachments().Track(id.Sender, sid, func() {
		superseded.Store(true)
		cancel()
	})
	defer untrack()
	fw := s.newFeedWindow() // feedwindow.go
	defer fw.end()
	ended, err := s.follow(ctx, id, sid, after, openedMs, fw, onStart, func(seq uint64, env *macpv1.Envelope, c *feedCharge) error {
		done := c.done
		b, err := s.encodeFeed(ctx, seq, env, view)
		if err == nil {
			// While the event is written, the decoded record and its JSON
			// are both held.
			err = c.grow(ctx, int64(len(b))+int64(proto.Size(env)))
		}
		if err != nil {
			done(false)
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		buf.WriteString("id: ")
		buf.WriteString(strconv.FormatUint(seq, 10))
		buf.WriteString("\ndata: ")
		if len(b) > sseKeepBuffer {
			// A large envelope is written as it is, not copied into buf.
			if err = write(false); err == nil {
				_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
				if _, err = w.Write(b); err != nil {
					cancel()
				}
			}
			b = nil
		}
		buf.Write(b)
		buf.WriteString("\n\n")
		lastID = seq
		if werr := write(false); err == nil {
			err = werr
		}
		done(err == nil) // written: the bytes are the connection's now
		if err != nil {
			return err
		}
		select {
		case dirty <- struct{}{}:
		default: // a flush is pending and will carry this event
		}
		return nil
	})
	close(stopKA)
	<-kaDone
	cancel() // ends the flusher
	<-flusherDone
	mu.Lock()
	defer mu.Unlock()
	switch {
	case !started:
		if err != nil {
			WriteError(w, followError(err))
		}
	case ended:
		fmt.Fprintf(&buf, "event: end\ndata: {\"last_sequence\":%d}\n\n", lastID)
		_ = write(true)
	case superseded.Load() && r.Context().Err() == nil:
		// Final: a client must not reconnect (an EventSource must be
		// closed by its page; docs/resume.md "One active connection").
		b, _ := json.Marshal(map[string]any{"last_sequence": lastID, "reason": supersededReason})
		fmt.Fprintf(&buf, "event: superseded\ndata: %s\n\n", b)
		_ = write(true)
	case err != nil && r.Context().Err() == nil && s.drain.Err() == nil && !errors.Is(err, errWriteFailed):
		b, _ := wire.Compact(wire.ErrorOf(followError(err)))
		fmt.Fprintf(&buf, "event: error\ndata: %s\n\n", b)
		_ = write(true)
	}
}

var errWriteFailed = errors.New("httpapi: write failed")
