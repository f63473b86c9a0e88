package pebblestore

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// events counts Pebble events the EventListener sees (metrics).
type events struct {
	writeStalls atomic.Uint64
	diskSlow    atomic.Uint64
}

// FsyncBuckets are the upper bounds, in seconds, that
// macpd_store_wal_fsync_duration_seconds aims for. Pebble observes WAL fsync
// latency in nanoseconds into ~100 fixed buckets (pebble.FsyncLatencyBuckets);
// each bound here is exported as the largest of Pebble's bounds at or below
// it (converted to seconds), so the counts are exact but a bound above 5 ms
// is not a round number.
var FsyncBuckets = []float64{.0001, .0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func storeDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("macpd_store_"+name, help, labels, nil)
}

var (
	descFsync = storeDesc("wal_fsync_duration_seconds",
		"Latency of WAL fsyncs (Pebble's LogWriter.FsyncLatency, converted from nanoseconds).")
	descWALBytesWritten = storeDesc("wal_bytes_written_total",
		"Physical bytes written to the WAL, including framing.")
	descWALBytesIn = storeDesc("wal_bytes_in_total",
		"Logical bytes of batches written to the WAL.")
	descWALSize = storeDesc("wal_size_bytes",
		"Data in the live WAL files (not yet flushed to sstables).")
	descMemtableSize = storeDesc("memtable_size_bytes",
		"Bytes allocated by the memtables and large flushable batches.")
	descMemtableCount = storeDesc("memtables",
		"Memtables and large flushable batches.")
	descL0Files = storeDesc("l0_files",
		"Sstables in level 0.")
	descL0Sublevels = storeDesc("l0_sublevels",
		"Level 0 sublevels (read amplification of L0; a growing count means compaction is behind).")
	descReadAmp = storeDesc("read_amplification",
		"Sublevels summed over all levels.")
	descCompactions = storeDesc("compactions_total",
		"Compactions completed.")
	descCompactionDebt = storeDesc("compaction_debt_bytes",
		"Estimated bytes compaction must rewrite to bring the LSM back into shape.")
	descCompactionsActive = storeDesc("compactions_in_progress",
		"Compactions in progress.")
	descFlushes = storeDesc("flushes_total",
		"Memtable flushes completed.")
	descCacheSize = storeDesc("block_cache_size_bytes",
		"Bytes in use by the block cache.")
	descCacheHits = storeDesc("block_cache_hits_total",
		"Block cache hits.")
	descCacheMisses = storeDesc("block_cache_misses_total",
		"Block cache misses.")
	descDisk = storeDesc("disk_usage_bytes",
		"Disk space used by the store (WAL, sstables including obsolete and zombie ones, manifest, options, compaction output in progress).")
	descWriteStalls = storeDesc("write_stalls_total",
		"Write stalls Pebble started (memtables or L0 full; writes wait for flushes or compactions).")
	descDiskSlow = storeDesc("disk_slow_total",
		"Disk operations Pebble reported as slow.")
)

// Collector returns a prometheus.Collector exporting the store's Pebble
// metrics (macpd_store_*) from db.Metrics() at each scrape. It exports
// nothing once the store is closed or failed. Register one per Store.
func (s *Store) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Store }

var allDescs = []*prometheus.Desc{
	descFsync, descWALBytesWritten, descWALBytesIn, descWALSize,
	descMemtableSize, descMemtableCount, descL0Files, descL0Sublevels, descReadAmp,
	descCompactions, descCompactionDebt, descCompactionsActive, descFlushes,
	descCacheSize, descCacheHits, descCacheMisses, descDisk,
	descWriteStalls, descDiskSlow,
}

// Describe implements prometheus.Collector.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. db.Metrics takes Pebble's
// locks briefly; enter keeps Close from closing Pebble meanwhile.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	if s.enter() != nil {
		return
	}
	defer s.leave()
	m := s.db.Metrics()

	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	if h := fsyncHistogram(m); h != nil {
		ch <- h
	}
	counter(descWALBytesWritten, float64(m.WAL.BytesWritten))
	counter(descWALBytesIn, float64(m.WAL.BytesIn))
	gauge(descWALSize, float64(m.WAL.Size))
	gauge(descMemtableSize, float64(m.MemTable.Size))
	gauge(descMemtableCount, float64(m.MemTable.Count))
	gauge(descL0Files, float64(m.Levels[0].TablesCount))
	gauge(descL0Sublevels, float64(m.Levels[0].Sublevels))
	gauge(descReadAmp, float64(m.ReadAmp()))
	counter(descCompactions, float64(m.Compact.Count))
	gauge(descCompactionDebt, float64(m.Compact.EstimatedDebt))
	gauge(descCompactionsActive, float64(m.Compact.NumInProgress))
	counter(descFlushes, float64(m.Flush.Count))
	gauge(descCacheSize, float64(m.BlockCache.Size))
	counter(descCacheHits, float64(m.BlockCache.Hits))
	counter(descCacheMisses, float64(m.BlockCache.Misses))
	gauge(descDisk, float64(m.DiskSpaceUsage()))
	counter(descWriteStalls, float64(s.events.writeStalls.Load()))
	counter(descDiskSlow, float64(s.events.diskSlow.Load()))
}

// fsyncHistogram re-exports Pebble's WAL fsync histogram (nanoseconds,
// cumulative buckets) in seconds with the bounds of FsyncBuckets; nil if
// Pebble has none (read-only) or it cannot be read.
func fsyncHistogram(m *pebble.Metrics) prometheus.Metric {
	if m.LogWriter.FsyncLatency == nil {
		return nil
	}
	var pb dto.Metric
	if err := m.LogWriter.FsyncLatency.Write(&pb); err != nil || pb.Histogram == nil {
		return nil
	}
	h := pb.Histogram
	buckets := make(map[float64]uint64, len(FsyncBuckets))
	src := h.GetBucket() // ascending upper bounds, cumulative counts
	for _, want := range FsyncBuckets {
		// The largest Pebble bound <= want (with a little slack for the
		// float conversion); Pebble's first bound, 0, is skipped.
		var best *dto.Bucket
		for _, b := range src {
			ub := b.GetUpperBound() / 1e9
			if ub > want*(1+1e-9) {
				break
			}
			if ub > 0 {
				best = b
			}
		}
		if best == nil {
			continue
		}
		ub := best.GetUpperBound() / 1e9
		if ub >= want*(1-1e-9) {
			ub = want // the same bound up to float error (10 s is 9.99999...)
		}
		buckets[ub] = best.GetCumulativeCount()
	}
	return prometheus.MustNewConstHistogram(descFsync, h.GetSampleCount(), h.GetSampleSum()/1e9, buckets)
}
