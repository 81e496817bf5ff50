package stream_test

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// Digest §10: zlink.stream.connections.opened (counter), .active (updown) with label
// transport, .closed (counter) with transport and close_reason, the close_reason value
// being one of the closed set.
func TestMetrics_ConnectionsOpenedActiveClosed(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Bind("ws://127.0.0.1:0/")
	})
	a, ridA := th.connect(t)
	b, ridB := th.connect(t)
	th.waitMetric(t, mOpened, 2, tr("tcp"))
	th.waitMetric(t, mActive, 2, tr("tcp"))
	roundTrip(t, a, 1)

	// A client close.
	_ = a.Close()
	th.rec.waitFor(t, waitLong, "disconnect a", func(evs []event) bool { return count(evs, evDisconnect, ridA) == 1 })
	th.waitMetric(t, mClosed, 1, tr("tcp"), reason("client_close"))
	th.waitMetric(t, mActive, 1, tr("tcp"))

	// A protocol error.
	write(t, b, testkit.RawFrame([]byte{0x00, 1, 1, 0, 1, 'x'}, nil))
	expectSessionClosing(t, b, wire.CloseProtocolError)
	th.rec.waitFor(t, waitLong, "disconnect b", func(evs []event) bool { return count(evs, evDisconnect, ridB) == 1 })
	th.waitMetric(t, mClosed, 1, tr("tcp"), reason("protocol_error"))
	th.waitMetric(t, mProtoErr, 1, tr("tcp"))
	th.waitMetric(t, mActive, 0, tr("tcp"))

	// A WebSocket connection is counted under its own transport.
	w := dialWS(t, th.endpoint(t, "ws"), nil)
	w.writeMsg(request(1, "echo", `{}`))
	w.expectEcho(1, `{}`)
	th.waitMetric(t, mOpened, 1, tr("ws"))
	th.waitMetric(t, mActive, 1, tr("ws"))

	rm := th.collect(t)
	checkKind := func(name string, monotonic bool) {
		m, ok := findMetric(rm, name)
		if !ok {
			t.Errorf("instrument %s missing", name)
			return
		}
		s, ok := m.Data.(metricdata.Sum[int64])
		if !ok {
			t.Errorf("%s is %T, want an int64 sum", name, m.Data)
			return
		}
		if s.IsMonotonic != monotonic {
			t.Errorf("%s monotonic = %v, want %v", name, s.IsMonotonic, monotonic)
		}
		if m.Unit != "{connection}" {
			t.Errorf("%s unit %q", name, m.Unit)
		}
		allowed := map[attribute.Key]bool{"transport": true, "close_reason": name == mClosed}
		for _, dp := range s.DataPoints {
			for _, kv := range dp.Attributes.ToSlice() {
				if !allowed[kv.Key] {
					t.Errorf("%s has label %s=%s (labels must be bounded sets only)", name, kv.Key, kv.Value.String())
				}
			}
			if v, ok := dp.Attributes.Value("transport"); !ok || !oneOf(v.AsString(), "tcp", "tls", "ws", "wss") {
				t.Errorf("%s transport label %q", name, v.AsString())
			}
			if name == mClosed {
				v, _ := dp.Attributes.Value("close_reason")
				if !oneOf(v.AsString(), "client_close", "idle_timeout", "heartbeat_timeout", "server_shutdown", "protocol_error", "transport_error") {
					t.Errorf("close_reason %q not in the closed set", v.AsString())
				}
			}
		}
	}
	checkKind(mOpened, true)
	checkKind(mClosed, true)
	checkKind(mActive, false)
	if m, ok := findMetric(rm, mOpened); ok && m.Description == "" {
		t.Errorf("%s has no description", mOpened)
	}
}

// Digest §9.2 / §10: the job-queue instruments report the configured limit and an idle
// host as running with nothing in use.
func TestMetrics_JobQueueIdle(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{MaxQueuedApplicationJobs: 7}, nil)
	c, _ := th.connect(t)
	roundTrip(t, c, 1)
	rm := th.collect(t)
	for name, exp := range map[string]struct {
		attrs []attribute.KeyValue
		v     int64
	}{
		"limit":          {nil, 7},
		"in_use":         {[]attribute.KeyValue{state("in_use")}, 0},
		"queued":         {[]attribute.KeyValue{state("queued")}, 0},
		"running":        {[]attribute.KeyValue{state("running")}, 1},
		"paused":         {[]attribute.KeyValue{state("paused")}, 0},
		"peak(at least)": {nil, 1},
	} {
		metric := mJobs
		switch name {
		case "limit":
			metric = mJobLimit
		case "running", "paused":
			metric = mPressure
		case "peak(at least)":
			metric = mJobPeak
		}
		got := metricValue(rm, metric, exp.attrs...)
		if name == "peak(at least)" {
			if got < exp.v {
				t.Errorf("%s peak = %d, want >= %d", metric, got, exp.v)
			}
			continue
		}
		if got != exp.v {
			t.Errorf("%s %s = %d, want %d", metric, name, got, exp.v)
		}
	}
	if v := metricValue(rm, mWaiters); v != 0 {
		t.Errorf("capacity waiters %d on an idle host", v)
	}
}

func oneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}
