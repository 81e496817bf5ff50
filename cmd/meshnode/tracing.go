package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/tracing"
)

// startTracing builds the node's tracer provider from the OTEL_* environment
// (tracing.NewProviderFromEnv; off unless configured, docs/tracing.md), says where
// traces go (or that they are off) on stdout and in the log, routes OpenTelemetry's
// errors (a collector that refuses or does not answer) into the node's log, at most
// once a minute per message, and returns the provider with the function that flushes
// and stops it, bounded so a dead collector cannot hold the stop.
func startTracing(ctx context.Context, cfg serveConfig, log *slog.Logger, meters metric.MeterProvider, stdout io.Writer) (trace.TracerProvider, func(), error) {
	s, err := tracing.SettingsFromEnv()
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	otel.SetErrorHandler(otelErrors(log))
	tp, shutdown, err := tracing.NewProviderFromEnv(ctx, traceNodeRID(cfg), tracing.WithMeterProvider(meters))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	fmt.Fprintf(stdout, "meshnode: traces: %s\n", s)
	log.Info("traces", "export", s.String())
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}, nil
}

// otelErrors is the OpenTelemetry error handler of the binary: each error, as a
// warning of the node's log, one line per distinct message per minute (with the
// count suppressed since), not the SDK's own line on stderr for every failed batch.
func otelErrors(log *slog.Logger) otel.ErrorHandler {
	var limit ratelog.Limiter
	return otel.ErrorHandlerFunc(func(err error) {
		limit.Log(log, slog.LevelWarn, err.Error(), "opentelemetry error", "err", err)
	})
}

// traceNodeRID is the node's RID as the resource names it: --node-id, else the
// advertised mesh address when its port is fixed (the node's default RID).
func traceNodeRID(cfg serveConfig) string {
	if cfg.nodeID != "" {
		return cfg.nodeID
	}
	host, port, err := splitHostPortFlag("flag --mesh", cfg.meshAddr)
	if err != nil || port == 0 {
		return ""
	}
	if cfg.advertiseHost != "" {
		host = cfg.advertiseHost
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
