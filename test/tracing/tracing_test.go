// Package tracing_test checks traces end to end across two nodes: a connector's client
// span, the STREAM server span on the session's node, the relay to the bound Actor on
// the other node and its turn, a service call made from the turn (rpc.client and
// rpc.server), and the reply coming back.
package tracing_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
	"github.com/meshnode/meshnode/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = fleet.Wait

// secret is in every payload of these tests; no span attribute may hold it.
const secret = "s3cret-payload-bytes"

// Greeter is the service the traced Actor calls from its turn.
type Greeter struct {
	Greet services.Method[GreetArgs, Greeting]
}

type GreetArgs struct {
	Name string `json:"name"`
}

type Greeting struct {
	Text string `json:"text"`
}

var greeterToken = services.Define("test.greeter", func(d *services.Describer, g *Greeter) {
	services.DescribeMethod(d, "greet", &g.Greet)
})

// tracedRoom is the Actor kind "traced": on room.greet it calls the greeter with its
// turn's Context (so the call joins the turn's trace) and replies with the greeting.
type tracedRoom struct{ greeter func() *Greeter }

func (r *tracedRoom) Receive(ctx *actor.Context) {
	p, ok := ctx.Message().(*actor.SessionPacket)
	if !ok || p.Name != "room.greet" || !p.Request {
		return
	}
	var in GreetArgs
	if err := p.Decode(&in); err != nil {
		_ = ctx.ReplyError(err)
		return
	}
	g, err := r.greeter().Greet.Call(ctx, in)
	if err != nil {
		_ = ctx.ReplyError(err)
		return
	}
	_ = ctx.Reply(Greeting{Text: g.Text})
}

// providers returns a tracer provider per party, each exporting synchronously to exp
// with a resource naming the party (node0, node1, client).
func provider(t *testing.T, exp *tracetest.InMemoryExporter, party string) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("party", party))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

