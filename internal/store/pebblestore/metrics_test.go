package pebblestore_test

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

func gatherList(t *testing.T, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	return mfs
}

func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	mfs := gatherList(t, c)
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// TestCollector scrapes a store after some synced appends: the WAL fsync
// histogram (seconds) counts them and the gauges and counters are there.
func TestCollector(t *testing.T) {
	s := mustOpen(t, t.TempDir(), pebblestore.Options{})
	defer s.Close()
	const appends = 10
	for i := range appends {
		appendN(t, s, "a", uint64(i)*3+1, uint64(i)*3+3, 0)
	}
	mfs := gather(t, s.Collector())

	h := mfs["macpd_store_wal_fsync_duration_seconds"]
	if h == nil || h.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("no fsync histogram: %v", h)
	}
	hist := h.GetMetric()[0].GetHistogram()
	// One sync per Append (plus the format marker's at Open).
	if n := hist.GetSampleCount(); n < appends {
		t.Errorf("fsync count = %d, want >= %d", n, appends)
	}
	if sum := hist.GetSampleSum(); sum <= 0 || sum > float64(hist.GetSampleCount())*10 {
		t.Errorf("fsync sum = %v s for %d syncs: not in seconds?", sum, hist.GetSampleCount())
	}
	bs := hist.GetBucket()
	if len(bs) == 0 || len(bs) > len(pebblestore.FsyncBuckets) {
		t.Fatalf("%d buckets, want 1..%d", len(bs), len(pebblestore.FsyncBuckets))
	}
	for i, b := range bs {
		if b.GetUpperBound() <= 0 || b.GetUpperBound() > 10 {
			t.Errorf("bucket %d bound %v s", i, b.GetUpperBound())
		}
		if i > 0 && (b.GetUpperBound() <= bs[i-1].GetUpperBound() || b.GetCumulativeCount() < bs[i-1].GetCumulativeCount()) {
			t.Errorf("bucket %d (%v, %d) after (%v, %d)", i, b.GetUpperBound(), b.GetCumulativeCount(), bs[i-1].GetUpperBound(), bs[i-1].GetCumulativeCount())
		}
	}
	if bs[0].GetUpperBound() != 0.0001 {
		t.Errorf("first bound %v, want 0.0001", bs[0].GetUpperBound())
	}

	value := func(name string) float64 {
		t.Helper()
		mf := mfs[name]
		if mf == nil {
			t.Fatalf("%s missing", name)
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	for _, name := range []string{"macpd_store_wal_bytes_written_total", "macpd_store_wal_bytes_in_total", "macpd_store_memtable_size_bytes", "macpd_store_memtables", "macpd_store_disk_usage_bytes", "macpd_store_wal_size_bytes"} {
		if v := value(name); v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	for _, name := range []string{"macpd_store_l0_files", "macpd_store_l0_sublevels", "macpd_store_read_amplification", "macpd_store_compactions_total",
		"macpd_store_compaction_debt_bytes", "macpd_store_compactions_in_progress", "macpd_store_flushes_total", "macpd_store_block_cache_size_bytes",
		"macpd_store_block_cache_hits_total", "macpd_store_block_cache_misses_total", "macpd_store_write_stalls_total", "macpd_store_disk_slow_total"} {
		if v := value(name); v < 0 {
			t.Errorf("%s = %v", name, v)
		}
	}
	if problems, err := promlint.NewWithMetricFamilies(gatherList(t, s.Collector())).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestCollectorClosedOrFailed: a closed or failed store exports nothing
// (and neither panics nor blocks).
func TestCollectorClosedOrFailed(t *testing.T) {
	s := mustOpen(t, t.TempDir(), pebblestore.Options{})
	appendN(t, s, "a", 1, 2, 0)
	c := s.Collector()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(gatherList(t, c)); n != 0 {
		t.Errorf("closed store: %d metric families, want 0", n)
	}

	fault := &walFault{kinds: syncOps}
	f := mustOpen(t, "db", pebblestore.Options{FS: errorfs.Wrap(vfs.NewMem(), fault)})
	appendN(t, f, "a", 1, 2, 0)
	if n := len(gatherList(t, f.Collector())); n == 0 {
		t.Fatal("open store: no metrics")
	}
	fault.armed.Store(true)
	if err := f.Append(ctx, []session.Record{rec("a", 3, 1)}); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Append with a failing sync = %v, want ErrFailed", err)
	}
	if n := len(gatherList(t, f.Collector())); n != 0 {
		t.Errorf("failed store: %d metric families, want 0", n)
	}
	_ = f.Close()
}
