package app

import (
	"context"
	"net/http"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
)

// snapshots is the App's session snapshot wiring (docs/snapshots.md): the
// Service over the runtime's durable history (for transports:
// GET /macp/session/{id}/state-window, GET /macp/snapshots/{sha256}), and,
// with MACP_SNAPSHOT_DIR, a background Writer fed by the lifecycle feed's
// terminal events. The events are published after the terminal record is
// durable and Enqueue never blocks, so the acceptance path never waits
// for a snapshot.
type snapshots struct {
	svc     *snapshotio.Service
	writer  *snapshotio.Writer // nil without MACP_SNAPSHOT_DIR
	cancel  context.CancelFunc
	done    chan struct{} // the writer's feed
	idxDone chan struct{} // the decay index feed (feedIndex)
}

func (a *App) newSnapshots() error {
	c := a.cfg.Snapshots
	svc, err := snapshotio.NewService(snapshotio.StoreSource{Store: a.store, Durable: a.rt.LastSeq},
		snapshotio.ServiceOptions{EventSource: c.EventSource, ServerID: c.ServerID, Dir: c.Dir})
	if err != nil {
		return err
	}
	a.snap = &snapshots{svc: svc}
	if c.Dir != "" {
		a.snap.writer = snapshotio.NewWriter(svc, c.Dir, a.log)
	}
	return nil
}

// startSnapshots starts the decay index feed, and the writer and its
// feed (after the runtime started).
func (a *App) startSnapshots() {
	s := a.snap
	if s == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.idxDone = cancel, make(chan struct{})
	go a.feedIndex(ctx)
	if s.writer == nil {
		return
	}
	s.done = make(chan struct{})
	go s.writer.Run(ctx)
	go func() {
		defer close(s.done)
		terminal := func(ev runtime.LifecycleEvent) bool {
			return ev.Type == macpv1.SessionLifecycleEvent_EVENT_TYPE_RESOLVED || ev.Type == macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED ||
				ev.Type == macpv1.SessionLifecycleEvent_EVENT_TYPE_CANCELLED
		}
		for ctx.Err() == nil {
			w := a.rt.Lifecycle.Watch(terminal)
			a.feedWriter(ctx, w)
			a.rt.Lifecycle.Unwatch(w)
			if w.Overflowed() {
				a.log.Warn("snapshot writer fell behind the session lifecycle feed; some ended sessions have no snapshot file (macpctl snapshot can still produce them)")
			}
		}
	}()
	a.log.Info("writing session snapshots", "dir", a.cfg.Snapshots.Dir)
}

// feedIndex keeps the snapshot service's index of SessionStarts by
// initiator (cross_session_decay windows) current from the lifecycle
// feed's CREATED events; a feed that fell behind invalidates the index,
// which the next window rebuilds from the store.
func (a *App) feedIndex(ctx context.Context) {
	defer close(a.snap.idxDone)
	created := func(ev runtime.LifecycleEvent) bool {
		return ev.Type == macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED
	}
	for ctx.Err() == nil {
		w := a.rt.Lifecycle.Watch(created)
		drainWatcher(ctx, w, func(ev runtime.LifecycleEvent) {
			md := ev.Session
			a.snap.svc.NoteStart(snapshot.Start{SessionID: md.GetSessionId(), Initiator: md.GetInitiator(), Participants: md.GetParticipants(), AcceptedAtMs: md.GetStartedAtUnixMs()})
		})
		a.rt.Lifecycle.Unwatch(w)
		if w.Overflowed() {
			a.snap.svc.InvalidateIndex()
		}
	}
}

func (a *App) feedWriter(ctx context.Context, w *runtime.LifecycleWatcher) {
	drainWatcher(ctx, w, func(ev runtime.LifecycleEvent) { a.snap.writer.Enqueue(ev.Session.GetSessionId()) })
}

// drainWatcher hands every event of w to fn until ctx ends or w is ended
// (by overflow, or the hub closing).
func drainWatcher(ctx context.Context, w *runtime.LifecycleWatcher, fn func(runtime.LifecycleEvent)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Done():
			return
		case <-w.Ready():
			for {
				ev, ok := w.Next()
				if !ok {
					break
				}
				fn(ev)
			}
		}
	}
}

// stopSnapshots stops the feeds and drains the writer (before the runtime
// and the store close).
func (a *App) stopSnapshots() {
	s := a.snap
	if s == nil || s.cancel == nil {
		return
	}
	s.cancel()
	<-s.idxDone
	if s.writer != nil {
		<-s.done
		s.writer.Close()
	}
}

// Snapshots is the snapshot service: reports and payloads of this
// server's sessions, and its http.Handler for the HTTP binding.
func (a *App) Snapshots() *snapshotio.Service { return a.snap.svc }

// SnapshotAuthorize is the snapshot routes' authorization for the HTTP
// binding: identify authenticates the request (the binding's own check,
// its errors returned as they are), then the caller must be allowed to
// read the session as for GetSession (initiator, declared participant,
// observer: FORBIDDEN otherwise; SESSION_NOT_FOUND for an unknown one).
// The caller's cross_session_decay windows list the sessions it may
// observe, and each costs one unit of its rate limit (ChargeCall).
// Mount it as a.Snapshots().Handler(a.SnapshotAuthorize(identify)).
func (a *App) SnapshotAuthorize(identify func(*http.Request) (coord.Identity, error)) snapshotio.Authorize {
	return func(r *http.Request, sessionID string) (snapshotio.Caller, error) {
		id, err := identify(r)
		if err != nil {
			return snapshotio.Caller{}, err
		}
		known, allowed := a.rt.MayRead(r.Context(), id, sessionID)
		switch {
		case !known:
			return snapshotio.Caller{}, coord.Errorf(coord.CodeSessionNotFound, "session %s not found", sessionID)
		case !allowed:
			return snapshotio.Caller{}, coord.Errorf(coord.CodeForbidden, "%s may not read session %s", id.Sender, sessionID)
		}
		return snapshotio.Caller{
			Viewer: snapshot.Viewer{Sender: id.Sender, Observer: id.Caps.IsObserver},
			Charge: func() error {
				if cerr := a.rt.ChargeCall(id); cerr != nil {
					return cerr
				}
				return nil
			},
		}, nil
	}
}
