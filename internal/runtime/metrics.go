package runtime

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the runtime's Prometheus metrics. Create them with
// NewMetrics, pass them in Options.Metrics and register them on a
// registry (Metrics is a prometheus.Collector). Without them (nil, the
// default) the runtime counts nothing and pays nothing.
//
//	macpd_commit_groups_total                  counter: store appends (groups) made durable
//	macpd_commit_group_requests                histogram: commit requests whose records one durable group carried
//	macpd_commit_records_total                 counter: records made durable
//	macpd_store_append_seconds                 histogram: from the start of a group's append to its durability
//	macpd_commit_failures_total                counter: store appends that failed
//	macpd_sessions_resident{state}             gauge: sessions in memory, state "open" or "terminal"
//	macpd_sessions_quarantined                 gauge: sessions refused for failed integrity checks or replay
//	macpd_followers                            gauge: registered session followers (StreamSession readers)
//	macpd_stream_buffer_bytes                  gauge: bytes all streams hold for their clients (package streambudget)
//	macpd_stream_buffer_budget_bytes           gauge: the budget of macpd_stream_buffer_bytes
//	macpd_stream_buffer_waits_total            counter: deliveries that waited for a stream's or the global bound
//	macpd_streams_stalled_total                counter: streams ended because their client took nothing for the stall limit
//
// Commit figures are counted by the completer, per group, once the
// group's append is durable (or failed): no lock, map or allocation per
// envelope. Groups that carry no records (durability barriers only) make no
// append and are not counted; requests answered because the runtime
// stopped are not failures. With a store.Pipeliner (Pebble) the append
// time runs to when the completer saw the sync finish, which may be after
// it answered the previous group; otherwise it is the Append call. The
// gauges are read at scrape time: "open" sessions are those counted
// against their initiator's open-session limit (OPEN, durable or with their
// SessionStart in flight; a session whose ending record is in flight is
// still open), "terminal" the other resident ones.
//
// One Metrics serves one Runtime at a time: the last one created with it.
type Metrics struct {
	groups        prometheus.Counter
	groupRequests prometheus.Histogram
	records       prometheus.Counter
	appendSeconds prometheus.Histogram
	failures      prometheus.Counter

	rt atomic.Pointer[Runtime] // gauges are read from it at scrape time
}

// AppendBuckets are the bounds, in seconds, of macpd_store_append_seconds:
// from a memory store's microseconds to a stalled disk's seconds.
var AppendBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// GroupRequestBuckets are the bounds of macpd_commit_group_requests; the
// default MaxCommitBatch is 256.
var GroupRequestBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

var (
	descResident = prometheus.NewDesc("macpd_sessions_resident",
		"Sessions in memory by state: open (counted against the initiator's open-session limit, including starts in flight) or terminal.", []string{"state"}, nil)
	descQuarantined = prometheus.NewDesc("macpd_sessions_quarantined",
		"Sessions quarantined because their stored history failed integrity checks or replay.", nil, nil)
	descStreamBytes = prometheus.NewDesc("macpd_stream_buffer_bytes",
		"Bytes all streams hold for clients that have not taken them yet (counted as in StreamCost).", nil, nil)
	descStreamBudget = prometheus.NewDesc("macpd_stream_buffer_budget_bytes",
		"The budget of macpd_stream_buffer_bytes (MACP_STREAM_BUFFER_BUDGET_BYTES).", nil, nil)
	descStreamWaits = prometheus.NewDesc("macpd_stream_buffer_waits_total",
		"Deliveries that waited because a stream's bound or the global budget was reached.", nil, nil)
	descStreamsStalled = prometheus.NewDesc("macpd_streams_stalled_total",
		"Streams ended because their client took nothing for MACP_STREAM_STALL_TIMEOUT_MS.", nil, nil)
	descStreamHolder = prometheus.NewDesc("macpd_stream_buffer_holder_bytes",
		"Bytes of macpd_stream_buffer_bytes held by the streams of one identity or one session, for the top holders of each kind (MACP_STREAM_BUFFER_IDENTITY_BYTES, MACP_STREAM_BUFFER_SESSION_BYTES bound them).",
		[]string{"kind", "holder"}, nil)
	descStreamThrottled = prometheus.NewDesc("macpd_stream_buffer_throttled_total",
		"Deliveries that waited because their identity or session held its share of the stream buffers.", nil, nil)
	descFollowers = prometheus.NewDesc("macpd_followers",
		"Registered session followers (StreamSession readers).", nil, nil)
)

