// Package traceprop carries W3C trace context (traceparent, tracestate) through
// meshnode's own wire formats: STREAM packet metadata, the relay's reserved metadata
// on record 24 and the reply envelope of record 36. It holds only what every layer
// shares: the text-map propagator, the carriers and the count of malformed carriers.
// Every helper is for the traced path; callers keep the untraced path to a nil check
// on their tracer.
package traceprop

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	swire "github.com/meshnode/meshnode/session/wire"
)

// W3C Trace Context header names, as they sit in STREAM packet metadata.
const (
	TraceParent = "traceparent"
	TraceState  = "tracestate"
)

// Propagator is the one propagator meshnode uses: W3C Trace Context only (baggage is
// not carried).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Tracer returns tp's tracer for scope, or nil when tp is nil or otel's no-op
// provider: a nil tracer is the "tracing off" flag that the hot paths check.
func Tracer(tp trace.TracerProvider, scope string) trace.Tracer {
	if tp == nil {
		return nil
	}
	if _, off := tp.(noop.TracerProvider); off {
		return nil
	}
	return tp.Tracer(scope)
}

// MetadataCarrier reads a STREAM metadata block as a propagation.TextMapCarrier, under
// key prefix Prefix ("" for the client's own keys).
type MetadataCarrier struct {
	MD     swire.Metadata
	Prefix string
}

// Get returns the value of key.
func (c *MetadataCarrier) Get(key string) string {
	v, _ := c.MD.Get(c.Prefix + key)
	return v
}

// Set sets key, replacing an entry already there.
func (c *MetadataCarrier) Set(key, value string) {
	k := c.Prefix + key
	for i := range c.MD {
		if c.MD[i].Key == k {
			c.MD[i].Value = value
			return
		}
	}
	c.MD = append(c.MD, swire.MetadataEntry{Key: k, Value: value})
}

// Keys lists the keys under the prefix.
func (c *MetadataCarrier) Keys() []string {
	var out []string
	for _, e := range c.MD {
		if len(e.Key) >= len(c.Prefix) && e.Key[:len(c.Prefix)] == c.Prefix {
			out = append(out, e.Key[len(c.Prefix):])
		}
	}
	return out
}

// Fields is a carrier of the two W3C fields alone (no map, no allocation for the
// carrier itself).
type Fields struct{ Parent, State string }

// Get returns traceparent or tracestate.
func (f *Fields) Get(key string) string {
	switch key {
	case TraceParent:
		return f.Parent
	case TraceState:
		return f.State
	}
	return ""
}

// Set stores traceparent or tracestate; other keys are not carried.
func (f *Fields) Set(key, value string) {
	switch key {
	case TraceParent:
		f.Parent = value
	case TraceState:
		f.State = value
	}
}

// Keys lists the two fields.
func (f *Fields) Keys() []string { return []string{TraceParent, TraceState} }

// Inject returns the W3C fields of the span context in ctx (empty Parent when there is
// none).
func Inject(ctx context.Context) Fields {
	var f Fields
	Propagator.Inject(ctx, &f)
	return f
}

// Extract returns ctx with the remote span context of f, and whether f was malformed:
// a traceparent present but not valid W3C (the caller then starts a new root span and
// counts it). An absent traceparent is not malformed.
func Extract(ctx context.Context, f Fields) (context.Context, bool) {
	if f.Parent == "" {
		return ctx, false
	}
	out := Propagator.Extract(ctx, &f)
	if !trace.SpanContextFromContext(out).IsValid() {
		return ctx, true
	}
	return out, false
}

// BadCarrierMetric is the counter of malformed trace carriers: a traceparent that a
// client (or a peer node) sent and that is not valid W3C Trace Context. Such a packet
// starts a new root span instead of failing.
const BadCarrierMetric = "meshnode.trace.bad_carrier"

// BadCarriers counts malformed carriers, by where they arrived (stream, relay, reply).
type BadCarriers struct {
	c metric.Int64Counter
}

// NewBadCarriers registers the counter with mp under scope (nil mp: not counted).
func NewBadCarriers(mp metric.MeterProvider, scope string) *BadCarriers {
	if mp == nil {
		return &BadCarriers{}
	}
	c, err := mp.Meter(scope).Int64Counter(BadCarrierMetric, metric.WithUnit("{carrier}"),
		metric.WithDescription("Malformed W3C trace contexts received; each started a new root span."))
	if err != nil {
		return &BadCarriers{}
	}
	return &BadCarriers{c: c}
}

// Add counts one malformed carrier that arrived at where.
func (b *BadCarriers) Add(ctx context.Context, where string) {
	if b == nil || b.c == nil {
		return
	}
	b.c.Add(ctx, 1, metric.WithAttributes(attribute.String("where", where)))
}
