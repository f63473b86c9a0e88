package runtime

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/streambudget"
	"google.golang.org/protobuf/proto"
)

// signalWatchBytes bounds the signals one WatchSignals subscriber holds
// and has not taken (besides Options.SubscriberBuffer signals): a watcher
// over it is dropped (RATE_LIMITED) like one whose buffer is full. The
// envelopes are shared by all subscribers, so all watchers together pin at
// most this much of them.
const signalWatchBytes = 4 << 20

func signalCost(env *macpv1.Envelope) int64 {
	return int64(proto.Size(env)) + streambudget.CostOverhead
}
