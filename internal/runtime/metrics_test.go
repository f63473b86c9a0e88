package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// scrape gathers m and returns each family's first metric by name, and
// by name{state} for macpd_sessions_resident.
func scrape(t *testing.T, m *Metrics) map[string]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	if problems, err := promlint.NewWithMetricFamilies(mfs).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range mt.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			out[name] = mt
		}
	}
	return out
}

type commitCounts struct {
	groups, records, failures, reqCount, reqSum, appendCount uint64
	open, terminal, followers                                float64
}

func counts(t *testing.T, m *Metrics) commitCounts {
	t.Helper()
	s := scrape(t, m)
	for _, name := range []string{"macpd_commit_groups_total", "macpd_commit_records_total", "macpd_commit_failures_total",
		"macpd_commit_group_requests", "macpd_store_append_seconds", "macpd_sessions_resident{open}",
		"macpd_sessions_resident{terminal}", "macpd_sessions_quarantined", "macpd_followers"} {
		if s[name] == nil {
			t.Fatalf("%s missing", name)
		}
	}
	return commitCounts{
		groups:      uint64(s["macpd_commit_groups_total"].GetCounter().GetValue()),
		records:     uint64(s["macpd_commit_records_total"].GetCounter().GetValue()),
		failures:    uint64(s["macpd_commit_failures_total"].GetCounter().GetValue()),
		reqCount:    s["macpd_commit_group_requests"].GetHistogram().GetSampleCount(),
		reqSum:      uint64(s["macpd_commit_group_requests"].GetHistogram().GetSampleSum()),
		appendCount: s["macpd_store_append_seconds"].GetHistogram().GetSampleCount(),
		open:        s["macpd_sessions_resident{open}"].GetGauge().GetValue(),
		terminal:    s["macpd_sessions_resident{terminal}"].GetGauge().GetValue(),
		followers:   s["macpd_followers"].GetGauge().GetValue(),
	}
}

// The commit metrics count exactly what a scripted sequence committed:
// one group per sequential request, one group for requests queued behind
// a stalled append, a failed append as a failure only; the session gauges
// follow starts and ends, the follower gauge a follower.
func TestMetricsCommitGroups(t *testing.T) {
	m := NewMetrics()
	st := newFaultStore()
	r := newRT(t, st, Options{Metrics: m})
	ctx := context.Background()
	want := commitCounts{}
	check := func(step string) {
		t.Helper()
		if got := counts(t, m); got != want {
			t.Fatalf("%s: got %+v, want %+v", step, got, want)
		}
	}
	check("idle")

	// Start + proposal, one after the other: two groups of one.
	sid := openSession(t, r, 0)
	want = commitCounts{groups: 2, records: 2, reqCount: 2, reqSum: 2, appendCount: 2, open: 1}
	check("sequential")

	// A stalled append (m2), then four requests queued behind it (two
	// proposals of the same session, two new sessions): one group of four.
	stall := st.block(sid, false)
	acks := []<-chan *macpv1.Ack{sendAsync(r, ctx, initID, proposalEnv(sid, "m2"))}
	waitEntered(t, stall)
	s2, s3 := newSID(), newSID()
	acks = append(acks,
		sendAsync(r, ctx, initID, proposalEnv(sid, "m3")),
		sendAsync(r, ctx, initID, proposalEnv(sid, "m4")),
		sendAsync(r, ctx, initID, startEnv(s2, "s2-0", 60_000)),
		sendAsync(r, ctx, initID, startEnv(s3, "s3-0", 60_000)))
	eventually(t, 5*time.Second, "four requests queued", func() bool { return len(r.commit.queue) == 4 })
	stall.release()
	for _, ch := range acks {
		if a := recv(t, ch, "ack"); !a.Ok {
			t.Fatal(a.Error)
		}
	}
	want.groups, want.records, want.reqCount, want.reqSum, want.appendCount, want.open = 4, 7, 4, 7, 4, 3
	check("grouped")

	// A failed append: a failure, nothing committed.
	st.failNext(sid, 1)
	wantCode(t, r.Send(ctx, initID, proposalEnv(sid, "m5")), coord.CodeInternalError)
	want.failures = 1
	check("failed")

	// Cancelling s2 commits one record and ends it.
	if _, cerr := r.Cancel(ctx, initID, s2, "done"); cerr != nil {
		t.Fatal(cerr)
	}
	want.groups, want.records, want.reqCount, want.reqSum, want.appendCount, want.open, want.terminal = 5, 8, 5, 8, 5, 2, 1
	check("cancelled")

	// A follower of s3 is counted while it follows.
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() {
		followed <- r.Follow(fctx, initID, s3, 0, FollowOptions{}, func(session.Record) error { return nil })
	}()
	eventually(t, 5*time.Second, "follower registered", func() bool { return counts(t, m).followers == 1 })
	stop()
	recv(t, followed, "follow ended")
	eventually(t, 5*time.Second, "follower gone", func() bool { return counts(t, m).followers == 0 })
}

// With a pipelining store the append time runs to the end of the wait.
func TestMetricsPipelinedAppendTime(t *testing.T) {
	m := NewMetrics()
	st := newPipeStore()
	clk := clocktest.New()
	r := newRT(t, st, Options{Metrics: m, Clock: clk})
	ack := sendAsync(r, context.Background(), initID, startAt(clk, newSID(), "m0", 60_000))
	n := recv(t, st.started, "append started")
	const hold = 30 * time.Millisecond
	clk.Advance(hold) // the append is held while the (fake) clock moves
	st.release(n, nil)
	if a := recv(t, ack, "start ack"); !a.Ok {
		t.Fatal(a.Error)
	}
	h := scrape(t, m)["macpd_store_append_seconds"].GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != hold.Seconds() {
		t.Fatalf("append_seconds: count %d sum %v, want 1 and %v", h.GetSampleCount(), h.GetSampleSum(), hold.Seconds())
	}
}
