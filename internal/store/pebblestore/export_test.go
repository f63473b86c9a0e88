package pebblestore

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
)

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

// SetInfoAbsentHook sets the hook Info runs between finding a session
// absent and recording it; nil removes it.
func SetInfoAbsentHook(h func(id string)) { testHookInfoAbsent = h }

// AbsentLen is the size of the store's absent set.
func AbsentLen(s *Store) int {
	s.absent.Lock()
	defer s.absent.Unlock()
	return len(s.absent.m)
}

// CompactAll compacts the whole key space (down to the last level).
func CompactAll(s *Store) error {
	return s.db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff, 0xff}, true)
}

// ScanWAL is scanWAL (repair.go), for the tests that feed it damaged
// logs: the session ids of the readable records, and whether the file
// holds damage.
func ScanWAL(path string) (map[string]bool, bool, error) { return scanWAL(path) }

// ParseHistKey is parseHistKey.
func ParseHistKey(k []byte) (string, uint64, bool) { return parseHistKey(k) }
