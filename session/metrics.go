package session

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// meterName is the instrumentation scope of the zlink instruments (digest §10).
const meterName = "zlink.framework"

// metrics holds the STREAM instruments of digest §10 and meshnode's own. Per-packet
// figures are plain atomics read by observable instruments, so the packet path pays no
// instrument call; labels are bounded sets only (transport, close_reason, state,
// direction, reason), never session ids or packet names.
type metrics struct {
	active   metric.Int64UpDownCounter
	openedC  metric.Int64Counter
	closedC  metric.Int64Counter
	tooLarge metric.Int64Counter
	hsFail   metric.Int64Counter
	sockErr  metric.Int64Counter
	protoErr metric.Int64Counter
	droppedC metric.Int64Counter
	frameTO  metric.Int64Counter
	slowC    metric.Int64Counter
	refusedC metric.Int64Counter

	packetsIn, packetsOut, bytesIn, bytesOut atomic.Int64
	stalledPermits                           atomic.Int64 // permits given back by stalled sessions
	pausedNow                                [pauseReasons]atomic.Int64
	pausedTotal                              [pauseReasons]atomic.Int64

	transportAttrs sync.Map // transport -> metric.MeasurementOption
	regs           []metric.Registration
}

func newMetrics(mp metric.MeterProvider, h *Host) (*metrics, error) {
	m := &metrics{}
	zm := mp.Meter(meterName)
	mm := mp.Meter("github.com/meshnode/meshnode/session")
	var err error
	if m.active, err = zm.Int64UpDownCounter("zlink.stream.connections.active", metric.WithUnit("{connection}"),
		metric.WithDescription("Open STREAM connections.")); err != nil {
		return nil, err
	}
	if m.openedC, err = zm.Int64Counter("zlink.stream.connections.opened", metric.WithUnit("{connection}"),
		metric.WithDescription("STREAM connections accepted.")); err != nil {
		return nil, err
	}
	if m.closedC, err = zm.Int64Counter("zlink.stream.connections.closed", metric.WithUnit("{connection}"),
		metric.WithDescription("STREAM connections closed, by close reason.")); err != nil {
		return nil, err
	}
	if m.tooLarge, err = mm.Int64Counter("meshnode.stream.emsgsize", metric.WithUnit("{message}"),
		metric.WithDescription("Inbound messages over MaxMessageSize (EMSGSIZE); each closed its connection.")); err != nil {
		return nil, err
	}
	if m.hsFail, err = mm.Int64Counter("meshnode.stream.handshake_failures", metric.WithUnit("{failure}"),
		metric.WithDescription("TLS or WebSocket handshakes that failed before a session existed.")); err != nil {
		return nil, err
	}
	if m.sockErr, err = mm.Int64Counter("meshnode.stream.socket_errors", metric.WithUnit("{error}"),
		metric.WithDescription("Listener-level socket errors attributable to no session.")); err != nil {
		return nil, err
	}
	if m.protoErr, err = mm.Int64Counter("meshnode.stream.protocol_errors", metric.WithUnit("{error}"),
		metric.WithDescription("Malformed inbound frames; each closed its connection with ProtocolError.")); err != nil {
		return nil, err
	}
	if m.droppedC, err = mm.Int64Counter("meshnode.stream.packets.dropped", metric.WithUnit("{packet}"),
		metric.WithDescription("Inbound frames dropped without closing the connection, by reason.")); err != nil {
		return nil, err
	}
	if m.frameTO, err = mm.Int64Counter("meshnode.stream.frame_timeouts", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections closed because a frame begun was not completed within the frame timeout.")); err != nil {
		return nil, err
	}
	if m.slowC, err = mm.Int64Counter("meshnode.stream.slow_consumers", metric.WithUnit("{connection}"),
		metric.WithDescription("Sessions closed because their client did not read and their outbound queue reached its hard limit.")); err != nil {
		return nil, err
	}
	if m.refusedC, err = mm.Int64Counter("meshnode.stream.connections.refused", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections refused at accept because the host's connection limit was reached.")); err != nil {
		return nil, err
	}
	pausedNow, err := mm.Int64ObservableGauge("meshnode.stream.ingress.paused_sessions", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions whose reader does not pull now because the session is at an ingress bound, by reason."))
	if err != nil {
		return nil, err
	}
	pausedTotal, err := mm.Int64ObservableCounter("meshnode.stream.ingress.pauses", metric.WithUnit("{pause}"),
		metric.WithDescription("Times a session's reader stopped pulling at an ingress bound, by reason."))
	if err != nil {
		return nil, err
	}
	stalled, err := mm.Int64ObservableCounter("meshnode.stream.ingress.stalled_permits", metric.WithUnit("{job}"),
		metric.WithDescription("Host permits given back early by sessions whose callback did not move for 10 ms."))
	if err != nil {
		return nil, err
	}
	packets, err := mm.Int64ObservableCounter("meshnode.stream.packets", metric.WithUnit("{packet}"),
		metric.WithDescription("STREAM frames by direction."))
	if err != nil {
		return nil, err
	}
	bytes, err := mm.Int64ObservableCounter("meshnode.stream.bytes", metric.WithUnit("By"),
		metric.WithDescription("STREAM frame bytes (prefix included) by direction."))
	if err != nil {
		return nil, err
	}
	// The job queue's instruments are the zlink specification's (digest §10), by the
	// names it gives, with one departure a Prometheus reader needs: each series is a
	// gauge or a counter of its own. The specification's high-water mark
	// (jobs{state=peak}) and cumulative pause time (pause_duration{state=cumulative})
	// were series of gauges whose other states are levels; here they are jobs.peak (a
	// gauge that only rises) and paused (a counter).
	limit, err := zm.Int64ObservableGauge("zlink.host.application_job_queue.limit", metric.WithUnit("{job}"),
		metric.WithDescription("Permits of the host-wide application job queue (MaxQueuedApplicationJobs)."))
	if err != nil {
		return nil, err
	}
	jobs, err := zm.Int64ObservableGauge("zlink.host.application_job_queue.jobs", metric.WithUnit("{job}"),
		metric.WithDescription("Permits of the job queue now, by state: reserved (taken, packet not yet queued), queued (in a session's mailbox), in_use (both)."))
	if err != nil {
		return nil, err
	}
	peak, err := zm.Int64ObservableGauge("zlink.host.application_job_queue.jobs.peak", metric.WithUnit("{job}"),
		metric.WithDescription("The most permits of the job queue ever in use at once since the host started (a high-water mark)."))
	if err != nil {
		return nil, err
	}
	waiters, err := zm.Int64ObservableGauge("zlink.host.application_job_queue.capacity_waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Session readers waiting for a permit now."))
	if err != nil {
		return nil, err
	}
	waits, err := zm.Int64ObservableCounter("zlink.host.application_job_queue.capacity_waits", metric.WithUnit("{wait}"),
		metric.WithDescription("Permit acquisitions that had to wait."))
	if err != nil {
		return nil, err
	}
	waitDur, err := zm.Float64ObservableCounter("zlink.host.application_job_queue.capacity_wait_duration", metric.WithUnit("s"),
		metric.WithDescription("Time session readers spent waiting for a permit, summed."))
	if err != nil {
		return nil, err
	}
	pstate, err := zm.Int64ObservableGauge("zlink.host.application_job_queue.pressure_state", metric.WithUnit("{state}"),
		metric.WithDescription("1 for the job queue's pressure state now (running, or paused above 80% of its permits in use until it is back at 60%), 0 for the other."))
	if err != nil {
		return nil, err
	}
	ptrans, err := zm.Int64ObservableCounter("zlink.host.application_job_queue.pressure_transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Changes of the job queue's pressure state, by the state entered."))
	if err != nil {
		return nil, err
	}
	pdur, err := zm.Float64ObservableGauge("zlink.host.application_job_queue.pause_duration", metric.WithUnit("s"),
		metric.WithDescription("How long the job queue's current pause has lasted; 0 while it runs."))
	if err != nil {
		return nil, err
	}
	pausedTime, err := zm.Float64ObservableCounter("zlink.host.application_job_queue.paused", metric.WithUnit("s"),
		metric.WithDescription("Time the job queue spent paused since the host started, the current pause included."))
	if err != nil {
		return nil, err
	}
	// STREAM has no socket flow state to configure (digest §9.4), so this stays 0; it
	// is exported so that dashboards built on the spec's instrument set work.
	flowFail, err := zm.Int64ObservableCounter("zlink.host.application_job_queue.flow_state_config_failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Socket flow-state changes that failed; always 0 (STREAM has none to make)."))
	if err != nil {
		return nil, err
	}
	in := metric.WithAttributes(attribute.String("direction", "in"))
	out := metric.WithAttributes(attribute.String("direction", "out"))
	state := func(s string) metric.MeasurementOption { return metric.WithAttributes(attribute.String("state", s)) }
	reg, err := mm.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(packets, m.packetsIn.Load(), in)
		o.ObserveInt64(packets, m.packetsOut.Load(), out)
		o.ObserveInt64(bytes, m.bytesIn.Load(), in)
		o.ObserveInt64(bytes, m.bytesOut.Load(), out)
		for r := range pauseReasons {
			reason := metric.WithAttributes(attribute.String("reason", pauseReasonLabels[r]))
			o.ObserveInt64(pausedNow, m.pausedNow[r].Load(), reason)
			o.ObserveInt64(pausedTotal, m.pausedTotal[r].Load(), reason)
		}
		o.ObserveInt64(stalled, m.stalledPermits.Load())
		return nil
	}, packets, bytes, pausedNow, pausedTotal, stalled)
	if err != nil {
		return nil, err
	}
	m.regs = append(m.regs, reg)
	reg, err = zm.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := h.permits.stats()
		s.queued = h.queuedPermits()
		o.ObserveInt64(limit, s.limit)
		// inUse and queued are read at different moments: never report less than none.
		o.ObserveInt64(jobs, max(0, s.inUse-s.queued), state("reserved"))
		o.ObserveInt64(jobs, s.queued, state("queued"))
		o.ObserveInt64(jobs, s.inUse, state("in_use"))
		o.ObserveInt64(peak, s.peak)
		o.ObserveInt64(waiters, s.waiters)
		o.ObserveInt64(waits, s.waits)
		o.ObserveFloat64(waitDur, s.waitSeconds)
		paused := int64(0)
		if s.paused {
			paused = 1
		}
		o.ObserveInt64(pstate, 1-paused, state("running"))
		o.ObserveInt64(pstate, paused, state("paused"))
		o.ObserveInt64(ptrans, s.toPaused, state("paused"))
		o.ObserveInt64(ptrans, s.toRunning, state("running"))
		o.ObserveFloat64(pdur, s.pauseCurrent.Seconds())
		o.ObserveFloat64(pausedTime, s.pauseTotal.Seconds())
		o.ObserveInt64(flowFail, 0)
		return nil
	}, flowFail, limit, jobs, peak, waiters, waits, waitDur, pstate, ptrans, pdur, pausedTime)
	if err != nil {
		return nil, err
	}
	m.regs = append(m.regs, reg)
	return m, nil
}

