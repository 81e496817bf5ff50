package bench

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

func dialConnector(tb testing.TB, addr string) *connector.Connector {
	return dialConnectorWith(tb, addr, connector.Options{})
}

// dialConnectorWith dials with opts (heartbeats and reconnects off).
func dialConnectorWith(tb testing.TB, addr string, opts connector.Options) *connector.Connector {
	tb.Helper()
	opts.Heartbeat = connector.HeartbeatOptions{Disabled: true}
	opts.Reconnect = connector.ReconnectPolicy{Disabled: true}
	opts.RequestTimeout = benchWait // a lost reply fails the benchmark, never hangs it
	c, err := connector.New("tcp://"+addr, opts)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchWait)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkConnectorEcho is (b): connector request/response echo on one connection.
func BenchmarkConnectorEcho(b *testing.B) {
	addr, stop := startMeshnode(b)
	defer stop()
	connectorEcho(b, dialConnector(b, addr))
}

// BenchmarkConnectorEchoNoCallerReads is (b) with every reply read by the connector's
// read goroutine: what the caller-reads fast path earns.
func BenchmarkConnectorEchoNoCallerReads(b *testing.B) {
	addr, stop := startMeshnode(b)
	defer stop()
	connectorEcho(b, dialConnectorWith(b, addr, connector.Options{NoCallerReads: true}))
}

// BenchmarkConnectorEchoNoFastPaths is (b) with both fast paths off.
func BenchmarkConnectorEchoNoFastPaths(b *testing.B) {
	addr, stop := startMeshnodeWith(b, session.HostOptions{NoInlineTurns: true})
	defer stop()
	connectorEcho(b, dialConnectorWith(b, addr, connector.Options{NoCallerReads: true}))
}

