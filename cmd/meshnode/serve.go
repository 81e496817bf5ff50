package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/meshnode/meshnode/cmd/meshnode/sampleapp"
	"github.com/meshnode/meshnode/session"
)

// serve runs the node until ctx ends, then drains.
func serve(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))

	registry := prometheus.NewRegistry()
	registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return fmt.Errorf("metrics exporter: %w", err)
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = meters.Shutdown(context.Background()) }()

	host := session.NewHost(session.HostOptions{MeterProvider: meters, Logger: log})
	node := host.AddStreamNode(cfg.nodeName).MaxMessageSize(cfg.maxMessageSize).IdleTimeout(cfg.idleTimeout).Session(sampleapp.Type())
	for _, s := range cfg.streams {
		node.Bind(s)
	}
	if cfg.tlsCert != "" || cfg.tlsKey != "" {
		node.TLSServer(cfg.tlsCert, cfg.tlsKey)
	}
	if cfg.tlsClientCA != "" {
		node.RequireClientCertificate(cfg.tlsClientCA)
	}

	var ready atomic.Bool
	var admin *http.Server
	var adminDone chan error
	if cfg.admin != "" {
		ln, err := net.Listen("tcp", cfg.admin)
		if err != nil {
			return fmt.Errorf("flag --admin: %w", err)
		}
		admin = &http.Server{Handler: adminMux(registry, &ready), ReadHeaderTimeout: 5 * time.Second}
		adminDone = make(chan error, 1)
		go func() { adminDone <- admin.Serve(ln) }()
		fmt.Fprintf(stdout, "meshnode: admin http://%s (/metrics /healthz /readyz)\n", ln.Addr())
	}
	stopAdmin := func() {
		if admin == nil {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = admin.Shutdown(sctx)
		if err := <-adminDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("admin server stopped", "err", err)
		}
	}

	if err := host.Start(ctx); err != nil {
		stopAdmin()
		return err
	}
	for _, ep := range host.Node(cfg.nodeName).Endpoints() {
		fmt.Fprintf(stdout, "meshnode: stream %s\n", ep)
	}
	fmt.Fprintln(stdout, "meshnode: ready (SIGINT or SIGTERM drains and stops)")
	ready.Store(true)

	<-ctx.Done()
	ready.Store(false)
	log.Info("draining sessions", "timeout", cfg.drainTimeout)
	dctx, cancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
	defer cancel()
	err = host.Shutdown(dctx)
	stopAdmin()
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(stdout, "meshnode: stopped")
	return nil
}

func adminMux(registry *prometheus.Registry, ready *atomic.Bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}
