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

// WithIndexEveryBatch returns o with the index entry of every session
// written with every batch, as stores did before it was written only on
// changes of status (reading such stores is tested).
func WithIndexEveryBatch(o Options) Options {
	o.indexEveryBatch = true
	return o
}