// NewMetrics returns unregistered runtime metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		groups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "macpd_commit_groups_total",
			Help: "Store appends (commit groups) made durable.",
		}),
		groupRequests: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "macpd_commit_group_requests",
			Help:    "Commit requests (accepted envelopes, expiries, cancels) whose records one durable store append carried.",
			Buckets: GroupRequestBuckets,
		}),
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "macpd_commit_records_total",
			Help: "Session records made durable.",
		}),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "macpd_store_append_seconds",
			Help:    "Time from the start of a commit group's store append to its durability (successful appends).",
			Buckets: AppendBuckets,
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "macpd_commit_failures_total",
			Help: "Store appends (commit groups) that failed; their requests were answered INTERNAL_ERROR.",
		}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.groups.Describe(ch)
	m.groupRequests.Describe(ch)
	m.records.Describe(ch)
	m.appendSeconds.Describe(ch)
	m.failures.Describe(ch)
	ch <- descResident
	ch <- descQuarantined
	ch <- descFollowers
	ch <- descStreamBytes
	ch <- descStreamBudget
	ch <- descStreamWaits
	ch <- descStreamsStalled
	ch <- descStreamHolder
	ch <- descStreamThrottled
}

// streamTopHolders is how many identities and sessions
// macpd_stream_buffer_holder_bytes reports (the largest holders).
const streamTopHolders = 5

// Collect implements prometheus.Collector. The gauges hold the runtime's
// read lock for three O(1) reads.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.groups.Collect(ch)
	m.groupRequests.Collect(ch)
	m.records.Collect(ch)
	m.appendSeconds.Collect(ch)
	m.failures.Collect(ch)
	r := m.rt.Load()
	if r == nil {
		return
	}
	r.mu.RLock()
	resident, open, quarantined := len(r.sessions), r.openTotal, len(r.quarantined)
	r.mu.RUnlock()
	terminal := max(resident-open, 0)
	ch <- prometheus.MustNewConstMetric(descResident, prometheus.GaugeValue, float64(open), "open")
	ch <- prometheus.MustNewConstMetric(descResident, prometheus.GaugeValue, float64(terminal), "terminal")
	ch <- prometheus.MustNewConstMetric(descQuarantined, prometheus.GaugeValue, float64(quarantined))
	ch <- prometheus.MustNewConstMetric(descFollowers, prometheus.GaugeValue, float64(r.followers.Load()))
	sb := r.streams.Stats()
	ch <- prometheus.MustNewConstMetric(descStreamBytes, prometheus.GaugeValue, float64(sb.Used))
	ch <- prometheus.MustNewConstMetric(descStreamBudget, prometheus.GaugeValue, float64(sb.Total))
	ch <- prometheus.MustNewConstMetric(descStreamWaits, prometheus.CounterValue, float64(sb.Waits))
	ch <- prometheus.MustNewConstMetric(descStreamsStalled, prometheus.CounterValue, float64(sb.Stalled))
	ch <- prometheus.MustNewConstMetric(descStreamThrottled, prometheus.CounterValue, float64(sb.Throttled))
	ids, sess := r.streams.TopHolders(streamTopHolders)
	for _, h := range ids {
		ch <- prometheus.MustNewConstMetric(descStreamHolder, prometheus.GaugeValue, float64(h.Bytes), "identity", h.Name)
	}
	for _, h := range sess {
		ch <- prometheus.MustNewConstMetric(descStreamHolder, prometheus.GaugeValue, float64(h.Bytes), "session", h.Name)
	}
}

// group counts one started group once its outcome is known (completer).
func (m *Metrics) group(f *inFlight, err error) {
	if err != nil {
		m.failures.Inc()
		return
	}
	took := f.took
	m.groups.Inc()
	m.groupRequests.Observe(float64(f.reqs))
	m.records.Add(float64(f.recs))
	m.appendSeconds.Observe(took.Seconds())
}
