package pebblestore

import "github.com/cockroachdb/pebble/v2"

// WithTune returns o with tune set: it edits Pebble's options last, in
// Open (benchmarks of other settings).
func WithTune(o Options, tune func(*pebble.Options)) Options {
	o.tune = tune
	return o
}

// PebbleMetrics returns the metrics of the store's Pebble.
func PebbleMetrics(s *Store) *pebble.Metrics { return s.db.Metrics() }
