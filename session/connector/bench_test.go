package connector_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// These benchmarks split the connector's echo cost from any server's: they run against
// a minimal in-process echo server (one goroutine per connection, a reply built from
// the request header) rather than the meshnode session host, which test/bench covers.

var benchPayload = []byte(`{"msg":"hello mesh","n":12345678}`)

// startMiniEcho answers every Request with a Response echoing request_seq,
// correlation and flow fields (what a meshnode session reply carries) and drops every
// other frame. It counts Sends into sends when that is not nil.
func startMiniEcho(tb testing.TB, sends chan<- struct{}) (addr string) {
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
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				br := bufio.NewReaderSize(nc, 64<<10)
				bw := bufio.NewWriterSize(nc, 16<<10)
				var pre [wire.PrefixSize]byte
				var body, out []byte
				for {
					if _, err := io.ReadFull(br, pre[:]); err != nil {
						return
					}
					hl, pl := wire.ParsePrefix(pre[:])
					if cap(body) < hl+pl {
						body = make([]byte, hl+pl)
					}
					body = body[:hl+pl]
					if _, err := io.ReadFull(br, body); err != nil {
						return
					}
					h, err := wire.DecodeHeader(body[:hl])
					if err != nil {
						tb.Error(err)
						return
					}
					switch h.Kind {
					case wire.KindRequest:
						rh := wire.Header{Kind: wire.KindResponse, Codec: h.Codec, RequestSeq: h.RequestSeq,
							CorrelationID: h.CorrelationID, FlowID: h.FlowID, FlowOrigin: h.FlowOrigin}
						out, _ = wire.AppendFrame(out[:0], &rh, body[hl:])
						if _, err := bw.Write(out); err != nil {
							return
						}
					case wire.KindSend:
						if sends != nil {
							sends <- struct{}{}
						}
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
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func benchDial(tb testing.TB, addr string) *connector.Connector {
	tb.Helper()
	c, err := connector.New("tcp://"+addr, quiet())
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Connect(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// BenchmarkMiniEchoRawClient is the floor against the mini server: a raw client
// sending the connector's frame shape (seq, correlation id, flow) and reading the reply
// on its own goroutine, allocating nothing.
func BenchmarkMiniEchoRawClient(b *testing.B) {
	addr := startMiniEcho(b, nil)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	h := wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 1, Name: "echo",
		CorrelationID: "1", FlowID: "0192d2a4-7f3e-7a1b-8c2d-3e4f5a6b7c8d", FlowOrigin: wire.FlowApplication}
	req, err := wire.AppendFrame(nil, &h, benchPayload)
	if err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReaderSize(nc, 16<<10)
	buf := make([]byte, 512)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i&1023 == 0 { // a lost reply fails the read instead of hanging it
			_ = nc.SetDeadline(time.Now().Add(benchWait))
		}
		if _, err := nc.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(br, buf[:wire.PrefixSize]); err != nil {
			b.Fatal(err)
		}
		hl, pl := wire.ParsePrefix(buf)
		if _, err := io.ReadFull(br, buf[:hl+pl]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMiniEchoConnector is RequestRaw against the mini server.
func BenchmarkMiniEchoConnector(b *testing.B) {
	c := benchDial(b, startMiniEcho(b, nil))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.RequestRaw(ctx, "echo", wire.CodecJSON, benchPayload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMiniEchoConnectorCancelCtx is RequestRaw with a cancellable context, which a
// leading request watches with a context.AfterFunc.
func BenchmarkMiniEchoConnectorCancelCtx(b *testing.B) {
	c := benchDial(b, startMiniEcho(b, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.RequestRaw(ctx, "echo", wire.CodecJSON, benchPayload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMiniEchoConnectorParallel runs RequestRaw from several goroutines on one
// connector: replies for different callers arrive interleaved.
func BenchmarkMiniEchoConnectorParallel(b *testing.B) {
	c := benchDial(b, startMiniEcho(b, nil))
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.RequestRaw(ctx, "echo", wire.CodecJSON, benchPayload); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkMiniPipelinedSend is SendRaw in a loop until the server has read them all.
func BenchmarkMiniPipelinedSend(b *testing.B) {
	sends := make(chan struct{}, 1<<16)
	c := benchDial(b, startMiniEcho(b, sends))
	ctx := context.Background()
	done := countSends(b, sends, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.SendRaw(ctx, "tick", wire.CodecJSON, benchPayload); err != nil {
			b.Fatal(err)
		}
	}
	testkit.Await(b, done, benchWait, "the server to read every Send")
}

// BenchmarkMiniPipelinedSendParallel is SendRaw from several goroutines at once, where
// coalescing matters most.
func BenchmarkMiniPipelinedSendParallel(b *testing.B) {
	sends := make(chan struct{}, 1<<16)
	c := benchDial(b, startMiniEcho(b, sends))
	ctx := context.Background()
	done := countSends(b, sends, b.N)
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.SendRaw(ctx, "tick", wire.CodecJSON, benchPayload); err != nil {
				b.Error(err)
				return
			}
		}
	})
	testkit.Await(b, done, benchWait, "the server to read every Send")
}

// benchWait bounds every wait of a benchmark for something already under way.
const benchWait = 30 * time.Second

// countSends returns a channel closed once n sends were reported; its goroutine ends
// with the benchmark even when some never arrive.
func countSends(b *testing.B, sends <-chan struct{}, n int) <-chan struct{} {
	done, stop := make(chan struct{}), make(chan struct{})
	b.Cleanup(func() { close(stop) })
	go func() {
		for i := 0; i < n; i++ {
			select {
			case <-sends:
			case <-stop:
				return
			}
		}
		close(done)
	}()
	return done
}
