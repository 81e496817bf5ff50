package stream_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// Timeouts: generous for -race on two cores, never waited out on a passing run.
const (
	waitLong  = 5 * time.Second
	waitShort = 300 * time.Millisecond // windows for "nothing happens"
)

// ---------------------------------------------------------------- recording session

type evKind string

const (
	evConnect    evKind = "connect"
	evPacket     evKind = "packet"
	evTransport  evKind = "transport_error"
	evDisconnect evKind = "disconnect"
)

type event struct {
	kind   evKind
	rid    session.RoutingID
	peer   *session.Peer
	pkt    *session.Packet // evPacket
	reason wire.CloseReason
	err    error
}

// recorder collects the callbacks of every session of one host, in the order they ran,
// and lets a test block until a condition on them holds.
type recorder struct {
	mu     sync.Mutex
	events []event
	notify chan struct{}

	// Optional hooks, set before the host starts.
	onPacket     func(ctx context.Context, p *session.Packet) error
	onConnect    func(ctx context.Context, peer *session.Peer)
	onDisconnect func(ctx context.Context, peer *session.Peer)

	overlap atomic.Bool // two callbacks of one session ran at once
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{})} }

func (r *recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	close(r.notify)
	r.notify = make(chan struct{})
	r.mu.Unlock()
}

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// waitFor blocks until pred holds on the events so far, or fails the test.
func (r *recorder) waitFor(t testing.TB, timeout time.Duration, what string, pred func([]event) bool) []event {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		evs := append([]event(nil), r.events...)
		ch := r.notify
		r.mu.Unlock()
		if pred(evs) {
			return evs
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s; events: %s", timeout, what, describe(evs))
			return nil
		}
	}
}

// none asserts pred does not become true within window.
func (r *recorder) none(t testing.TB, window time.Duration, what string, pred func([]event) bool) {
	t.Helper()
	deadline := time.NewTimer(window)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		evs := append([]event(nil), r.events...)
		ch := r.notify
		r.mu.Unlock()
		if pred(evs) {
			t.Fatalf("unexpected: %s; events: %s", what, describe(evs))
		}
		select {
		case <-ch:
		case <-deadline.C:
			return
		}
	}
}

func describe(evs []event) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s(rid=%d", e.kind, e.rid)
		if e.pkt != nil {
			fmt.Fprintf(&b, " %s %q", kindName(e.pkt.Kind), e.pkt.Name)
		}
		if e.reason != 0 {
			fmt.Fprintf(&b, " %s", e.reason)
		}
		b.WriteString(")")
		if i > 40 {
			fmt.Fprintf(&b, " ... (%d more)", len(evs)-i-1)
			break
		}
	}
	return b.String()
}

