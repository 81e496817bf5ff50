package session

import (
	"context"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/session/wire"
)

// tracerName is the instrumentation scope of the STREAM server spans.
const tracerName = "github.com/meshnode/meshnode/session"

// Span attribute keys of a STREAM packet. Payload bytes are never an attribute.
const (
	AttrPacketKind  = "zlink.stream.packet.kind" // send or request
	AttrPacketName  = "zlink.stream.packet.name"
	AttrRequestSeq  = "zlink.stream.request_seq"
	AttrRoutingID   = "zlink.stream.routing_id" // the session's routing id
	AttrStreamNode  = "zlink.stream.node"
	AttrTransport   = "zlink.stream.transport"
	AttrPayloadSize = "zlink.stream.payload.size" // a length, never the bytes
)

// startPacketSpan starts the server span of pkt (tracing is on: h.tracer != nil),
// parented on the client's traceparent metadata when it carries a valid one; a
// malformed one starts a new root and is counted. The span ends when the packet is
// done: a Send when its callback returns, a Request when it is answered.
func (c *conn) startPacketSpan(pkt *Packet) context.Context {
	h := c.host
	ctx := c.ctx
	var f traceprop.Fields
	f.Parent, _ = pkt.Metadata.Get(traceprop.TraceParent)
	if f.Parent != "" {
		f.State, _ = pkt.Metadata.Get(traceprop.TraceState)
		if pkt.reusable && f.State != "" {
			// The parsed trace state keeps substrings of it, and the span outlives a
			// reused packet's bytes (an exporter reads it later).
			f.State = strings.Clone(f.State)
		}
		var bad bool
		if ctx, bad = traceprop.Extract(ctx, f); bad {
			h.badCarriers.Add(c.ctx, "stream")
		}
	}
	kind := "send"
	if pkt.Kind == wire.KindRequest {
		kind = "request"
	}
	attrs := []attribute.KeyValue{
		attribute.String(AttrPacketKind, kind),
		attribute.String(AttrPacketName, pkt.Name),
		attribute.Int64(AttrRoutingID, int64(c.rid)),
		attribute.String(AttrStreamNode, c.node.cfg.name),
		attribute.String(AttrTransport, c.transport),
		attribute.Int(AttrPayloadSize, len(pkt.Payload)),
	}
	if pkt.Kind == wire.KindRequest {
		attrs = append(attrs, attribute.Int64(AttrRequestSeq, int64(pkt.RequestSeq)))
	}
	ps := &packetSpan{}
	ctx, ps.span = h.tracer.Start(ctx, "stream "+pkt.Name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	pkt.span = ps
	return ctx
}

// packetSpan is a packet's server span and whether it ended.
type packetSpan struct {
	span trace.Span
	done atomic.Bool
}

// endSpan ends the packet's span once, whoever gets there first (the reply, from any
// goroutine, or the dispatch). code is the Error reply's code ("" for success).
func (p *Packet) endSpan(code string) {
	if p.span == nil || !p.span.done.CompareAndSwap(false, true) {
		return
	}
	if code != "" {
		p.span.span.SetStatus(codes.Error, code)
	}
	p.span.span.End()
}

// SpanContext returns the span context of the packet's server span: invalid when
// tracing is off. Layers that carry the packet on (a relay to a bound Actor) propagate
// it.
func (p *Packet) SpanContext() trace.SpanContext {
	if p.span == nil {
		return trace.SpanContext{}
	}
	return p.span.span.SpanContext()
}

// Span returns the packet's server span, or nil when tracing is off. It ends when the
// packet is answered (a Request) or when its callback returns (a Send).
func (p *Packet) Span() trace.Span {
	if p.span == nil {
		return nil
	}
	return p.span.span
}
