package main

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/meshnode/meshnode/internal/buildinfo"
	"github.com/meshnode/meshnode/mesh"
)

// The binary's /metrics: the OpenTelemetry instruments of every package through the
// Prometheus exporter, the Go runtime's and the process's collectors, and three
// families of its own: target_info (which node this is), meshnode_build_info (what it
// runs) and the dashboard's series reader (dashseries.go) beside the exporter.
//
// The exporter is told to leave out the otel_scope_* labels (they named the Go package
// of each instrument on every series) and its own target_info (its resource would
// not know the node id, which is known once the mesh has started).

// metrics is the binary's metric plumbing.
type metrics struct {
	registry *prometheus.Registry
	meters   *sdkmetric.MeterProvider
	// reader collects the same instruments for the dashboard's series (dashseries.go).
	reader *sdkmetric.ManualReader
}

func newMetrics(build buildinfo.Info) (*metrics, error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics exporter: %w", err)
	}
	registry.MustRegister(buildInfoCollector(build))
	reader := sdkmetric.NewManualReader()
	return &metrics{registry: registry, reader: reader,
		meters: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithReader(reader))}, nil
}

// nodeStarted adds target_info, which names the node: its id (RID) and generation.
func (m *metrics) nodeStarted(id mesh.NodeID) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "target_info",
		Help: "Target metadata: the service and the node this process is (OpenTelemetry resource attributes).",
		ConstLabels: prometheus.Labels{"service_name": "meshnode", "service_instance_id": id.RID, "node_id": id.RID,
			"node_generation": strconv.FormatUint(id.Generation, 10)},
	}, func() float64 { return 1 }))
}

// buildInfoCollector is meshnode_build_info: 1, with the build and the wire versions
// as labels.
func buildInfoCollector(b buildinfo.Info) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshnode_build_info",
		Help: "Always 1; the labels say what this process runs: its module version and VCS revision, the Go toolchain, and the versions of the wire formats it speaks.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.ShortRevision(), "goversion": b.GoVersion,
			"stream_wire":    strconv.Itoa(buildinfo.Stream),
			"service_wire":   strconv.Itoa(buildinfo.ServiceWire),
			"node_meta":      strconv.Itoa(buildinfo.NodeMeta),
			"state_snapshot": strconv.Itoa(buildinfo.StateSnapshot)},
	}, func() float64 { return 1 })
}
