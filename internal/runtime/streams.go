package runtime

import (
	"log/slog"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/streambudget"
)

// The stream buffers' accounting lives in package streambudget; these
// names keep the runtime's API (FollowOptions.Window, Options.StreamBuffers)
// as it was.
type (
	StreamBudget        = streambudget.Budget
	StreamBudgetOptions = streambudget.Options
	StreamWindow        = streambudget.Window
)

// StreamCostOverhead is streambudget.CostOverhead.
const StreamCostOverhead = streambudget.CostOverhead

// StreamCost is what a record counts against the stream buffers
// (streambudget.Cost).
func StreamCost(rec session.Record) int64 { return streambudget.Cost(rec) }

// streamBudgetLogger is o with l as its Logger unless it has one.
func streamBudgetLogger(o StreamBudgetOptions, l *slog.Logger) StreamBudgetOptions {
	if o.Logger == nil {
		o.Logger = l
	}
	return o
}

// StreamBudget returns the runtime's budget of stream buffers: transports
// open one window per stream (StreamBudget().NewWindow()) and pass it in
// FollowOptions.Window.
func (r *Runtime) StreamBudget() *StreamBudget { return r.streams }

// releaseAll returns the window's charges for records not delivered.
func releaseAll(w *StreamWindow, recs []session.Record) {
	if w == nil {
		return
	}
	for _, rec := range recs {
		w.Release(StreamCost(rec))
	}
}
