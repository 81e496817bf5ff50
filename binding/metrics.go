package binding

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerMetrics exports Stats and the drop counters as observable instruments (read
// at collection time: nothing on the record path).
func (b *Binder) registerMetrics(mp metric.MeterProvider) error {
	m := mp.Meter("github.com/meshnode/meshnode/binding")
	bindings, err := m.Int64ObservableGauge("meshnode.binding.bindings", metric.WithUnit("{binding}"),
		metric.WithDescription("Current bindings of this node's sessions."))
	if err != nil {
		return err
	}
	waiting, err := m.Int64ObservableGauge("meshnode.binding.relayed_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Relayed Requests of this node's sessions waiting for their replies."))
	if err != nil {
		return err
	}
	unconsumed, err := m.Int64ObservableGauge("meshnode.binding.relay_window", metric.WithUnit("{packet}"),
		metric.WithDescription("Packets this node's sessions relayed that their Actors have not consumed yet."))
	if err != nil {
		return err
	}
	failed, err := m.Int64ObservableCounter("meshnode.binding.relayed_requests.failed", metric.WithUnit("{request}"),
		metric.WithDescription("Relayed Requests (and binds) the binding failed on its own, by reason: relay_timeout, node_failed."))
	if err != nil {
		return err
	}
	refused, err := m.Int64ObservableCounter("meshnode.binding.binds_refused", metric.WithUnit("{bind}"),
		metric.WithDescription("Binds refused because the session was at MaxBindingsPerSession."))
	if err != nil {
		return err
	}
	timeout := metric.WithAttributes(attribute.String("reason", "relay_timeout"))
	nodeFailed := metric.WithAttributes(attribute.String("reason", "node_failed"))
	b.metricsReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := b.Stats()
		o.ObserveInt64(bindings, int64(st.Bindings))
		o.ObserveInt64(waiting, int64(st.RelayedRequests))
		o.ObserveInt64(unconsumed, int64(st.Relayed))
		o.ObserveInt64(failed, st.RelayTimeouts, timeout)
		o.ObserveInt64(failed, st.PeerFailures, nodeFailed)
		o.ObserveInt64(refused, b.drops.bindsRefused.Load())
		return nil
	}, bindings, waiting, unconsumed, failed, refused)
	return err
}
