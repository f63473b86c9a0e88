package runtime

import (
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/streambudget"
)

// StreamBudget returns the runtime's budget of stream buffers: transports
// open one window per stream (StreamBudget().NewWindow()) and pass it in
// FollowOptions.Window.
func (r *Runtime) StreamBudget() *streambudget.Budget { return r.streams }

// releaseAll returns the window's charges for records not delivered.
func releaseAll(w *streambudget.Window, recs []session.Record) {
	if w == nil {
		return
	}
	for _, rec := range recs {
		w.Release(streambudget.Cost(rec))
	}
}
