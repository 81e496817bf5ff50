package connector

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/session/wire"
)

// tracerName is the instrumentation scope of the connector's client spans.
const tracerName = "github.com/meshnode/meshnode/session/connector"

// startSpan starts the client span of a Request or Send named name (tracing is on:
// c.tracer != nil) and returns opts with the span's W3C context added as the packet's
// traceparent and tracestate metadata, for the server to continue the trace.
//
// Two cases send the packet without the context, never failing it: the caller set
// traceparent itself (it propagates a trace of its own, as the services client does),
// and the metadata would pass the STREAM bound of 1,024 bytes with it (the span gets
// an event saying so).
func (c *Connector) startSpan(ctx context.Context, kind, name string, opts []CallOption) (context.Context, trace.Span, []CallOption) {
	mdLen := 1 // the block's count byte
	for _, o := range opts {
		if o.kind == optionMetadata {
			if o.key == traceprop.TraceParent {
				return ctx, nil, opts
			}
			mdLen += 1 + len(o.key) + 2 + len(o.value)
		}
	}
	ctx, span := c.tracer.Start(ctx, "stream "+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("zlink.stream.packet.kind", kind), attribute.String("zlink.stream.packet.name", name),
			attribute.String("zlink.stream.endpoint", c.ep.raw)))
	f := traceprop.Inject(ctx)
	if f.Parent == "" {
		return ctx, span, opts
	}
	mdLen += 1 + len(traceprop.TraceParent) + 2 + len(f.Parent)
	if f.State != "" {
		mdLen += 1 + len(traceprop.TraceState) + 2 + len(f.State)
	}
	if mdLen > wire.MaxMetadataBytes {
		span.AddEvent("trace context not sent: the packet's metadata would pass 1,024 bytes")
		return ctx, span, opts
	}
	out := make([]CallOption, len(opts), len(opts)+2)
	copy(out, opts)
	out = append(out, WithMetadata(traceprop.TraceParent, f.Parent))
	if f.State != "" {
		out = append(out, WithMetadata(traceprop.TraceState, f.State))
	}
	return ctx, span, out
}

// endSpan ends a client span with the call's outcome.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
