// Package tracing builds meshnode's trace pipeline from the standard OpenTelemetry
// environment variables: an SDK tracer provider that exports over OTLP (gRPC or
// HTTP/protobuf) with a batch processor, or nothing at all. Tracing is off unless the
// environment asks for it, and off costs the packet path a nil check (docs/tracing.md).
//
// The variables read here decide whether and how to export:
//
//	OTEL_SDK_DISABLED=true                     off, whatever else is set
//	OTEL_TRACES_EXPORTER=none                  off
//	OTEL_TRACES_EXPORTER=otlp                  on
//	OTEL_EXPORTER_OTLP_ENDPOINT                on when set (and OTEL_TRACES_EXPORTER is unset)
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT         on when set (likewise)
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL         grpc or http/protobuf (default: the next one)
//	OTEL_EXPORTER_OTLP_PROTOCOL                grpc or http/protobuf (default http/protobuf)
//
// The exporters read the endpoint, headers, timeout, compression and TLS variables
// (OTEL_EXPORTER_OTLP_*) themselves; the SDK reads OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the
// resource this package sets (service.name meshnode, the node's RID).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The OTLP protocols.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// ServiceName is the service.name of meshnode's spans unless OTEL_SERVICE_NAME says
// otherwise.
const ServiceName = "meshnode"

// AttrNodeRID is the resource attribute naming the node (its RID).
const AttrNodeRID = "meshnode.node.rid"

// ErrConfig is matched (errors.Is) by every error of a tracing environment that
// cannot be honoured.
var ErrConfig = errors.New("tracing: configuration error")

// Settings is what the environment asks for.
type Settings struct {
	Enabled  bool
	Protocol string // ProtocolGRPC or ProtocolHTTP when Enabled
	// Why names the variable that decided Enabled ("" when nothing asked for traces).
	Why string
	// Endpoint is where the exporter sends spans, as the OTLP exporters resolve it:
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT
	// (with /v1/traces appended for http/protobuf), else the exporter's default.
	Endpoint string
	// Sampler is OTEL_TRACES_SAMPLER (with :OTEL_TRACES_SAMPLER_ARG), else the SDK's
	// default, parentbased_always_on.
	Sampler string
}

// String says where traces go, or that they are off and why, for a start-up log.
func (s Settings) String() string {
	if !s.Enabled {
		if s.Why != "" {
			return "off (" + s.Why + ")"
		}
		return "off (set OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER=otlp to export)"
	}
	return fmt.Sprintf("OTLP %s to %s, sampler %s (%s)", s.Protocol, s.Endpoint, s.Sampler, s.Why)
}

// SettingsFromEnv reads the variables that decide whether and how to export (see the
// package comment). An exporter other than otlp or none, or an unknown protocol, is an
// error: a node asked to export somewhere it cannot should not start silently untraced.
func SettingsFromEnv() (Settings, error) {
	return settings(os.Getenv)
}

func settings(getenv func(string) string) (Settings, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Settings{Why: "OTEL_SDK_DISABLED=true"}, nil
	}
	on, why := false, ""
	if exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp != "" {
		for _, e := range strings.Split(exp, ",") {
			switch e = strings.ToLower(strings.TrimSpace(e)); e {
			case "none":
				return Settings{Why: "OTEL_TRACES_EXPORTER=none"}, nil
			case "otlp":
				on, why = true, "OTEL_TRACES_EXPORTER=otlp"
			default:
				return Settings{}, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", ErrConfig, e)
			}
		}
	} else {
		for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if getenv(v) != "" {
				on, why = true, v+" is set"
				break
			}
		}
	}
	if !on {
		return Settings{}, nil
	}
	proto := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch proto {
	case "", ProtocolHTTP:
		proto = ProtocolHTTP
	case ProtocolGRPC:
	default:
		return Settings{}, fmt.Errorf("%w: OTLP protocol %q: use grpc or http/protobuf", ErrConfig, proto)
	}
	s := Settings{Enabled: true, Protocol: proto, Why: why, Sampler: "parentbased_always_on"}
	switch base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); {
	case strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != "":
		s.Endpoint = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	case base != "" && proto == ProtocolHTTP:
		s.Endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
	case base != "":
		s.Endpoint = base
	case proto == ProtocolHTTP:
		s.Endpoint = "https://localhost:4318/v1/traces" // the exporter's default
	default:
		s.Endpoint = "https://localhost:4317"
	}
	if sm := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")); sm != "" {
		s.Sampler = sm
		if arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); arg != "" {
			s.Sampler += ":" + arg
		}
	}
	return s, nil
}

// Option configures NewProviderFromEnv.
type Option func(*options)

type options struct {
	meters metric.MeterProvider
	counts **spanCounts
}

// WithMeterProvider exports the spans' outcomes (exported, failed, dropped) as the
// counter meshnode.trace.spans on mp.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meters = mp }
}

// WithCounts sets *read to a function that returns the spans' outcomes so far (a
// function of zeros when tracing is off).
func WithCounts(read *func() Counts) Option {
	return func(o *options) {
		var c *spanCounts
		o.counts = &c
		*read = func() Counts {
			if c == nil {
				return Counts{}
			}
			return c.read()
		}
	}
}

// NewProviderFromEnv returns the tracer provider the environment asks for, and the
// function that flushes and stops it (call it when the node has stopped). When tracing
// is off it returns a no-op provider, which meshnode treats as "off": nothing is
// traced and the packet path pays a nil check. nodeRID, when not empty, is set as the
// resource attribute meshnode.node.rid. Export errors go to OpenTelemetry's error
// handler (otel.SetErrorHandler; the binary routes them to its log).
func NewProviderFromEnv(ctx context.Context, nodeRID string, opts ...Option) (trace.TracerProvider, func(context.Context) error, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s, err := SettingsFromEnv()
	if err != nil {
		return nil, nil, err
	}
	if !s.Enabled {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	switch s.Protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP %s exporter: %w", s.Protocol, err)
	}
	res, err := Resource(ctx, nodeRID)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, nil, err
	}
	counts := &spanCounts{bound: int64(queueSize())}
	if o.counts != nil {
		*o.counts = counts
	}
	var reg metric.Registration
	if o.meters != nil {
		if reg, err = registerCounts(o.meters, counts); err != nil {
			_ = exp.Shutdown(ctx)
			return nil, nil, fmt.Errorf("tracing: span counter: %w", err)
		}
	}
	bsp := sdktrace.NewBatchSpanProcessor(countingExporter{SpanExporter: exp, c: counts}, sdktrace.WithMaxQueueSize(int(counts.bound)))
	// The SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG itself (its
	// default: parent-based always-on); no sampler option here, so they are honoured.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(countingProcessor{SpanProcessor: bsp, c: counts}), sdktrace.WithResource(res))
	return tp, func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		if reg != nil {
			_ = reg.Unregister()
		}
		return err
	}, nil
}

// Resource is the resource of a node's spans: service.name meshnode and the node's RID,
// then what OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say (they win).
func Resource(ctx context.Context, nodeRID string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", ServiceName)}
	if nodeRID != "" {
		attrs = append(attrs, attribute.String(AttrNodeRID, nodeRID))
	}
	own := resource.NewSchemaless(attrs...)
	env, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	res, err := resource.Merge(own, env)
	if err != nil {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	return res, nil
}