func connectorEcho(b *testing.B, c *connector.Connector) {
	defer c.Close()
	ctx := context.Background()
	b.SetBytes(int64(len(echoPayload)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.RequestRaw(ctx, "echo", wire.CodecJSON, echoPayload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConnectorEcho100Conns is (c): 100 connectors echoing at once; b.N round
// trips in total.
func BenchmarkConnectorEcho100Conns(b *testing.B) {
	addr, stop := startMeshnode(b)
	defer stop()
	const conns = 100
	cs := make([]*connector.Connector, conns)
	for i := range cs {
		cs[i] = dialConnector(b, addr)
		defer cs[i].Close()
	}
	ctx := context.Background()
	b.SetBytes(int64(len(echoPayload)))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, c := range cs {
		n := b.N / conns
		if i < b.N%conns {
			n++
		}
		wg.Add(1)
		go func(c *connector.Connector, n int) {
			defer wg.Done()
			for j := 0; j < n; j++ {
				if _, err := c.RequestRaw(ctx, "echo", wire.CodecJSON, echoPayload); err != nil {
					errs <- err
					return
				}
			}
		}(c, n)
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// counter is a session that counts Sends and signals when the target is reached.
type counter struct {
	n      atomic.Int64
	target atomic.Int64
	done   chan struct{}
}

type countingSession struct{ c *counter }

func (s countingSession) OnPacket(_ context.Context, pkt *session.Packet) error {
	if s.c.n.Add(1) == s.c.target.Load() {
		close(s.c.done)
	}
	return nil
}

func (c *counter) arm(n int) {
	c.n.Store(0)
	c.target.Store(int64(n))
	c.done = make(chan struct{})
}

// startCounting serves a counting session; reuse makes its session type reuse its Send
// packets (it keeps none).
func startCounting(tb testing.TB, c *counter, reuse bool) (string, func()) {
	tb.Helper()
	h := session.NewHost(session.HostOptions{})
	st := session.NewSessionType(func() countingSession { return countingSession{c} })
	if reuse {
		st = st.ReuseSendPackets()
	}
	h.AddStreamNode("count").Bind("tcp://127.0.0.1:0").Session(st)
	if err := h.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return h.Node("count").BindAddrs()[0], func() { _ = h.Close() }
}

func sendFrame(tb testing.TB) []byte {
	tb.Helper()
	h := wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "tick"}
	f, err := wire.AppendFrame(nil, &h, echoPayload)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// BenchmarkRawTCPPipelined is the floor for (d): one connection, 64 KiB buffered
// writes of Send frames to a bare server that parses and counts them.
func BenchmarkRawTCPPipelined(b *testing.B) {
	raw := startRawPipelined(b)
	defer raw.stop()
	frame := sendFrame(b)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	raw.send(b, frame, b.N)
}

// rawPipelined is a bare TCP server that parses and counts Send frames, and a client
// connection to it.
type rawPipelined struct {
	c       net.Conn
	bw      *bufio.Writer
	target  chan int
	counted chan int
	stop    func()
}

func startRawPipelined(tb testing.TB) *rawPipelined {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &rawPipelined{target: make(chan int, 1), counted: make(chan int, 1)}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReaderSize(c, 64<<10)
		buf := make([]byte, 0, 256)
		for want := range r.target {
			for i := 0; i < want; i++ {
				if buf, err = readFrame(br, buf); err != nil {
					return
				}
			}
			r.counted <- want
		}
	}()
	r.c, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		tb.Fatal(err)
	}
	r.bw = bufio.NewWriterSize(r.c, 64<<10)
	r.stop = func() {
		r.c.Close() // ends the server's read of a lost frame, too
		close(r.target)
		ln.Close()
	}
	return r
}

// send writes n frames and waits until the server counted them.
func (r *rawPipelined) send(tb testing.TB, frame []byte, n int) {
	r.target <- n
	for range n {
		if _, err := r.bw.Write(frame); err != nil {
			tb.Fatal(err)
		}
	}
	if err := r.bw.Flush(); err != nil {
		tb.Fatal(err)
	}
	testkit.Await(tb, r.counted, benchWait, "the raw server to count every frame")
}

// BenchmarkConnectorPipelinedSendInterleaved is (d) measured against its floor in
// alternation: blocks of connector Sends into a session that reuses its Send packets
// and of raw pipelined frames take turns, so that both see the same machine (run
// apart, the raw floor alone swung between 20 and 60 ns a frame). It reports the
// Sends' time over the raw frames' (x-raw-pipelined-time; the ratio of (d) is its
// inverse); ns/op is one Send and one raw frame.
func BenchmarkConnectorPipelinedSendInterleaved(b *testing.B) {
	raw := startRawPipelined(b)
	defer raw.stop()
	cnt := &counter{}
	addr, stop := startCounting(b, cnt, true)
	defer stop()
	c := dialConnector(b, addr)
	defer c.Close()
	ctx := context.Background()
	frame := sendFrame(b)
	b.ReportAllocs()
	b.ResetTimer()
	ratio := alternate(b, 100000, func(n int) {
		cnt.arm(n)
		for range n {
			if err := c.SendRaw(ctx, "tick", wire.CodecJSON, echoPayload); err != nil {
				b.Fatal(err)
			}
		}
		testkit.Await(b, cnt.done, benchWait, "the session to count every Send")
	}, func(n int) { raw.send(b, frame, n) })
	b.ReportMetric(ratio, "x-raw-pipelined-time")
}

// alternate runs b.N operations of measured and b.N of baseline, in turns of block
// operations each (a func runs n operations and returns once they are done), and
// returns the time measured took over the time baseline took: a ratio that both
// sides' share of a noisy machine's moods leaves alone.
func alternate(b *testing.B, block int, measured, baseline func(n int)) float64 {
	var m, base time.Duration
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		start := time.Now()
		measured(n)
		mid := time.Now()
		baseline(n)
		m += mid.Sub(start)
		base += time.Since(mid)
	}
	return float64(m) / float64(base)
}

// BenchmarkServerPipelinedRawClient: the same pipelined frames into a meshnode session
// (permit, actor turn and callback per packet).
func BenchmarkServerPipelinedRawClient(b *testing.B) { benchServerPipelined(b, false) }

// BenchmarkServerPipelinedRawClientReused is the same into a session type that reuses
// its Send packets.
func BenchmarkServerPipelinedRawClientReused(b *testing.B) { benchServerPipelined(b, true) }

func benchServerPipelined(b *testing.B, reuse bool) {
	cnt := &counter{}
	addr, stop := startCounting(b, cnt, reuse)
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	frame := sendFrame(b)
	bw := bufio.NewWriterSize(c, 64<<10)
	cnt.arm(b.N)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		if _, err := bw.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	testkit.Await(b, cnt.done, benchWait, "the session to count every Send")
}

// BenchmarkConnectorPipelinedSend is (d): one-way Sends through the connector, as fast
// as it accepts them, until the session has counted all of them.
func BenchmarkConnectorPipelinedSend(b *testing.B) { benchConnectorPipelined(b, false) }

// BenchmarkConnectorPipelinedSendReused is (d) into a session type that reuses its Send
// packets, as one that keeps none may declare (session.SessionType.ReuseSendPackets).
func BenchmarkConnectorPipelinedSendReused(b *testing.B) { benchConnectorPipelined(b, true) }

func benchConnectorPipelined(b *testing.B, reuse bool) {
	cnt := &counter{}
	addr, stop := startCounting(b, cnt, reuse)
	defer stop()
	c := dialConnector(b, addr)
	defer c.Close()
	ctx := context.Background()
	cnt.arm(b.N)
	b.SetBytes(int64(len(echoPayload)))
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		if err := c.SendRaw(ctx, "tick", wire.CodecJSON, echoPayload); err != nil {
			b.Fatal(err)
		}
	}
	testkit.Await(b, cnt.done, benchWait, "the session to count every Send")
}
