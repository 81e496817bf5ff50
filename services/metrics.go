package services

import (
	"context"
	"log/slog"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/internal/ratelog"
)

// callMetrics counts the calls a host serves and their failures, by code. Codes are a
// bounded set: application codes count as "application".
type callMetrics struct {
	calls    metric.Int64Counter
	failed   metric.Int64Counter
	inflight atomic.Int64 // calls admitted and not answered (bounded per client by MaxInflightPerClient)
	// subscriptions held by clients (bounded per client by MaxSubscriptionsPerClient)
	subscriptions atomic.Int64
	drops         metric.Int64Counter
	dropCount     atomic.Int64
	// bounds a peer can reach that are handled without an error: counted here
	folded, eventsDropped, restarted, skipped metric.Int64Counter
	log                                       *slog.Logger
	rl                                        ratelog.Limiter
	// role is the host attribute; okCode and roleOnly the option lists of a call
	// answered with a result and of a drop, built once (a variadic list built per call
	// escapes to the heap).
	role             attribute.KeyValue
	okCode, roleOnly []metric.AddOption
}

// knownCodes are the service layer's own codes (metric attribute values as they are).
var knownCodes = map[string]bool{
	CodeCancelled: true, CodeDisconnected: true, CodeUnavailable: true, CodeSetupPhase: true,
	CodeUnknownService: true, CodeUnknownMember: true, CodeInvalidArguments: true, CodeInvalidResult: true,
	CodeStaleGeneration: true, CodeNotAttached: true, CodeNotAuthorized: true, CodeUnknownSession: true,
	CodeSessionUnavailable: true, CodeNotImplemented: true, CodeDuplicateRequest: true, CodeInternal: true,
	CodeSessionExists: true, CodeFlowControl: true, CodeStaleReference: true,
}

// badInput are the codes of a call the caller got wrong: logged once per interval.
var badInput = map[string]bool{
	CodeUnknownService: true, CodeUnknownMember: true, CodeInvalidArguments: true, CodeDuplicateRequest: true,
	CodeNotAttached: true, CodeStaleGeneration: true, CodeNotAuthorized: true, CodeInvalidResult: true,
	CodeUnknownSession: true, CodeSessionExists: true, CodeStaleReference: true,
}

// newCallMetrics makes the instruments of the hosts of one role ("server", or "worker"
// for every session worker of a node, which share one set): each series carries the
// role as its host attribute.
func newCallMetrics(mp metric.MeterProvider, role string, log *slog.Logger) *callMetrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter("github.com/meshnode/meshnode/services")
	cm := &callMetrics{log: log, role: attribute.String("host", role)}
	cm.okCode = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(cm.role, attribute.String("code", "ok")))}
	cm.roleOnly = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(cm.role))}
	observeRole := metric.WithAttributeSet(attribute.NewSet(cm.role))
	cm.calls, _ = m.Int64Counter("meshnode.services.calls", metric.WithDescription("service calls served, by host (server or worker) and outcome code (ok for a result)"))
	cm.failed, _ = m.Int64Counter("meshnode.services.calls.failed", metric.WithDescription("service calls answered with an error, by host and code"))
	cm.drops, _ = m.Int64Counter("meshnode.services.subscriptions.dropped", metric.WithDescription("subscriptions dropped because their subscriber could not keep up (flow_control), by host"))
	cm.folded, _ = m.Int64Counter("meshnode.services.deliveries.folded", metric.WithDescription("a state's listener calls not queued because its replica's queue of listener calls was full (1,024): the listener gets the latest value once it drains, by host"))
	cm.eventsDropped, _ = m.Int64Counter("meshnode.services.deliveries.dropped", metric.WithDescription("events a listener missed because its replica's queue of listener calls was full (1,024), by host"))
	cm.restarted, _ = m.Int64Counter("meshnode.services.hydrations.restarted", metric.WithDescription("subscriptions that started hydrating again from a fresh snapshot because more frames came before their snapshot than a hydrating subscription buffers (4,096), by host"))
	cm.skipped, _ = m.Int64Counter("meshnode.services.observations.skipped", metric.WithDescription("instance directory changes an Observe skipped because its queue of changes was full (1,024): it went straight to the latest, by host"))
	_, _ = m.Int64ObservableGauge("meshnode.services.subscriptions", metric.WithDescription("state, events and directory subscriptions clients hold, by host"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(cm.subscriptions.Load(), observeRole)
			return nil
		}))
	_, _ = m.Int64ObservableGauge("meshnode.services.calls.inflight", metric.WithDescription("service calls admitted and not yet answered, by host"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(cm.inflight.Load(), observeRole)
			return nil
		}))
	return cm
}

// dropped counts a subscription dropped for flow control, and logs it once per interval.
func (m *callMetrics) dropped(a subAddr, client string) {
	m.countDrop()
	m.rl.Log(m.log, slog.LevelWarn, "subscriber_dropped", "services: a subscriber fell behind and its subscription was dropped",
		"member", a.String(), "client", client)
}

// countDrop counts a subscription dropped for flow control (the caller logs it).
func (m *callMetrics) countDrop() {
	m.dropCount.Add(1)
	m.drops.Add(context.Background(), 1, m.roleOnly...)
}

// count adds n to a counter of the bounds (the per-delivery path: no allocation).
func (m *callMetrics) count(c metric.Int64Counter, n int64) {
	c.Add(context.Background(), n, m.roleOnly...)
}

// served records the outcome of one call of service.member from client.
func (m *callMetrics) served(service, member, client string, err *Error) {
	if err == nil {
		m.calls.Add(context.Background(), 1, m.okCode...) // the per-call path: no allocation
		return
	}
	code := err.Code
	if !knownCodes[code] {
		code = "application"
	}
	attrs := metric.WithAttributes(m.role, attribute.String("code", code))
	m.calls.Add(context.Background(), 1, attrs)
	m.failed.Add(context.Background(), 1, attrs)
	if badInput[err.Code] {
		m.rl.Log(m.log, slog.LevelInfo, "bad_call:"+err.Code, "services: a call was refused",
			"code", err.Code, "service", service, "member", member, "client", client, "message", err.Message)
	}
}
