package histogram

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	bounds := []float64{1, 2, 4}
	for _, tc := range []struct {
		q      float64
		counts []uint64
		want   float64
	}{
		{0.5, []uint64{0, 10, 0, 0}, 1.5},  // the middle of the bucket (1, 2]
		{1, []uint64{0, 10, 0, 0}, 2},      // its top
		{0.99, []uint64{99, 0, 1, 0}, 1},   // 99 of 100 at most 1
		{0.995, []uint64{99, 0, 1, 0}, 3},  // half way into (2, 4]
		{0.99, []uint64{0, 0, 0, 5}, 4},    // above the last bound: the last bound
		{0.25, []uint64{4, 0, 0, 0}, 0.25}, // the first bucket starts at 0
	} {
		if got := Quantile(tc.q, bounds, tc.counts); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tc.q, tc.counts, got, tc.want)
		}
	}
	if got := Quantile(0.99, bounds, []uint64{0, 0, 0, 0}); !math.IsNaN(got) {
		t.Errorf("no observations: %v, want NaN", got)
	}
	if got := Quantile(0.99, bounds, []uint64{1, 2}); !math.IsNaN(got) {
		t.Errorf("counts of the wrong length: %v, want NaN", got)
	}
	for i := 1; i < len(Seconds); i++ {
		if Seconds[i] <= Seconds[i-1] {
			t.Fatalf("Seconds not increasing at %d", i)
		}
	}
}
