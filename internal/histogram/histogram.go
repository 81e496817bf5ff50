// Package histogram holds what meshnode's duration histograms share: their bucket
// boundaries, and a quantile estimated from a histogram's bucket counts (the dashboard
// draws the p99 of relayed request latency from it).
package histogram

import "math"

// Seconds are the upper bounds, in seconds, of the buckets of every meshnode duration
// histogram (relayed request latency, Actor turn duration, record send latency): 10 µs
// to 30 s, about three buckets a decade. A last bucket without bound (+Inf) follows.
var Seconds = []float64{
	0.00001, 0.000025, 0.00005,
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1, 2.5, 5,
	10, 30,
}

// Quantile estimates the q quantile (0 < q <= 1) of the observations counted in
// counts, where counts[i] is the number in bucket i: above bounds[i-1], at most
// bounds[i]; counts has one more element than bounds, for the bucket above the last
// bound. Within a bucket the observations are taken as spread evenly (as Prometheus's
// histogram_quantile does); in the last bucket the estimate is its lower bound. It is
// NaN when counts holds no observation.
func Quantile(q float64, bounds []float64, counts []uint64) float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 || q <= 0 || q > 1 || len(counts) != len(bounds)+1 {
		return math.NaN()
	}
	rank := q * float64(total)
	var seen uint64
	for i, c := range counts {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		if i == len(bounds) {
			return bounds[len(bounds)-1]
		}
		lower := 0.0
		if i > 0 {
			lower = bounds[i-1]
		}
		return lower + (bounds[i]-lower)*(rank-float64(seen))/float64(c)
	}
	return bounds[len(bounds)-1]
}