func kindName(k wire.Kind) string {
	switch k {
	case wire.KindSend:
		return "Send"
	case wire.KindRequest:
		return "Request"
	case wire.KindResponse:
		return "Response"
	case wire.KindError:
		return "Error"
	case wire.KindControl:
		return "Control"
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// filter returns the events of kind k (any rid when rid is 0).
func filter(evs []event, k evKind, rid session.RoutingID) []event {
	var out []event
	for _, e := range evs {
		if e.kind == k && (rid == 0 || e.rid == rid) {
			out = append(out, e)
		}
	}
	return out
}

func count(evs []event, k evKind, rid session.RoutingID) int { return len(filter(evs, k, rid)) }

// packetsNamed returns the packet events with that name.
func packetsNamed(evs []event, name string) []event {
	var out []event
	for _, e := range evs {
		if e.kind == evPacket && e.pkt.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// recSession is the session of every test host: it records each callback and runs the
// recorder's hooks. The default packet behaviour is the echo of sampleapp.
type recSession struct {
	rec    *recorder
	active atomic.Int32
}

func (s *recSession) enter() {
	if s.active.Add(1) != 1 {
		s.rec.overlap.Store(true)
	}
}
func (s *recSession) exit() { s.active.Add(-1) }

func (s *recSession) OnConnect(ctx context.Context, peer *session.Peer) {
	s.enter()
	defer s.exit()
	s.rec.add(event{kind: evConnect, rid: peer.RoutingID(), peer: peer})
	if s.rec.onConnect != nil {
		s.rec.onConnect(ctx, peer)
	}
}

func (s *recSession) OnPacket(ctx context.Context, p *session.Packet) error {
	s.enter()
	defer s.exit()
	s.rec.add(event{kind: evPacket, rid: p.RoutingID(), peer: p.Peer, pkt: p})
	if s.rec.onPacket != nil {
		return s.rec.onPacket(ctx, p)
	}
	return echo(ctx, p)
}

func (s *recSession) OnTransportError(_ context.Context, peer *session.Peer, err error) {
	s.enter()
	defer s.exit()
	s.rec.add(event{kind: evTransport, rid: peer.RoutingID(), peer: peer, err: err})
}

func (s *recSession) OnDisconnect(ctx context.Context, peer *session.Peer, reason wire.CloseReason) {
	s.enter()
	defer s.exit()
	s.rec.add(event{kind: evDisconnect, rid: peer.RoutingID(), peer: peer, reason: reason})
	if s.rec.onDisconnect != nil {
		s.rec.onDisconnect(ctx, peer)
	}
}

// echo answers Request "echo" with the payload, Send "echo" with a Send "echo" back,
// and ignores everything else (Requests get not_found).
func echo(ctx context.Context, p *session.Packet) error {
	switch {
	case p.Name == "echo" && p.Kind == wire.KindRequest:
		return p.Reply(p.Codec, p.Payload)
	case p.Name == "echo" && p.Kind == wire.KindSend:
		return p.Peer.Send(ctx, "echo", p.Codec, p.Payload)
	case p.Kind == wire.KindRequest:
		return p.ReplyError(fault.NotFound.Code(), "no handler for "+p.Name)
	}
	return nil
}

// otherSession is a second session type (a different Go type, so a different name).
type otherSession struct{ recSession }

func recType(rec *recorder) session.SessionType {
	return session.NewSessionType(func() *recSession { return &recSession{rec: rec} })
}

func otherType(rec *recorder) session.SessionType {
	return session.NewSessionType(func() *otherSession { return &otherSession{recSession{rec: rec}} })
}

// ---------------------------------------------------------------- host

type testHost struct {
	h      *session.Host
	rec    *recorder
	reader *sdkmetric.ManualReader
	node   *session.StreamNode
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newMeter returns a meter provider with a manual reader, shut down at cleanup.
func newMeter(t testing.TB) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, reader
}

// startHost starts a host with one node "gw" using the recording session. configure
// adds the binds and options; with nil it binds tcp://127.0.0.1:0.
func startHost(t testing.TB, rec *recorder, opts session.HostOptions, configure func(b *session.NodeBuilder)) *testHost {
	t.Helper()
	if rec == nil {
		rec = newRecorder()
	}
	mp, reader := newMeter(t)
	opts.MeterProvider = mp
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	h := newHost(opts)
	b := h.AddStreamNode("gw").Session(recType(rec))
	if configure != nil {
		configure(b)
	} else {
		b.Bind("tcp://127.0.0.1:0")
	}
	if err := h.Start(context.Background()); err != nil {
		_ = h.Close()
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return &testHost{h: h, rec: rec, reader: reader, node: h.Node("gw")}
}

// addr returns host:port of the node's first listener of scheme.
func (th *testHost) addr(t testing.TB, scheme string) string {
	t.Helper()
	eps, binds := th.node.Endpoints(), th.node.BindAddrs()
	for i, ep := range eps {
		if strings.HasPrefix(ep, scheme+"://") {
			return binds[i]
		}
	}
	t.Fatalf("no %s listener in %v", scheme, eps)
	return ""
}

// endpoint returns the advertised endpoint of the node's first listener of scheme.
func (th *testHost) endpoint(t testing.TB, scheme string) string {
	t.Helper()
	for _, ep := range th.node.Endpoints() {
		if strings.HasPrefix(ep, scheme+"://") {
			return ep
		}
	}
	t.Fatalf("no %s listener in %v", scheme, th.node.Endpoints())
	return ""
}

// dial opens a raw TCP client, closed at cleanup.
func (th *testHost) dial(t testing.TB) *testkit.RawConn {
	t.Helper()
	c, err := testkit.Dial(th.addr(t, "tcp"))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// connect dials and waits for the session's connect callback; it returns the client
// and the session's routing id.
func (th *testHost) connect(t testing.TB) (*testkit.RawConn, session.RoutingID) {
	t.Helper()
	before := count(th.rec.snapshot(), evConnect, 0)
	c := th.dial(t)
	evs := th.rec.waitFor(t, waitLong, "connect callback", func(evs []event) bool {
		return count(evs, evConnect, 0) > before
	})
	// Connections are set up one at a time by the tests, so the newest is ours.
	conns := filter(evs, evConnect, 0)
	return c, conns[len(conns)-1].rid
}

// ---------------------------------------------------------------- raw wire helpers

func send(name string, payload string) []byte {
	return testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: name}, []byte(payload))
}

func request(seq uint64, name string, payload string) []byte {
	return testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: seq, Name: name}, []byte(payload))
}

func control(name string) []byte {
	return testkit.Encode(wire.Header{Kind: wire.KindControl, Codec: wire.CodecRaw, Name: name}, nil)
}

func write(t testing.TB, c *testkit.RawConn, b []byte) {
	t.Helper()
	if err := c.WriteAll(b, waitLong); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func readFrame(t testing.TB, c *testkit.RawConn) testkit.Frame {
	t.Helper()
	f, err := c.ReadFrame(waitLong)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	return f
}

// roundTrip sends Request "echo" with seq and checks the Response.
func roundTrip(t testing.TB, c *testkit.RawConn, seq uint64) {
	t.Helper()
	payload := fmt.Sprintf(`{"n":%d}`, seq)
	write(t, c, request(seq, "echo", payload))
	f := readFrame(t, c)
	if f.Header.Kind != wire.KindResponse || f.Header.RequestSeq != seq || string(f.Payload) != payload {
		t.Fatalf("echo %d: got %s %+v payload %q", seq, kindName(f.Header.Kind), f.Header, f.Payload)
	}
}

// expectSessionClosing reads the next frame, which must be session-closing with reason,
// and then the end of the stream. It returns the diagnostic.
func expectSessionClosing(t testing.TB, c *testkit.RawConn, reason wire.CloseReason) string {
	t.Helper()
	f, err := c.ReadFrame(waitLong)
	if err != nil {
		t.Fatalf("want session-closing(%s), read failed: %v", reason, err)
	}
	if f.Header.Kind != wire.KindControl || f.Header.Name != wire.NameSessionClosing {
		t.Fatalf("want session-closing(%s), got %s %q payload %q", reason, kindName(f.Header.Kind), f.Header.Name, f.Payload)
	}
	sc, err := wire.DecodeSessionClosing(f.Payload)
	if err != nil {
		t.Fatalf("session-closing payload %x: %v", f.Payload, err)
	}
	if sc.Reason != reason {
		t.Fatalf("session-closing reason %s (diag %q), want %s", sc.Reason, sc.Diagnostic, reason)
	}
	expectEOF(t, c)
	return sc.Diagnostic
}

// expectEOF reads until the server closes; no frame may come first.
func expectEOF(t testing.TB, c *testkit.RawConn) {
	t.Helper()
	f, err := c.ReadFrame(waitLong)
	if err == nil {
		t.Fatalf("want the connection closed, got a frame %s %q payload %q", kindName(f.Header.Kind), f.Header.Name, f.Payload)
	}
	if !testkit.IsClosed(err) {
		t.Fatalf("want the connection closed, got %v", err)
	}
}

// ---------------------------------------------------------------- metrics

func (th *testHost) collect(t testing.TB) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := th.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	return rm
}

func findMetric(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func matches(set attribute.Set, attrs []attribute.KeyValue) bool {
	for _, kv := range attrs {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// metricValue sums the int64 data points of name whose attributes include attrs.
func metricValue(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	m, ok := findMetric(rm, name)
	if !ok {
		return 0
	}
	var sum int64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes, attrs) {
				sum += dp.Value
			}
		}
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes, attrs) {
				sum += dp.Value
			}
		}
	}
	return sum
}

