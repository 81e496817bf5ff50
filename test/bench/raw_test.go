// Package bench holds the STREAM benchmarks and their baselines, measured in one run so
// that ratios survive a noisy machine (make bench prints them).
package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// benchWait bounds every wait of a benchmark for something already under way (a
// reply, the tail of its sends): a lost message fails the benchmark, never hangs it.
const benchWait = 30 * time.Second

// keepDeadline pushes c's deadline benchWait ahead every 1024 operations (cheap: a
// timer update, not a syscall), so a read that waits for a lost reply fails.
func keepDeadline(c net.Conn, op int) {
	if op&1023 == 0 {
		_ = c.SetDeadline(time.Now().Add(benchWait))
	}
}

// echoPayload makes the echo request frame 68 bytes, the size of the field notes' floor.
var echoPayload = []byte(`{"msg":"hello mesh","n":12345678}`)

func requestFrame(tb testing.TB, seq uint64) []byte {
	tb.Helper()
	h := wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: seq, Name: "echo"}
	f, err := wire.AppendFrame(nil, &h, echoPayload)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// readFrame reads one whole frame into buf (grown if needed) without allocating in the
// steady state.
func readFrame(br *bufio.Reader, buf []byte) ([]byte, error) {
	if cap(buf) < wire.PrefixSize {
		buf = make([]byte, 0, 256)
	}
	buf = buf[:wire.PrefixSize]
	if _, err := io.ReadFull(br, buf); err != nil {
		return buf, err
	}
	hl, pl := wire.ParsePrefix(buf)
	n := wire.PrefixSize + hl + pl
	if cap(buf) < n {
		nb := make([]byte, n)
		copy(nb, buf)
		buf = nb
	}
	buf = buf[:n]
	_, err := io.ReadFull(br, buf[wire.PrefixSize:])
	return buf, err
}

