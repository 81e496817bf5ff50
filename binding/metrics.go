package binding

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/internal/histogram"
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
		metric.WithDescription("Relayed Requests (and binds) the binding failed on its own, by reason: relay_timeout, node_failed, bind_timeout (a bind whose context ended first; a tombstone follows)."))
	if err != nil {
		return err
	}
	refused, err := m.Int64ObservableCounter("meshnode.binding.binds_refused", metric.WithUnit("{bind}"),
		metric.WithDescription("Binds refused because the session was at MaxBindingsPerSession."))
	if err != nil {
		return err
	}
	relocations, err := m.Int64ObservableCounter("meshnode.binding.relocations", metric.WithUnit("{event}"),
		metric.WithDescription("Relocation barriers of this node's sessions, by event: sealed, committed, aborted, seal_timeout, session_gone (a seal answered at once: the session or its binding was gone)."))
	if err != nil {
		return err
	}
	relocRejected, err := m.Int64ObservableCounter("meshnode.binding.relocation.rejected", metric.WithUnit("{record}"),
		metric.WithDescription("Relocation records (42, 43, 44) ignored, by reason: late_route_update, protocol_error, stale_seal."))
	if err != nil {
		return err
	}
	held, err := m.Int64ObservableGauge("meshnode.binding.relocation.held", metric.WithUnit("{packet}"),
		metric.WithDescription("Relays held by relocation seals of this node's sessions."))
	if err != nil {
		return err
	}
	if b.relayLatency, err = m.Float64Histogram("meshnode.binding.relayed_request.duration", metric.WithUnit("s"),
		metric.WithDescription("Latency of this node's sessions' relayed Requests that got their Actor's reply: from the relay to the reply's arrival here."),
		metric.WithExplicitBucketBoundaries(histogram.Seconds...)); err != nil {
		return err
	}
	event := func(v string) metric.ObserveOption { return metric.WithAttributes(attribute.String("event", v)) }
	reason := func(v string) metric.ObserveOption { return metric.WithAttributes(attribute.String("reason", v)) }
	sealed, committed, aborted, sealTimeout := event("sealed"), event("committed"), event("aborted"), event("seal_timeout")
	sessionGone := event("session_gone")
	late, protoErr, staleSeal := reason("late_route_update"), reason("protocol_error"), reason("stale_seal")
	timeout := metric.WithAttributes(attribute.String("reason", "relay_timeout"))
	nodeFailed := metric.WithAttributes(attribute.String("reason", "node_failed"))
	bindTimeout := metric.WithAttributes(attribute.String("reason", "bind_timeout"))
	b.metricsReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := b.Stats()
		o.ObserveInt64(bindings, int64(st.Bindings))
		o.ObserveInt64(waiting, int64(st.RelayedRequests))
		o.ObserveInt64(unconsumed, int64(st.Relayed))
		o.ObserveInt64(failed, st.RelayTimeouts, timeout)
		o.ObserveInt64(failed, st.PeerFailures, nodeFailed)
		o.ObserveInt64(failed, st.BindTimeouts, bindTimeout)
		o.ObserveInt64(refused, b.drops.bindsRefused.Load())
		o.ObserveInt64(relocations, st.RelocationSeals, sealed)
		o.ObserveInt64(relocations, st.RelocationCommits, committed)
		o.ObserveInt64(relocations, st.RelocationAborts, aborted)
		o.ObserveInt64(relocations, st.SealTimeouts, sealTimeout)
		o.ObserveInt64(relocations, st.SealsForGoneSessions, sessionGone)
		o.ObserveInt64(relocRejected, st.LateRouteUpdates, late)
		o.ObserveInt64(relocRejected, st.RelocationProtocolErrors, protoErr)
		o.ObserveInt64(relocRejected, st.StaleSeals, staleSeal)
		o.ObserveInt64(held, int64(st.Held))
		return nil
	}, bindings, waiting, unconsumed, failed, refused, relocations, relocRejected, held)
	return err
}
