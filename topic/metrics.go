package topic

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerMetrics exports Stats as observable instruments, read at collection time:
// nothing on the publish or delivery path.
func (h *Hub) registerMetrics(mp metric.MeterProvider) error {
	m := mp.Meter("github.com/meshnode/meshnode/topic")
	publishes, err := m.Int64ObservableCounter("meshnode.topic.publishes", metric.WithUnit("{publish}"),
		metric.WithDescription("Publishes made on this node, by outcome: heard (some session of the fleet subscribed), unheard."))
	if err != nil {
		return err
	}
	records, err := m.Int64ObservableCounter("meshnode.topic.publish_records", metric.WithUnit("{record}"),
		metric.WithDescription("topicPublish records sent to other nodes: one per node with subscribers, per publish."))
	if err != nil {
		return err
	}
	deliveries, err := m.Int64ObservableCounter("meshnode.topic.deliveries", metric.WithUnit("{message}"),
		metric.WithDescription("Messages written to this node's subscribed sessions."))
	if err != nil {
		return err
	}
	dropped, err := m.Int64ObservableCounter("meshnode.topic.subscribers_dropped", metric.WithUnit("{session}"),
		metric.WithDescription("Subscribers dropped from their topics because their socket fell behind."))
	if err != nil {
		return err
	}
	problems, err := m.Int64ObservableCounter("meshnode.topic.problems", metric.WithUnit("{event}"),
		metric.WithDescription("What went wrong, by kind: send_failure (a record toward a node could not go), refused (a subscribe or publish refused), stale_interest, gap (messages that never arrived), held (messages held for an earlier one), duplicate."))
	if err != nil {
		return err
	}
	topics, err := m.Int64ObservableGauge("meshnode.topic.topics", metric.WithUnit("{topic}"),
		metric.WithDescription("Topics this node's sessions subscribe to."))
	if err != nil {
		return err
	}
	subs, err := m.Int64ObservableGauge("meshnode.topic.subscriptions", metric.WithUnit("{subscription}"),
		metric.WithDescription("Subscriptions this node's sessions hold."))
	if err != nil {
		return err
	}
	locals, err := m.Int64ObservableGauge("meshnode.topic.local_subscriptions", metric.WithUnit("{subscription}"),
		metric.WithDescription("In-process subscriptions this node holds (the plugin services' fan-out to presentations)."))
	if err != nil {
		return err
	}
	kind := func(v string) metric.ObserveOption { return metric.WithAttributes(attribute.String("kind", v)) }
	outcome := func(v string) metric.ObserveOption { return metric.WithAttributes(attribute.String("outcome", v)) }
	heard, unheard := outcome("heard"), outcome("unheard")
	sendFailure, refused, stale, gap, held, dup := kind("send_failure"), kind("refused"), kind("stale_interest"), kind("gap"), kind("held"), kind("duplicate")
	h.metricsReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := h.Stats()
		o.ObserveInt64(publishes, st.Publishes-st.Unheard, heard)
		o.ObserveInt64(publishes, st.Unheard, unheard)
		o.ObserveInt64(records, st.PublishRecords)
		o.ObserveInt64(deliveries, st.Deliveries)
		o.ObserveInt64(dropped, st.DroppedSlow)
		o.ObserveInt64(problems, st.SendFailures, sendFailure)
		o.ObserveInt64(problems, st.Refused, refused)
		o.ObserveInt64(problems, st.StaleInterest, stale)
		o.ObserveInt64(problems, st.Gaps, gap)
		o.ObserveInt64(problems, st.Held, held)
		o.ObserveInt64(problems, st.Duplicates, dup)
		o.ObserveInt64(topics, int64(st.Topics))
		o.ObserveInt64(subs, int64(st.Subscriptions))
		o.ObserveInt64(locals, int64(st.LocalSubscriptions))
		return nil
	}, publishes, records, deliveries, dropped, problems, topics, subs, locals)
	return err
}
