package runtime

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
)

// SessionWatch is one caller's session lifecycle feed, the same on every
// transport (gRPC WatchSessions, GET /macp/sessions/events): a CREATED
// event for every live (OPEN or SUSPENDED) session the caller may observe
// (the initial sync, Sync), then the lifecycle events of the sessions it
// may observe (MayObserveMetadata) as they become durable (Next), without
// a duplicate across the two: a session created between subscribing and
// the sync is reported once.
//
// The watch is subscribed before the sync reads the sessions, so nothing
// that changes after the sync is missed. A slow consumer is coalesced, not
// dropped (LifecycleWatcher); one that falls more than the feed's
// MaxPending sessions behind is ended (Done, Overflowed) and must re-sync.
//
// One goroutine consumes it: Sync once, then wait on Ready (or Done) and
// call Next until it reports false. Close it when done.
type SessionWatch struct {
	rt *Runtime
	id coord.Identity
	w  *LifecycleWatcher
	// SubscribedMs is the runtime's clock, in Unix ms, when the watch
	// was subscribed; the sync's events are observed at it.
	SubscribedMs int64
	// synced holds the sessions the sync reported whose first live event
	// has not been seen yet: a CREATED for one of them is a duplicate
	// (created between subscribing and the sync). Any event removes the
	// entry, so it only shrinks.
	synced map[string]bool
}

// WatchSessions subscribes id to the lifecycle feed.
func (r *Runtime) WatchSessions(id coord.Identity) *SessionWatch {
	w := r.Lifecycle.Watch(func(ev LifecycleEvent) bool { return MayObserveMetadata(id, ev.Session) })
	return &SessionWatch{rt: r, id: id, w: w, SubscribedMs: r.Clock().Now().UnixMilli()}
}

// Sync returns the initial sync: a CREATED event, observed at
// SubscribedMs, for every live session the caller may observe.
func (sw *SessionWatch) Sync(ctx context.Context) []*macpv1.SessionLifecycleEvent {
	sw.synced = make(map[string]bool)
	var out []*macpv1.SessionLifecycleEvent
	for _, md := range sw.rt.ListSessions(ctx, sw.id) {
		if st := md.GetState(); st != macpv1.SessionState_SESSION_STATE_OPEN && st != macpv1.SessionState_SESSION_STATE_SUSPENDED {
			continue // the sync lists the live (non-terminal) sessions
		}
		sw.synced[md.GetSessionId()] = true
		out = append(out, &macpv1.SessionLifecycleEvent{EventType: macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED, Session: md, ObservedAtUnixMs: sw.SubscribedMs})
	}
	return out
}

// Next returns the next live event, skipping a CREATED the sync already
// reported; false if none is pending (wait on Ready) or the watch ended.
func (sw *SessionWatch) Next() (*macpv1.SessionLifecycleEvent, bool) {
	for {
		ev, ok := sw.w.Next()
		if !ok {
			return nil, false
		}
		if sid := ev.Session.GetSessionId(); sw.synced[sid] {
			delete(sw.synced, sid)
			if ev.Type == macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED {
				continue
			}
		}
		return &macpv1.SessionLifecycleEvent{EventType: ev.Type, Session: ev.Session, ObservedAtUnixMs: ev.ObservedMs}, true
	}
}

// Ready receives a value when events may be pending.
func (sw *SessionWatch) Ready() <-chan struct{} { return sw.w.Ready() }

// Done closes when the watch ended (Close, or overflow).
func (sw *SessionWatch) Done() <-chan struct{} { return sw.w.Done() }

// Overflowed reports whether the watch ended because the caller fell more
// than MaxPending sessions behind: it must re-sync and watch again.
func (sw *SessionWatch) Overflowed() bool { return sw.w.Overflowed() }

// MaxPending is the cap on distinct sessions pending for the watch.
func (sw *SessionWatch) MaxPending() int { return sw.rt.Lifecycle.MaxPending() }

// Close unsubscribes the watch; safe to call more than once.
func (sw *SessionWatch) Close() { sw.rt.Lifecycle.Unwatch(sw.w) }
