package binding

import (
	"context"
	"encoding/binary"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session"
	swire "github.com/meshnode/meshnode/session/wire"
)

// Tracing across the relay (docs/binding.md, "Trace context"): the STREAM server span's
// W3C context rides in record 24 under the relay's reserved keys, the Actor's turn runs
// in a span parented on it, and the reply's 36 carries the turn's context back inside
// meshnode's own $zlink.reply envelope, only to a session owner that sent one.

const tracerName = "github.com/meshnode/meshnode/binding"

// The relay's own trace context keys on record 24: in the reserved namespace, so a
// client's traceparent metadata never crosses as the relay's (a client cannot set
// zlink. keys; its own traceparent is forwarded as application metadata, untouched).
const (
	traceParentKey = reservedMetaPrefix + traceprop.TraceParent
	traceStateKey  = reservedMetaPrefix + traceprop.TraceState
)

// Span attribute keys of the Actor's turn.
const (
	AttrActorID         = "meshnode.actor.id"
	AttrActorKind       = "meshnode.actor.kind"
	AttrSession         = "meshnode.binding.session"
	AttrBindingGen      = "meshnode.binding.generation"
	AttrSessionSequence = "meshnode.binding.session_sequence"
)

// injectRelay adds the W3C context of the relayed packet's server span to record 24,
// unless the metadata frame would pass its 1,024-byte bound with it (the relay then
// goes untraced; the packet's span says so).
func injectRelay(rec *wire.Record, pkt *session.Packet) {
	sc := pkt.SpanContext()
	if !sc.IsValid() {
		return
	}
	f := traceprop.Inject(trace.ContextWithSpanContext(context.Background(), sc))
	size := 2 // version and count bytes
	for _, e := range rec.Metadata {
		size += 1 + len(e.Key) + 2 + len(e.Value)
	}
	size += 1 + len(traceParentKey) + 2 + len(f.Parent)
	if f.State != "" {
		size += 1 + len(traceStateKey) + 2 + len(f.State)
	}
	if size > wire.MaxMetadataFrame {
		pkt.Span().AddEvent("trace context not relayed: record 24's metadata would pass 1,024 bytes")
		return
	}
	rec.Metadata = append(rec.Metadata, wire.MetadataEntry{Key: traceParentKey, Value: f.Parent})
	if f.State != "" {
		rec.Metadata = append(rec.Metadata, wire.MetadataEntry{Key: traceStateKey, Value: f.State})
	}
}

// relayTrace reads the relay's trace context from record 24: whether the session owner
// sent one (it then reads one back in the reply), and the fields.
func relayTrace(md wire.Metadata) (traceprop.Fields, bool) {
	var f traceprop.Fields
	var ok bool
	f.Parent, ok = md.Get(traceParentKey)
	if ok {
		f.State, _ = md.Get(traceStateKey)
	}
	return f, ok
}

// startTurnSpan starts the span of the Actor's turn for a relayed packet (tracing is
// on: b.tracer != nil), parented on the relay's context when it is valid W3C; a
// malformed one starts a new root and is counted.
func (b *Binder) startTurnSpan(t *actor.Turn, f traceprop.Fields, name string, request bool, tail *wire.BoundSessionTail) (context.Context, trace.Span) {
	ctx, bad := traceprop.Extract(t.Context(), f)
	if bad {
		b.badCarriers.Add(ctx, "relay")
	}
	kind := "send"
	if request {
		kind = "request"
	}
	return b.tracer.Start(ctx, "actor "+t.Kind()+" "+name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String(AttrActorID, t.Fence().ID),
			attribute.String(AttrActorKind, t.Kind()),
			attribute.String(session.AttrPacketName, name),
			attribute.String(session.AttrPacketKind, kind),
			attribute.String(AttrSession, tail.SourceSessionRID),
			attribute.Int64(AttrBindingGen, int64(tail.SourceBindingGeneration)),
			attribute.Int64(AttrSessionSequence, int64(tail.SourceSessionSequence)),
		))
}

// replyTraceFlag, set in the kind byte of a $zlink.reply, says that a trace context
// follows the kind byte: u8 length and the traceparent, u16 length and the tracestate
// (0: none), then the reply payload as usual.
const replyTraceFlag = 0x80

// encodeTracedReply is encodeReply with the Actor turn's trace context f.
func encodeTracedReply(seq uint64, kind swire.Kind, f traceprop.Fields, payload []byte) []byte {
	if len(f.Parent) == 0 || len(f.Parent) > 255 || len(f.State) > 0xFFFF {
		return encodeReply(seq, kind, payload)
	}
	b := make([]byte, 0, 9+1+len(f.Parent)+2+len(f.State)+len(payload))
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, byte(kind)|replyTraceFlag, byte(len(f.Parent)))
	b = append(b, f.Parent...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(f.State)))
	b = append(b, f.State...)
	return append(b, payload...)
}

// finishReplySpan records, on the session owner, the reply that came back for a
// relayed Request: a short span parented on the Actor turn's context from the 36 and
// linked to the packet's server span, which the reply then ends.
func (b *Binder) finishReplySpan(pkt *session.Packet, f traceprop.Fields, kind swire.Kind) trace.Span {
	ctx, bad := traceprop.Extract(context.Background(), f)
	if bad {
		b.badCarriers.Add(ctx, "reply")
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String(session.AttrPacketName, pkt.Name), attribute.Int64(session.AttrRequestSeq, int64(pkt.RequestSeq)))}
	if sc := pkt.SpanContext(); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := b.tracer.Start(ctx, "reply "+pkt.Name, opts...)
	if kind == swire.KindError {
		span.SetStatus(codes.Error, "error reply")
	}
	return span
}