func dialTraced(t *testing.T, endpoint string, tp trace.TracerProvider) *connector.Connector {
	t.Helper()
	c, err := connector.New(endpoint, connector.Options{
		Heartbeat: connector.HeartbeatOptions{Disabled: true}, Reconnect: connector.ReconnectPolicy{Disabled: true},
		TracerProvider: tp,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func party(s tracetest.SpanStub) string {
	v, _ := s.Resource.Set().Value("party")
	return v.AsString()
}

// find returns the one span named name from party, failing the test otherwise.
func find(t *testing.T, spans tracetest.SpanStubs, name, from string) tracetest.SpanStub {
	t.Helper()
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name && party(s) == from {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d spans %q from %s, want 1; all: %v", len(out), name, from, names(spans))
	}
	return out[0]
}

func has(spans tracetest.SpanStubs, name, from string) bool {
	for _, s := range spans {
		if s.Name == name && party(s) == from {
			return true
		}
	}
	return false
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, party(s)+":"+s.Name)
	}
	return out
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func childOf(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("%s (%s) is not a child of %s (%s): parent %s, trace %s vs %s", child.Name, party(child), parent.Name, party(parent),
			child.Parent.SpanID(), child.SpanContext.TraceID(), parent.SpanContext.TraceID())
	}
	if party(child) != party(parent) && !child.Parent.IsRemote() {
		t.Errorf("%s's parent %s is on another party but not marked remote", child.Name, parent.Name)
	}
}

// TestTraceSpanTreeAcrossTwoNodes is the span tree: connector client span →
// STREAM server span (node 0) → the bound Actor's turn (node 1) → rpc.client →
// rpc.server, and the reply back on node 0 as a child of the turn, linked to the
// server span; attributes name the packet and never hold payload bytes.
func TestTraceSpanTreeAcrossTwoNodes(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tps := []*sdktrace.TracerProvider{provider(t, exp, "node0"), provider(t, exp, "node1")}
	var greeterMu sync.Mutex
	var greeter *Greeter
	f := fleet.Start(t, 2, fleet.Options{
		Mesh: meshtest.Options{Config: func(i int, cfg *meshnode.Config) { cfg.TracerProvider = tps[i] }},
		Config: func(cfg *meshnode.Config) {
			cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "traced", New: func() actor.Actor {
				return &tracedRoom{greeter: func() *Greeter { greeterMu.Lock(); defer greeterMu.Unlock(); return greeter }}
			}})
			cfg.Services = func(*meshnode.Node) []services.Facet {
				return []services.Facet{{ID: "greeter", Setup: func(env *services.Env) {
					services.Provide(env, greeterToken, &Greeter{Greet: services.Func(func(ctx context.Context, in GreetArgs) (Greeting, error) {
						return Greeting{Text: "hello " + in.Name}, nil
					})})
				}}}
			}
		},
	})
	// The Actor's node consumes the greeter of its own services host through a
	// connection, as a presentation would: the call is an RPC with both spans.
	ctx := context.Background()
	conn := services.NewLoopback(f.Node(1).Services(), services.Client{ID: "actors"})
	t.Cleanup(conn.Close)
	consumer, err := services.NewHost(ctx, services.HostOptions{Name: "actors", Connections: []services.Connection{conn}, TracerProvider: tps[1]},
		services.Facet{ID: "actors", Setup: func(env *services.Env) {
			g := services.Use(env, greeterToken)
			greeterMu.Lock()
			greeter = g
			greeterMu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consumer.Close(ctx) })

	client := dialTraced(t, f.Node(0).Endpoints()[0], provider(t, exp, "client"))
	id := f.IDOn(t, "traced", 1, "tr-")
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := client.Request(rctx, "bind", map[string]string{"actor": id, "kind": "traced"}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := client.RequestRaw(rctx, "room.greet", wire.CodecJSON, []byte(`{"name":"`+secret+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.Payload), "hello "+secret) {
		t.Fatalf("reply %s", r.Payload)
	}
	testkit.Eventually(t, wait, "every span of the traced request to end", func() bool {
		s := exp.GetSpans()
		return has(s, "reply room.greet", "node0") && has(s, "stream room.greet", "node0") && has(s, "actor traced room.greet", "node1")
	})
	spans := exp.GetSpans()
	cli := find(t, spans, "stream room.greet", "client")
	srv := find(t, spans, "stream room.greet", "node0")
	turn := find(t, spans, "actor traced room.greet", "node1")
	rpcc := find(t, spans, "rpc.client", "node1")
	rpcs := find(t, spans, "rpc.server", "node1")
	reply := find(t, spans, "reply room.greet", "node0")

	if cli.Parent.IsValid() {
		t.Errorf("the client span has a parent: %v", cli.Parent)
	}
	childOf(t, srv, cli)
	childOf(t, turn, srv)
	childOf(t, rpcc, turn)
	childOf(t, rpcs, rpcc)
	childOf(t, reply, turn)
	if len(reply.Links) != 1 || reply.Links[0].SpanContext.SpanID() != srv.SpanContext.SpanID() {
		t.Errorf("the reply span is not linked to the server span: %v", reply.Links)
	}
	kinds := map[string]trace.SpanKind{"client": cli.SpanKind, "server": srv.SpanKind, "turn": turn.SpanKind, "rpc.client": rpcc.SpanKind, "rpc.server": rpcs.SpanKind}
	want := map[string]trace.SpanKind{"client": trace.SpanKindClient, "server": trace.SpanKindServer, "turn": trace.SpanKindConsumer,
		"rpc.client": trace.SpanKindClient, "rpc.server": trace.SpanKindServer}
	for k, w := range want {
		if kinds[k] != w {
			t.Errorf("%s span kind %v, want %v", k, kinds[k], w)
		}
	}
	// The server span ends when the reply leaves, after the turn it waited for.
	if srv.EndTime.Before(turn.StartTime) {
		t.Errorf("the server span ended (%v) before the Actor's turn started (%v)", srv.EndTime, turn.StartTime)
	}

	for key, wantV := range map[string]string{"zlink.stream.packet.kind": "request", "zlink.stream.packet.name": "room.greet", "zlink.stream.transport": "tcp"} {
		if v, ok := attr(srv, key); !ok || v.String() != wantV {
			t.Errorf("server span %s = %q, want %q", key, v.String(), wantV)
		}
	}
	for _, key := range []string{"zlink.stream.request_seq", "zlink.stream.routing_id"} {
		if v, ok := attr(srv, key); !ok || v.AsInt64() <= 0 {
			t.Errorf("server span %s = %v, want a positive id", key, v.String())
		}
	}
	if v, _ := attr(turn, "meshnode.actor.id"); v.AsString() != id {
		t.Errorf("turn span actor id %q, want %q", v.AsString(), id)
	}
	if v, _ := attr(turn, "meshnode.actor.kind"); v.AsString() != "traced" {
		t.Errorf("turn span actor kind %q", v.AsString())
	}
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), secret) {
				t.Errorf("span %s attribute %s holds payload bytes", s.Name, kv.Key)
			}
		}
	}
}

