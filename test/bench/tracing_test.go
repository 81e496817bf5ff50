package bench

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

// discard is a span exporter that drops what it gets: the traced benchmarks measure
// the cost of recording and batching spans, not of a collector.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// tracedProvider records every span (always-on) into a batch processor that exports to
// nowhere: the cost of tracing on, sampled.
func tracedProvider(b *testing.B) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// BenchmarkConnectorEchoTraced is BenchmarkConnectorEcho with tracing on at both ends,
// every request sampled: a client span, its traceparent in the metadata, a server span.
func BenchmarkConnectorEchoTraced(b *testing.B) {
	tp := tracedProvider(b)
	addr, stop := startMeshnodeWith(b, session.HostOptions{TracerProvider: tp})
	defer stop()
	connectorEcho(b, dialConnectorWith(b, addr, connector.Options{TracerProvider: tp}))
}

// BenchmarkBoundRequestCrossNodeTraced is BenchmarkBoundRequestCrossNode with tracing
// on at the client and both nodes, every request sampled: client, server, Actor turn
// and reply spans, the trace context in records 24 and 36.
func BenchmarkBoundRequestCrossNodeTraced(b *testing.B) {
	tp := tracedProvider(b)
	f := fleet.Start(b, 2, fleet.Options{NoTap: true, Mesh: meshtest.Options{Config: func(_ int, cfg *meshnode.Config) { cfg.TracerProvider = tp }}})
	id := f.IDOn(b, "room", 1, "bench-")
	c := dialConnectorWith(b, strings.TrimPrefix(f.Node(0).Endpoints()[0], "tcp://"), connector.Options{TracerProvider: tp})
	defer c.Close()
	ctx := context.Background()
	bctx, cancel := context.WithTimeout(ctx, fleet.Wait)
	defer cancel()
	if err := c.Request(bctx, "bind", map[string]string{"actor": id, "kind": "room"}, nil); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"msg":"hello mesh","n":12345678}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.RequestRaw(ctx, "room.echo", wire.CodecJSON, payload); err != nil {
			b.Fatal(err)
		}
	}
}
