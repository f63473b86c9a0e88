package loadgen

import (
	"slices"
	"time"
)

// Latency summarises a set of durations. JSON figures are milliseconds.
type Latency struct {
	Count int           `json:"count"`
	Mean  time.Duration `json:"-"`
	P50   time.Duration `json:"-"`
	P90   time.Duration `json:"-"`
	P99   time.Duration `json:"-"`
	P999  time.Duration `json:"-"`
	Max   time.Duration `json:"-"`

	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Summarize computes the mean, nearest-rank percentiles and maximum of d
// (sorted in place). The percentiles never decrease: P50 <= P90 <= P99 <=
// P999 <= Max.
func Summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	l := Latency{
		Count: len(d),
		Mean:  sum / time.Duration(len(d)),
		P50:   Percentile(d, 50),
		P90:   Percentile(d, 90),
		P99:   Percentile(d, 99),
		P999:  Percentile(d, 99.9),
		Max:   d[len(d)-1],
	}
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	l.MeanMs, l.P50Ms, l.P90Ms, l.P99Ms, l.P999Ms, l.MaxMs = ms(l.Mean), ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max)
	return l
}

// Percentile returns the nearest-rank q-th percentile (0 < q <= 100) of
// sorted, which must not be empty: the smallest value with at least q% of
// the values at or below it.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	// rank = ceil(q/100 * n), computed in integers (per 10,000) to avoid
	// float rounding putting p99 of 100 values at rank 100.
	perTenK := int64(q*100 + 0.5)
	rank := int((perTenK*int64(n) + 9999) / 10000)
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}