func (th *testHost) metric(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	return metricValue(th.collect(t), name, attrs...)
}

// waitMetric waits until the metric equals want.
func (th *testHost) waitMetric(t testing.TB, name string, want int64, attrs ...attribute.KeyValue) {
	t.Helper()
	var got int64
	ok := eventually(waitLong, func() bool {
		got = th.metric(t, name, attrs...)
		return got == want
	})
	if !ok {
		t.Fatalf("metric %s%v = %d, want %d", name, attrs, got, want)
	}
}

func dirIn() attribute.KeyValue          { return attribute.String("direction", "in") }
func tr(s string) attribute.KeyValue     { return attribute.String("transport", s) }
func reason(s string) attribute.KeyValue { return attribute.String("close_reason", s) }
func state(s string) attribute.KeyValue  { return attribute.String("state", s) }

const (
	mOpened     = "zlink.stream.connections.opened"
	mActive     = "zlink.stream.connections.active"
	mClosed     = "zlink.stream.connections.closed"
	mEMsgSize   = "meshnode.stream.emsgsize"
	mHandshake  = "meshnode.stream.handshake_failures"
	mProtoErr   = "meshnode.stream.protocol_errors"
	mPackets    = "meshnode.stream.packets"
	mJobs       = "zlink.host.application_job_queue.jobs"
	mJobLimit   = "zlink.host.application_job_queue.limit"
	mJobPeak    = "zlink.host.application_job_queue.jobs.peak"
	mWaiters    = "zlink.host.application_job_queue.capacity_waiters"
	mPressure   = "zlink.host.application_job_queue.pressure_state"
	mSocketErrs = "meshnode.stream.socket_errors"
)

