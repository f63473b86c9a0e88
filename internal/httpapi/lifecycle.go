package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/wire"
	"google.golang.org/protobuf/proto"
)

// sessionEvents is gRPC WatchSessions as Server-Sent Events:
//
//	GET /macp/sessions/events   SSE: event "lifecycle", data = SessionLifecycleEvent JSON
//
// It sends a CREATED event for every live (OPEN or SUSPENDED) session the
// caller may observe (the sync), then the live CREATED, SUSPENDED,
// RESUMED, RESOLVED, EXPIRED and CANCELLED events of the sessions the
// caller may observe (a cancellation is EXPIRED under profile 2026-04 and
// CANCELLED under latest, as the session's state says), without
// duplicates across the sync:
// runtime.SessionWatch, the same feed as gRPC WatchSessions. Lifecycle
// events have no sequence number, so there is no resume: a client that
// reconnects re-reads GET /macp/sessions and watches again. Bounded like
// the other feeds: one of the identity's stream slots, the runtime's
// pending-event cap per watcher (a watcher that falls further behind gets
// an "error" event RATE_LIMITED and the stream ends), the write timeout,
// keep-alives and drain on shutdown.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) {
	id, _, cerr := s.Identify(r, true, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	release, cerr := s.acquireStream(id, "")
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	defer release()
	wt := s.rt.WatchSessions(id)
	defer wt.Close()

	ctx, cancel := contextWithDrain(r.Context(), s.drain)
	defer cancel()
	rc := http.NewResponseController(w)
	var buf bytes.Buffer
	flush := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil {
			err = rc.Flush()
		}
		return err
	}
	event := func(name string, m proto.Message) {
		b, _ := wire.Compact(m)
		fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", name, b)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)

	for _, ev := range wt.Sync(ctx) {
		event("lifecycle", ev)
	}
	if flush() != nil {
		return
	}
	ka := s.rt.Clock().NewTicker(s.opts.KeepAlive)
	defer ka.Stop()
	for {
		for ev, ok := wt.Next(); ok; ev, ok = wt.Next() {
			event("lifecycle", ev)
		}
		if buf.Len() > 0 && flush() != nil {
			return
		}
		select {
		case <-wt.Ready():
		case <-ka.C():
			buf.WriteString(": keep-alive\n\n")
			if flush() != nil {
				return
			}
		case <-wt.Done():
			if wt.Overflowed() {
				event("error", wire.ErrorOf(coord.Errorf(coord.CodeRateLimited, "lifecycle watcher fell more than %d sessions behind; re-read GET /macp/sessions and watch again", wt.MaxPending())))
				_ = flush()
			}
			return
		case <-ctx.Done():
			return
		}
	}
}
