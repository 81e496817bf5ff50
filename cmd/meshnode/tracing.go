package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/tracing"
)

// startTracing builds the node's tracer provider from the OTEL_* environment
// (tracing.NewProviderFromEnv; off unless configured, docs/tracing.md) and returns it
// with the function that flushes and stops it, bounded so a dead collector cannot
// hold the stop.
func startTracing(ctx context.Context, cfg serveConfig) (trace.TracerProvider, func(), error) {
	tp, shutdown, err := tracing.NewProviderFromEnv(ctx, traceNodeRID(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}, nil
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