// startRawEcho is the floor: a bare TCP server that echoes each frame back, flipping
// the kind to Response, with the same framing work and nothing else.
func startRawEcho(tb testing.TB) (addr string, stop func()) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				br := bufio.NewReaderSize(c, 16<<10)
				bw := bufio.NewWriterSize(c, 16<<10)
				var buf []byte
				for {
					var err error
					buf, err = readFrame(br, buf)
					if err != nil {
						return
					}
					buf[wire.PrefixSize+1] = byte(wire.KindResponse)
					if _, err := bw.Write(buf); err != nil {
						return
					}
					if br.Buffered() == 0 {
						if err := bw.Flush(); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// startMeshnode starts a session host serving the sample echo session on tcp.
func startMeshnode(tb testing.TB) (addr string, stop func()) {
	return startMeshnodeWith(tb, session.HostOptions{})
}

// startMeshnodeWith is startMeshnode with host options (the fast-path switches).
func startMeshnodeWith(tb testing.TB, opts session.HostOptions) (addr string, stop func()) {
	tb.Helper()
	h := session.NewHost(opts)
	h.AddStreamNode("bench").Bind("tcp://127.0.0.1:0").Session(sampleapp.Type(nil, nil))
	if err := h.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return h.Node("bench").BindAddrs()[0], func() { _ = h.Close() }
}

// pingPong runs b.N request/response round trips on one raw connection with reused
// buffers, so the client allocates nothing and allocs/op is the server's.
func pingPong(b *testing.B, addr string) {
	p := dialRawPinger(b, addr)
	defer p.c.Close()
	b.SetBytes(int64(len(p.req)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuPerOp(b)
	err := p.roundTrips(b.N)
	b.StopTimer()
	cpu()
	if err != nil {
		b.Fatal(err)
	}
}

// rawPinger is one raw client connection making echo round trips with reused buffers:
// it allocates nothing.
type rawPinger struct {
	c        net.Conn
	br       *bufio.Reader
	req, buf []byte
	ops      int
}

func dialRawPinger(tb testing.TB, addr string) *rawPinger {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	return &rawPinger{c: c, br: bufio.NewReaderSize(c, 16<<10), req: requestFrame(tb, 1), buf: make([]byte, 0, 256)}
}

// roundTrips makes n round trips, each answered by a Response.
func (p *rawPinger) roundTrips(n int) error {
	for range n {
		keepDeadline(p.c, p.ops)
		p.ops++
		if _, err := p.c.Write(p.req); err != nil {
			return err
		}
		var err error
		if p.buf, err = readFrame(p.br, p.buf); err != nil {
			return err
		}
		if p.buf[wire.PrefixSize+1] != byte(wire.KindResponse) {
			return fmt.Errorf("reply kind %d", p.buf[wire.PrefixSize+1])
		}
	}
	return nil
}

// block returns p's round trips as a block for alternate.
func (p *rawPinger) block(tb testing.TB) func(n int) {
	return func(n int) {
		if err := p.roundTrips(n); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkRawTCPPingPong is baseline (a): the floor for one connection.
func BenchmarkRawTCPPingPong(b *testing.B) {
	addr, stop := startRawEcho(b)
	defer stop()
	pingPong(b, addr)
}

// BenchmarkServerEchoRawClient is the server's share of one echo round trip: a raw
// client that allocates nothing, so allocs/op are the server's allocations.
func BenchmarkServerEchoRawClient(b *testing.B) {
	addr, stop := startMeshnode(b)
	defer stop()
	pingPong(b, addr)
}

// BenchmarkServerEchoRawClientNoInlineTurns is the same with every session turn sent
// to the worker pool: what the inline turn on the read loop earns.
func BenchmarkServerEchoRawClientNoInlineTurns(b *testing.B) {
	addr, stop := startMeshnodeWith(b, session.HostOptions{NoInlineTurns: true})
	defer stop()
	pingPong(b, addr)
}

// BenchmarkServerEchoInlineTurnsInterleaved is the inline-turn fast path measured
// against its switch in alternation: blocks of raw-client echo round trips to a host
// with inline turns (the default) and to one without take turns, so that both see the
// same machine. It reports the first's time over the second's
// (x-no-inline-turns-time; the fast path's ratio is its inverse); ns/op is one of each.
func BenchmarkServerEchoInlineTurnsInterleaved(b *testing.B) {
	on, stopOn := startMeshnode(b)
	defer stopOn()
	off, stopOff := startMeshnodeWith(b, session.HostOptions{NoInlineTurns: true})
	defer stopOff()
	pOn, pOff := dialRawPinger(b, on), dialRawPinger(b, off)
	defer pOn.c.Close()
	defer pOff.c.Close()
	b.ReportAllocs()
	b.ResetTimer()
	ratio := alternate(b, 1000, pOn.block(b), pOff.block(b))
	b.ReportMetric(ratio, "x-no-inline-turns-time")
}

// parallelPingPong runs conns connections ping-ponging at once, b.N round trips total.
func parallelPingPong(b *testing.B, addr string, conns int) {
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	req := requestFrame(b, 1)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuPerOp(b)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	per := b.N / conns
	extra := b.N % conns
	for i, c := range cs {
		n := per
		if i < extra {
			n++
		}
		wg.Add(1)
		go func(c net.Conn, n int) {
			defer wg.Done()
			br := bufio.NewReaderSize(c, 4<<10)
			buf := make([]byte, 0, 256)
			var err error
			for j := 0; j < n; j++ {
				keepDeadline(c, j)
				if _, err = c.Write(req); err != nil {
					errs <- err
					return
				}
				if buf, err = readFrame(br, buf); err != nil {
					errs <- err
					return
				}
			}
		}(c, n)
	}
	wg.Wait()
	b.StopTimer()
	cpu()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkRawTCP100Conns is baseline for (c): raw aggregate with 100 connections.
func BenchmarkRawTCP100Conns(b *testing.B) {
	addr, stop := startRawEcho(b)
	defer stop()
	parallelPingPong(b, addr, 100)
}

// BenchmarkServerEcho100ConnsRawClient: the server with 100 raw connections at once.
func BenchmarkServerEcho100ConnsRawClient(b *testing.B) {
	addr, stop := startMeshnode(b)
	defer stop()
	parallelPingPong(b, addr, 100)
}

// BenchmarkConnectorEcho100ConnsInterleaved is (c) measured against its baseline in
// alternation: blocks of round trips spread over 100 connectors to a meshnode host and
// over 100 raw connections to the raw echo server take turns, so that both see the
// same machine. It reports the connectors' time over the raw connections'
// (x-raw-100conns-time; the ratio of (c) is its inverse); ns/op is one of each.
func BenchmarkConnectorEcho100ConnsInterleaved(b *testing.B) {
	addr, stop := startMeshnode(b)
	defer stop()
	rawAddr, stopRaw := startRawEcho(b)
	defer stopRaw()
	const conns = 100
	cs := make([]*connector.Connector, conns)
	ps := make([]*rawPinger, conns)
	for i := range cs {
		cs[i] = dialConnector(b, addr)
		defer cs[i].Close()
		ps[i] = dialRawPinger(b, rawAddr)
		defer ps[i].c.Close()
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	ratio := alternate(b, 5000, func(n int) {
		spread(b, n, conns, func(i, k int) error {
			for range k {
				if _, err := cs[i].RequestRaw(ctx, "echo", wire.CodecJSON, echoPayload); err != nil {
					return err
				}
			}
			return nil
		})
	}, func(n int) {
		spread(b, n, conns, func(i, k int) error { return ps[i].roundTrips(k) })
	})
	b.ReportMetric(ratio, "x-raw-100conns-time")
}

// spread runs n operations over workers goroutines at once, worker i running its
// share k with op(i, k), and returns when all are done; an error fails tb.
func spread(tb testing.TB, n, workers int, op func(i, k int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		k := n / workers
		if i < n%workers {
			k++
		}
		wg.Go(func() {
			if err := op(i, k); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}