// ---------------------------------------------------------------- misc

// eventually polls cond every few milliseconds until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool { return testkit.Within(timeout, cond) }

var (
	pkiOnce sync.Once
	pki     *testkit.PKI
	pkiErr  error
)

func testPKI(t testing.TB) *testkit.PKI {
	t.Helper()
	pkiOnce.Do(func() { pki, pkiErr = testkit.NewPKI() })
	if pkiErr != nil {
		t.Fatalf("pki: %v", pkiErr)
	}
	return pki
}

func mustNotErr(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// headerLen returns the encoded length of h's header (what MaxMessageSize counts
// besides the payload).
func headerLen(h wire.Header) int {
	b, err := wire.AppendHeader(nil, &h)
	if err != nil {
		panic(err)
	}
	return len(b)
}

func certPool(t testing.TB, pemCerts []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCerts) {
		t.Fatal("no certificate in PEM")
	}
	return pool
}

// slowPaths reports whether this run turns the fast paths off (make test runs the
// contract suites a second time with MESHNODE_TEST_FAST_PATHS=off): every session turn
// then goes through the worker pool in a mailbox message of its own, and every reply through the connector's read
// goroutine, so both paths meet the same contract.
func slowPaths() bool { return os.Getenv("MESHNODE_TEST_FAST_PATHS") == "off" }

// newHost is session.NewHost with this run's fast-path switch.
func newHost(opts session.HostOptions) *session.Host {
	opts.NoInlineTurns = opts.NoInlineTurns || slowPaths()
	opts.NoBatchedIngress = opts.NoBatchedIngress || slowPaths()
	opts.NoPacketReuse = opts.NoPacketReuse || slowPaths()
	return session.NewHost(opts)
}
