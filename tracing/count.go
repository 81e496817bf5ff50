package tracing

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Counting the spans of a node by outcome: exported (the collector took them), failed
// (the exporter returned an error for their batch; the SDK does not retry a batch),
// dropped (the queue toward the exporter was full, so they were never exported).
//
// The SDK's batch processor drops quietly when its queue is full. So a processor in
// front of it counts the spans it has handed on and not yet seen exported or failed,
// and drops, counted, a span that would take that past the batch processor's queue
// size: the batch processor then never drops one itself (its queue holds at most what
// is in flight), and every span has exactly one outcome.

// Counts are a node's spans by outcome, since the provider started.
type Counts struct {
	Exported, Failed, Dropped int64
}

type spanCounts struct {
	exported, failed, dropped atomic.Int64
	inflight                  atomic.Int64 // handed to the batch processor, not yet exported or failed
	bound                     int64
}

func (c *spanCounts) read() Counts {
	return Counts{Exported: c.exported.Load(), Failed: c.failed.Load(), Dropped: c.dropped.Load()}
}

// queueSize is the batch processor's queue size: OTEL_BSP_MAX_QUEUE_SIZE, else the
// SDK's default (2,048).
func queueSize() int {
	if n, err := strconv.Atoi(strings.TrimSpace(os.Getenv("OTEL_BSP_MAX_QUEUE_SIZE"))); err == nil && n > 0 {
		return n
	}
	return sdktrace.DefaultMaxQueueSize
}

// countingProcessor drops (and counts) a sampled span that the batch processor
// behind it has no room for.
type countingProcessor struct {
	sdktrace.SpanProcessor
	c *spanCounts
}

func (p countingProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return // the batch processor takes only sampled spans
	}
	if p.c.inflight.Add(1) > p.c.bound {
		p.c.inflight.Add(-1)
		p.c.dropped.Add(1)
		return
	}
	p.SpanProcessor.OnEnd(s)
}

// countingExporter counts what its exporter took and what it refused.
type countingExporter struct {
	sdktrace.SpanExporter
	c *spanCounts
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	n := int64(len(spans))
	e.c.inflight.Add(-n)
	if err != nil {
		e.c.failed.Add(n)
	} else {
		e.c.exported.Add(n)
	}
	return err
}

// registerCounts exports the counts as meshnode.trace.spans{outcome}.
func registerCounts(mp metric.MeterProvider, c *spanCounts) (metric.Registration, error) {
	m := mp.Meter("github.com/meshnode/meshnode/tracing")
	spans, err := m.Int64ObservableCounter("meshnode.trace.spans", metric.WithUnit("{span}"),
		metric.WithDescription("Spans of this node by outcome: exported, failed (the collector refused their batch), dropped (the export queue was full)."))
	if err != nil {
		return nil, err
	}
	outcome := func(v string) metric.ObserveOption { return metric.WithAttributes(attribute.String("outcome", v)) }
	exported, failed, dropped := outcome("exported"), outcome("failed"), outcome("dropped")
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		n := c.read()
		o.ObserveInt64(spans, n.Exported, exported)
		o.ObserveInt64(spans, n.Failed, failed)
		o.ObserveInt64(spans, n.Dropped, dropped)
		return nil
	}, spans)
}