// TestTraceMalformedTraceparentStartsRootAndIsCounted: a client's traceparent that is
// not W3C starts a new root span, the request is served, and
// meshnode.trace.bad_carrier counts it.
func TestTraceMalformedTraceparentStartsRootAndIsCounted(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := provider(t, exp, "node0")
	reader := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	f := fleet.Start(t, 1, fleet.Options{Mesh: meshtest.Options{
		Config:        func(_ int, cfg *meshnode.Config) { cfg.TracerProvider = tp },
		MeterProvider: func(int) otelmetric.MeterProvider { return mp },
	}})
	c := f.Connect(t, 0) // no tracer: the client's metadata is all there is
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, bad := range []string{"not-a-traceparent", "00-00000000000000000000000000000000-0000000000000000-01"} {
		if _, err := c.RequestRaw(ctx, "echo", wire.CodecRaw, []byte(secret), connector.WithMetadata("traceparent", bad)); err != nil {
			t.Fatalf("echo with traceparent %q: %v", bad, err)
		}
	}
	testkit.Eventually(t, wait, "both echo spans", func() bool { return len(exp.GetSpans()) >= 2 })
	for _, s := range exp.GetSpans() {
		if s.Name != "stream echo" {
			t.Errorf("span %q", s.Name)
		}
		if s.Parent.IsValid() || !s.SpanContext.IsValid() {
			t.Errorf("span %s: parent %v (want none), context valid %v", s.Name, s.Parent, s.SpanContext.IsValid())
		}
	}
	if got := badCarriers(t, reader, "stream"); got != 2 {
		t.Errorf("%s{where=stream} = %d, want 2", traceprop.BadCarrierMetric, got)
	}
	// A valid one continues the client's trace and is not counted.
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := c.RequestRaw(ctx, "echo", wire.CodecRaw, nil, connector.WithMetadata("traceparent", valid)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "the third echo span", func() bool { return len(exp.GetSpans()) >= 3 })
	if s := exp.GetSpans()[2]; s.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !s.Parent.IsRemote() {
		t.Errorf("valid traceparent: parent %v", s.Parent)
	}
	if got := badCarriers(t, reader, "stream"); got != 2 {
		t.Errorf("%s{where=stream} = %d after a valid carrier, want 2", traceprop.BadCarrierMetric, got)
	}
}

func badCarriers(t *testing.T, r *metric.ManualReader, where string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != traceprop.BadCarrierMetric {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is %T", m.Name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				if v, _ := dp.Attributes.Value("where"); v.AsString() == where {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// TestTraceOffByDefault: a node without a TracerProvider records nothing, even for a
// packet that carries a traceparent, and a connector without one adds no metadata.
// Config.TracerProvider nil means off, not otel's global provider: one installed as the
// global records nothing either.
func TestTraceOffByDefault(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	global := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(provider(t, global, "global"))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	f := fleet.Start(t, 1, fleet.Options{})
	c := f.Connect(t, 0)
	id := f.IDOn(t, "probe", 0, "off-")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.Request(ctx, "bind", map[string]string{"actor": id, "kind": "probe"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, "room.meta", nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "the probe to see room.meta", func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen = f.Ev.Of(id)
		for _, e := range seen {
			if strings.HasPrefix(e, "meta ") {
				return true
			}
		}
		return false
	})
	for _, e := range seen {
		if strings.HasPrefix(e, "meta ") && strings.Contains(e, "trace") {
			t.Errorf("an untraced relay carried trace metadata: %s", e)
		}
	}
	// The bind (a STREAM request), the relay and the Actor's turn are done: with tracing
	// on through the global provider their spans would have been exported (a syncer).
	if spans := global.GetSpans(); len(spans) != 0 {
		t.Errorf("a node with Config.TracerProvider nil traced through otel's global provider: %d spans, first %q", len(spans), spans[0].Name)
	}
}

// TestTraceOTLPHTTPFromEnvEndToEnd: a node and a connector whose provider comes from
// the standard variables alone export a traced request to a real OTLP/HTTP receiver
// started here: the client span and the node's server span, parent-linked.
func TestTraceOTLPHTTPFromEnvEndToEnd(t *testing.T) {
	var mu sync.Mutex
	var got []*tracepb.Span
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		m := &collectortrace.ExportTraceServiceRequest{}
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(b, m) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range m.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				got = append(got, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")

	ctx := context.Background()
	tp, shutdown, err := tracing.NewProviderFromEnv(ctx, "otlp-node")
	if err != nil {
		t.Fatal(err)
	}
	f := fleet.Start(t, 1, fleet.Options{Mesh: meshtest.Options{Config: func(_ int, cfg *meshnode.Config) { cfg.TracerProvider = tp }}})
	c := dialTraced(t, f.Node(0).Endpoints()[0], tp)
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if _, err := c.RequestRaw(rctx, "echo", wire.CodecRaw, []byte(secret)); err != nil {
		t.Fatal(err)
	}
	// The server span ended before the reply was written (Packet.Reply ends it), and
	// the client span when the reply came: both are in the batch, and shutdown flushes
	// it to the receiver.
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var cli, sv *tracepb.Span
	for _, s := range got {
		switch {
		case s.Name == "stream echo" && s.Kind == tracepb.Span_SPAN_KIND_CLIENT:
			cli = s
		case s.Name == "stream echo" && s.Kind == tracepb.Span_SPAN_KIND_SERVER:
			sv = s
		}
	}
	if cli == nil || sv == nil {
		t.Fatalf("the receiver got %d spans, not the client and server spans of the echo", len(got))
	}
	if !bytes.Equal(sv.ParentSpanId, cli.SpanId) || !bytes.Equal(sv.TraceId, cli.TraceId) {
		t.Errorf("server span parent %x (trace %x), client span %x (trace %x)", sv.ParentSpanId, sv.TraceId, cli.SpanId, cli.TraceId)
	}
}
