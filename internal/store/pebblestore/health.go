package pebblestore

import "github.com/prometheus/client_golang/prometheus"

// Failed returns the store's fatal failure (wrapping store.ErrFailed), or
// nil while it is usable (package doc: fail closed). After a failed sync
// or write, or a full disk, the store refuses every call until the
// process reopens it; /healthz and macpd_store_failed report it.
func (s *Store) Failed() error { return s.fail.get() }

var descFailed = prometheus.NewDesc("macpd_store_failed",
	"1 once the store failed (a write or sync error, a full disk): it refuses every write and read until macpd restarts; 0 while usable.", nil, nil)

// HealthCollector exports macpd_store_failed; unlike Collector it keeps
// reporting after the failure.
func (s *Store) HealthCollector() prometheus.Collector { return healthCollector{s} }

type healthCollector struct{ s *Store }

func (healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descFailed }

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if c.s.Failed() != nil {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(descFailed, prometheus.GaugeValue, v)
}