func (m *metrics) unregister() {
	for _, r := range m.regs {
		_ = r.Unregister()
	}
}

func (m *metrics) transport(t string) metric.MeasurementOption {
	if v, ok := m.transportAttrs.Load(t); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := m.transportAttrs.LoadOrStore(t, metric.WithAttributes(attribute.String("transport", t)))
	return v.(metric.MeasurementOption)
}

func (m *metrics) opened(t string) {
	m.openedC.Add(context.Background(), 1, m.transport(t))
	m.active.Add(context.Background(), 1, m.transport(t))
}

func (m *metrics) closed(t string, r wire.CloseReason) {
	m.active.Add(context.Background(), -1, m.transport(t))
	m.closedC.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("transport", t), attribute.String("close_reason", r.MetricLabel())))
}

func (m *metrics) framesIn(n, bytes int) {
	m.packetsIn.Add(int64(n))
	m.bytesIn.Add(int64(bytes))
}
func (m *metrics) packetOut(n int) { m.packetsOut.Add(1); m.bytesOut.Add(int64(n)) }

func (m *metrics) messageTooLarge(t string) { m.tooLarge.Add(context.Background(), 1, m.transport(t)) }
func (m *metrics) handshakeFailure(t string) {
	m.hsFail.Add(context.Background(), 1, m.transport(t))
}
func (m *metrics) socketError(t string)   { m.sockErr.Add(context.Background(), 1, m.transport(t)) }
func (m *metrics) protocolError(t string) { m.protoErr.Add(context.Background(), 1, m.transport(t)) }
func (m *metrics) frameTimeout(t string)  { m.frameTO.Add(context.Background(), 1, m.transport(t)) }
func (m *metrics) slowConsumer(t string)  { m.slowC.Add(context.Background(), 1, m.transport(t)) }
func (m *metrics) refused(t string)       { m.refusedC.Add(context.Background(), 1, m.transport(t)) }

// paused counts a reader stopping (+1) or resuming (-1) at an ingress bound.
func (m *metrics) paused(reason int, delta int64) {
	m.pausedNow[reason].Add(delta)
	if delta > 0 {
		m.pausedTotal[reason].Add(1)
	}
}

func (m *metrics) dropped(t, reason string) {
	m.droppedC.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("transport", t), attribute.String("reason", reason)))
}

// errorPayload encodes the JSON error payload of digest §2.11.
func (h *Host) errorPayload(code, message string) []byte {
	return codec.EncodeErrorPayload(code, message)
}
