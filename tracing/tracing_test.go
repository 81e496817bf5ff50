package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// allVars are the variables SettingsFromEnv reads; every case starts with all unset.
var allVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"}

func setEnv(t *testing.T, env map[string]string) {
	for _, k := range allVars {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// TestEnvConfigOnOffAndProtocol: tracing is on only when the environment asks (an
// otlp exporter or an OTLP endpoint), off when disabled or none, and the protocol
// follows the traces-specific variable, then the general one, then http/protobuf.
func TestEnvConfigOnOffAndProtocol(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want Settings
		err  bool
	}{
		{"nothing set: off", nil, Settings{}, false},
		{"endpoint: on, http default", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
			Settings{true, ProtocolHTTP, "OTEL_EXPORTER_OTLP_ENDPOINT is set", "http://127.0.0.1:4318/v1/traces", "parentbased_always_on"}, false},
		{"traces endpoint: on, as it is", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/x", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318"},
			Settings{true, ProtocolHTTP, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set", "http://127.0.0.1:4318/x", "parentbased_always_on"}, false},
		{"exporter otlp: on, the default endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			Settings{true, ProtocolHTTP, "OTEL_TRACES_EXPORTER=otlp", "https://localhost:4318/v1/traces", "parentbased_always_on"}, false},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, Settings{Why: "OTEL_TRACES_EXPORTER=none"}, false},
		{"sdk disabled wins", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, Settings{Why: "OTEL_SDK_DISABLED=true"}, false},
		{"grpc, its endpoint as it is, a sampler", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317",
			"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
			Settings{true, ProtocolGRPC, "OTEL_TRACES_EXPORTER=otlp", "collector:4317", "traceidratio:0.1"}, false},
		{"traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			Settings{true, ProtocolHTTP, "OTEL_TRACES_EXPORTER=otlp", "https://localhost:4318/v1/traces", "parentbased_always_on"}, false},
		{"unknown protocol fails", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, Settings{}, true},
		{"unsupported exporter fails", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, Settings{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setEnv(t, c.env)
			got, err := SettingsFromEnv()
			if (err != nil) != c.err || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Fatalf("err %v, want error %v (ErrConfig)", err, c.err)
			}
			if got != c.want {
				t.Errorf("settings %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestEnvConfigOffIsNoopProvider: off means otel's no-op provider, which meshnode takes
// as "no tracer".
func TestEnvConfigOffIsNoopProvider(t *testing.T) {
	setEnv(t, nil)
	tp, shutdown, err := NewProviderFromEnv(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); !ok {
		t.Fatalf("provider %T, want the no-op provider", tp)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestEnvConfigGRPCExporterBuilds: protocol grpc builds the gRPC exporter (it connects
// lazily; nothing listens, and nothing is sent since no span is recorded).
func TestEnvConfigGRPCExporterBuilds(t *testing.T) {
	setEnv(t, map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
	tp, shutdown, err := NewProviderFromEnv(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(*sdktrace.TracerProvider); !ok {
		t.Fatalf("provider %T, want the SDK's", tp)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// receiver is an OTLP/HTTP trace receiver: it decodes every POST /v1/traces.
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	reqs  []*collectortrace.ExportTraceServiceRequest
	fails []string
}

func startReceiver(t *testing.T) *receiver {
	r := &receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	_ = r.srv.Listener.Close()
	r.srv.Listener = ln
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	fail := func(msg string) {
		r.mu.Lock()
		r.fails = append(r.fails, msg)
		r.mu.Unlock()
		http.Error(w, msg, http.StatusBadRequest)
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		fail(req.Method + " " + req.URL.Path + " " + req.Header.Get("Content-Type"))
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			fail(err.Error())
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		fail(err.Error())
		return
	}
	m := &collectortrace.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(b, m); err != nil {
		fail(err.Error())
		return
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, m)
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// spans returns every span received, with its resource's attributes.
func (r *receiver) spans() (out []*tracepb.Span, res []map[string]string, fails []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.reqs {
		for _, rs := range m.ResourceSpans {
			attrs := map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				attrs[kv.Key] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, s)
					res = append(res, attrs)
				}
			}
		}
	}
	return out, res, r.fails
}

// TestOTLPHTTPExportToARealReceiver: with only the standard variables set, spans reach
// an OTLP/HTTP receiver as protobuf, with their parent links and the node's resource.
func TestOTLPHTTPExportToARealReceiver(t *testing.T) {
	r := startReceiver(t)
	setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
	ctx := context.Background()
	tp, shutdown, err := NewProviderFromEnv(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer("test")
	pctx, parent := tr.Start(ctx, "stream room.echo", trace.WithSpanKind(trace.SpanKindServer))
	_, child := tr.Start(pctx, "actor room room.echo")
	child.End()
	parent.End()
	// Shutdown flushes the batch: the receiver has it when it returns.
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans, res, fails := r.spans()
	if len(fails) > 0 {
		t.Fatalf("receiver refused: %v", fails)
	}
	byName := map[string]*tracepb.Span{}
	for i, s := range spans {
		byName[s.Name] = s
		if res[i]["service.name"] != ServiceName || res[i][AttrNodeRID] != "node-a" {
			t.Errorf("span %s resource %v", s.Name, res[i])
		}
	}
	p, c := byName["stream room.echo"], byName["actor room room.echo"]
	if p == nil || c == nil || len(spans) != 2 {
		t.Fatalf("received %d spans: %v", len(spans), byName)
	}
	if !bytes.Equal(c.ParentSpanId, p.SpanId) || !bytes.Equal(c.TraceId, p.TraceId) || len(p.ParentSpanId) != 0 {
		t.Errorf("parent links: child parent %x trace %x, parent id %x trace %x parent %x", c.ParentSpanId, c.TraceId, p.SpanId, p.TraceId, p.ParentSpanId)
	}
	if p.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("kind %v", p.Kind)
	}
}

// TestEnvConfigSamplerRespected: OTEL_TRACES_SAMPLER and its argument reach the SDK's
// provider (NewProviderFromEnv sets no sampler of its own).
func TestEnvConfigSamplerRespected(t *testing.T) {
	r := startReceiver(t)
	for _, c := range []struct {
		sampler, arg string
		sampled      bool
	}{
		{"always_off", "", false},
		{"traceidratio", "0", false},
		{"parentbased_always_off", "", false},
		{"always_on", "", true},
		{"", "", true}, // the SDK's default, parent-based always-on
	} {
		t.Run(c.sampler+"/"+c.arg, func(t *testing.T) {
			setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.srv.URL, "OTEL_TRACES_SAMPLER": c.sampler, "OTEL_TRACES_SAMPLER_ARG": c.arg})
			tp, shutdown, err := NewProviderFromEnv(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = shutdown(context.Background()) }()
			_, s := tp.Tracer("test").Start(context.Background(), "root")
			defer s.End()
			if got := s.SpanContext().IsSampled(); got != c.sampled {
				t.Errorf("sampled %v, want %v", got, c.sampled)
			}
		})
	}
}

// Every span has one outcome, counted: exported when the collector took its batch,
// failed when it refused it (the SDK does not retry a refused batch), dropped when the
// export queue was full. With a queue of 2 and the collector holding the first
// batch, 2 spans are in flight and the other 8 are dropped, exactly.
func TestSpanOutcomesAreCounted(t *testing.T) {
	r := startReceiver(t)
	hold := make(chan struct{})
	held := make(chan struct{}, 16)
	var mu sync.Mutex
	requests := 0
	r.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		requests++
		first := requests == 1
		mu.Unlock()
		if !first {
			_, _ = io.Copy(io.Discard, req.Body)
			http.Error(w, "no", http.StatusBadRequest) // not retried
			return
		}
		held <- struct{}{}
		<-hold
		r.serve(w, req)
	})
	setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.srv.URL, "OTEL_BSP_MAX_QUEUE_SIZE": "2"})
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	var counts func() Counts
	ctx := context.Background()
	tp, shutdown, err := NewProviderFromEnv(ctx, "n1", WithMeterProvider(mp), WithCounts(&counts))
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer("test")
	for range 10 {
		_, s := tr.Start(ctx, "s")
		s.End()
	}
	<-held // the first batch (2 spans, a full batch of a queue of 2) is at the collector
	if got := counts(); got != (Counts{Dropped: 8}) {
		t.Errorf("with the collector holding the first batch: %+v, want 8 dropped", got)
	}
	close(hold)
	deadline := time.Now().Add(10 * time.Second)
	for counts().Exported != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling the outcome: the exporter's goroutine reports it
	}
	for range 2 {
		_, s := tr.Start(ctx, "refused")
		s.End()
	}
	_ = shutdown(ctx) // flushes the refused batch
	if got := counts(); got != (Counts{Exported: 2, Failed: 2, Dropped: 8}) {
		t.Errorf("after the flush: %+v, want 2 exported, 2 failed, 8 dropped", got)
	}
	if spans, _, _ := r.spans(); len(spans) != 2 {
		t.Errorf("the collector took %d spans, want 2", len(spans))
	}
}
