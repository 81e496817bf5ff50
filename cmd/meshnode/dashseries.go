package main

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/meshnode/meshnode/internal/histogram"
)

// The dashboard's charts are drawn from figures each node keeps itself, no metrics
// service needed: every seriesInterval the node reads its own instruments (a metric
// reader of its own beside the Prometheus exporter) and keeps the last seriesPoints
// points: records per second, open sessions, the p99 latency of the relayed requests
// completed in the interval, and failures per second. GET /v1/node/series answers them;
// GET /v1/fleet/series gathers every member's.

const (
	seriesInterval = 2 * time.Second
	seriesPoints   = 300 // ten minutes
)

// errorInstruments are the failures the errors/s chart adds up: what the node counts
// as gone wrong, wherever it happened (docs/admin.md lists them).
var errorInstruments = []string{
	"zlink.mesh_node.messages.dropped",
	"meshnode.binding.relayed_requests.failed",
	"meshnode.binding.binds_refused",
	"meshnode.stream.protocol_errors",
	"meshnode.stream.connections.refused",
	"meshnode.stream.slow_consumers",
	"meshnode.stream.frame_timeouts",
	"meshnode.stream.emsgsize",
	"meshnode.stream.handshake_failures",
	"meshnode.actor.panics",
	"meshnode.actor.mailbox_rejected",
	"meshnode.services.calls.failed",
}

// seriesPoint is one point of a node's series.
type seriesPoint struct {
	T        int64    `json:"t"`        // unix milliseconds
	Records  float64  `json:"records"`  // records crossing the node's boundary per second (in + out)
	Sessions int64    `json:"sessions"` // open STREAM sessions
	P99      *float64 `json:"p99"`      // ms; null when no relayed request completed in the interval
	Errors   float64  `json:"errors"`   // failures per second (errorInstruments)
}

// seriesJSON is the answer of GET /v1/node/series.
type seriesJSON struct {
	RID        string        `json:"rid"`
	Generation uint64        `json:"generation,string"`
	Interval   float64       `json:"interval"` // seconds between points
	Points     []seriesPoint `json:"points"`
}

// totals are the cumulative figures one reading gives.
type totals struct {
	at       time.Time
	records  int64
	sessions int64
	errors   int64
	latency  []uint64 // bucket counts of the relayed request histogram (nil: none yet)
	bounds   []float64
}

// series samples the node's instruments and keeps its last points.
type series struct {
	reader *sdkmetric.ManualReader
	log    *slog.Logger

	mu     sync.Mutex
	points []seriesPoint
	prev   *totals
}

func newSeries(reader *sdkmetric.ManualReader, log *slog.Logger) *series {
	return &series{reader: reader, log: log}
}

// run samples every seriesInterval until ctx ends; its caller owns it.
func (s *series) run(ctx context.Context) {
	t := time.NewTicker(seriesInterval)
	defer t.Stop()
	s.sample(ctx, time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sample(ctx, now)
		}
	}
}

// sample reads the instruments once and adds a point (from the second reading on:
// rates need two).
func (s *series) sample(ctx context.Context, now time.Time) {
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(ctx, &rm); err != nil {
		if ctx.Err() == nil {
			s.log.Debug("dashboard series: reading the instruments", "err", err)
		}
		return
	}
	cur := readTotals(&rm, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.prev; p != nil {
		dt := cur.at.Sub(p.at).Seconds()
		if dt > 0 {
			pt := seriesPoint{T: cur.at.UnixMilli(), Sessions: cur.sessions,
				Records: float64(max(0, cur.records-p.records)) / dt, Errors: float64(max(0, cur.errors-p.errors)) / dt}
			if len(cur.latency) > 0 && (p.latency == nil || len(p.latency) == len(cur.latency)) {
				delta := make([]uint64, len(cur.latency))
				for i, c := range cur.latency {
					if p.latency != nil && c >= p.latency[i] {
						c -= p.latency[i]
					}
					delta[i] = c
				}
				if q := histogram.Quantile(0.99, cur.bounds, delta); !math.IsNaN(q) {
					ms := q * 1000
					pt.P99 = &ms
				}
			}
			s.points = append(s.points, pt)
			if len(s.points) > seriesPoints {
				s.points = slices.Delete(s.points, 0, len(s.points)-seriesPoints)
			}
		}
	}
	s.prev = &cur
}

// since returns the points after unix millisecond t (all of them for 0).
func (s *series) since(t int64) []seriesPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.points, t, func(p seriesPoint, t int64) int {
		switch {
		case p.T <= t:
			return -1
		default:
			return 1
		}
	})
	return append([]seriesPoint{}, s.points[i:]...)
}

// readTotals finds the figures the charts need in one reading.
func readTotals(rm *metricdata.ResourceMetrics, at time.Time) totals {
	t := totals{at: at}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch {
			case m.Name == "meshnode.mesh.records":
				t.records += sumInt(m.Data)
			case m.Name == "zlink.stream.connections.active":
				t.sessions += sumInt(m.Data)
			case slices.Contains(errorInstruments, m.Name):
				t.errors += sumInt(m.Data)
			case m.Name == "meshnode.binding.relayed_request.duration":
				if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
					for _, dp := range h.DataPoints {
						if t.latency == nil {
							t.latency, t.bounds = make([]uint64, len(dp.BucketCounts)), dp.Bounds
						}
						for i, c := range dp.BucketCounts {
							if i < len(t.latency) {
								t.latency[i] += c
							}
						}
					}
				}
			}
		}
	}
	return t
}

// sumInt adds the data points of an integer sum (a counter or an up-down counter).
func sumInt(d metricdata.Aggregation) int64 {
	var n int64
	if s, ok := d.(metricdata.Sum[int64]); ok {
		for _, dp := range s.DataPoints {
			n += dp.Value
		}
	}
	return n
}
