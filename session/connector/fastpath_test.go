package connector_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// Tests of the request fast path (a request reads its own reply, "leads") and of the
// coalescing write queue.

// dialLeading connects with a reader grace long enough that, after the first reply,
// every request that finds the reader token free leads, whatever the test's timing.
// It makes that first round trip through sc. leads() counts the requests that led
// since.
func dialLeading(t *testing.T, fs *fakeServer, opts connector.Options) (c *connector.Connector, sc *serverConn, leads func() uint64) {
	t.Helper()
	opts.NoCallerReads = false // these tests are of the fast path
	c, err := connector.New(fs.endpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	connector.SetReaderGrace(c, time.Hour)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc = fs.accept(t)
	// The read goroutine holds the token at first and gives it back after this reply.
	// (This request may lead too, if the reply is read before it looks at the token:
	// it then finds its call done at once.)
	done := async(func() error { return c.Request(context.Background(), "warmup", msg{}, nil) })
	sc.reply(sc.nextKind(t, wire.KindRequest), []byte(`{}`))
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	// The read goroutine gives the token back right after delivering the reply.
	eventually(t, "the reader token is free", func() bool { return connector.TokenFree(c) })
	base := connector.Leads(c)
	return c, sc, func() uint64 { return connector.Leads(c) - base }
}

func TestLeaderHandlesEveryFrame(t *testing.T) {
	fs := newTCPServer(t)
	var rec recorder
	opts := quiet()
	rec.install(&opts)
	c, sc, leads := dialLeading(t, fs, opts)
	pushed := make(chan connector.Message, 1)
	c.Handle("news", func(m connector.Message) { pushed <- m })

	var out2, out3 msg
	r2 := async(func() error { return c.Request(context.Background(), "two", msg{N: 2}, &out2) })
	f2 := sc.nextKind(t, wire.KindRequest)
	eventually(t, "the request leads", func() bool { return leads() == 1 })
	// A second request while the first leads waits for the leader to read its reply.
	r3 := async(func() error { return c.Request(context.Background(), "three", msg{N: 3}, &out3) })
	f3 := sc.nextKind(t, wire.KindRequest)

	// The leader reads all of these: a push, a ping, the other request's reply, an
	// unexpected reply, then its own.
	sc.send(wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "news"}, []byte(`{"n":9}`))
	sc.sendControl(wire.NameHeartbeatPing, nil)
	sc.reply(f3, []byte(`{"n":33}`))
	if err := result(t, r3); err != nil || out3.N != 33 {
		t.Fatalf("follower: %v %+v", err, out3)
	}
	sc.send(wire.Header{Kind: wire.KindResponse, Codec: wire.CodecJSON, RequestSeq: 999}, []byte(`{}`))
	if err := rec.nextError(t); !errors.Is(err, connector.ErrUnexpectedReply) {
		t.Fatalf("OnError %v", err)
	}
	select {
	case m := <-pushed:
		if string(m.Payload) != `{"n":9}` {
			t.Fatalf("push %q", m.Payload)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no push")
	}
	if f := sc.next(t); f.h.Kind != wire.KindControl || f.h.Name != wire.NameHeartbeatPong {
		t.Fatalf("want a pong, got %+v", f.h)
	}
	sc.reply(f2, []byte(`{"n":22}`))
	if err := result(t, r2); err != nil || out2.N != 22 {
		t.Fatalf("leader: %v %+v", err, out2)
	}
	if n := leads(); n != 1 {
		t.Fatalf("%d leads, want 1: the follower must not have led", n)
	}

	// The token is free again: the next request leads too.
	r4 := async(func() error { return c.Request(context.Background(), "four", msg{}, nil) })
	sc.reply(sc.nextKind(t, wire.KindRequest), []byte(`{}`))
	if err := result(t, r4); err != nil {
		t.Fatal(err)
	}
	if n := leads(); n != 2 {
		t.Fatalf("%d leads, want 2", n)
	}
}

// A leader whose deadline or cancellation cuts a read short in the middle of a frame
// leaves the stream where it was: the next reader finishes the frame. Also over TLS,
// whose reads must survive a deadline mid-record.
func TestLeaderInterruptedMidFrame(t *testing.T) {
	for _, scheme := range []string{"tcp", "tls"} {
		for _, how := range []string{"deadline", "cancel", "RequestTimeout"} {
			t.Run(scheme+"/"+how, func(t *testing.T) {
				var fs *fakeServer
				opts := quiet()
				if scheme == "tls" {
					cert, pool := selfSignedCert(t)
					fs = newTLSServer(t, cert)
					opts.TLS = &tls.Config{RootCAs: pool}
				} else {
					fs = newTCPServer(t)
				}
				var rec recorder
				rec.install(&opts)
				if how == "RequestTimeout" {
					opts.RequestTimeout = 50 * time.Millisecond
				}
				c, sc, leads := dialLeading(t, fs, opts)
				pushed := make(chan connector.Message, 1)
				c.Handle("news", func(m connector.Message) { pushed <- m })

				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch how {
				case "deadline":
					ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				case "cancel":
					ctx, cancel = context.WithCancel(ctx)
				}
				defer cancel()
				r2 := async(func() error { return c.Request(ctx, "two", msg{}, nil) })
				f2 := sc.nextKind(t, wire.KindRequest)
				eventually(t, "the request leads", func() bool { return leads() == 1 })
				midFrame := make(chan struct{}, 1)
				connector.OnMidFrameRead(t, func() {
					select {
					case midFrame <- struct{}{}:
					default:
					}
				})
				push, _ := wire.AppendFrame(nil, &wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "news"}, []byte(`{"n":1}`))
				sc.write(push[:9]) // prefix and part of the header
				if how == "cancel" {
					// Cancelled once the leader reads on for the rest of the frame: a
					// cancel before it has the first bytes would leave the stream untouched.
					select {
					case <-midFrame:
					case <-time.After(waitTimeout):
						t.Fatal("the leader never read part of the push")
					}
					cancel()
				}
				err := result(t, r2)
				switch how {
				case "cancel":
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("got %v, want context.Canceled", err)
					}
				default:
					if !errors.Is(err, connector.ErrRequestTimeout) || !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("got %v, want ErrRequestTimeout", err)
					}
				}

				// The next reader reads on from the middle of the push: the read
				// goroutine, woken because the leader left a partial frame, or the
				// next request if it gets the token first.
				var out msg
				r3 := async(func() error { return c.Request(context.Background(), "three", msg{}, &out) })
				f3 := sc.nextKind(t, wire.KindRequest)
				sc.write(push[9:])
				sc.reply(f2, []byte(`{"n":2}`)) // late: dropped
				sc.reply(f3, []byte(`{"n":3}`))
				if err := result(t, r3); err != nil || out.N != 3 {
					t.Fatalf("next request: %v %+v", err, out)
				}
				select {
				case m := <-pushed:
					if string(m.Payload) != `{"n":1}` {
						t.Fatalf("push %q", m.Payload)
					}
				case <-time.After(waitTimeout):
					t.Fatal("no push")
				}
				if err := rec.nextError(t); !errors.Is(err, connector.ErrUnexpectedReply) {
					t.Fatalf("late reply: %v", err)
				}
			})
		}
	}
}

// A read deadline left by an earlier request fires before this request's expiry: the
// leader resumes instead of timing out.
func TestLeaderResumesAfterEarlierDeadline(t *testing.T) {
	fs := newTCPServer(t)
	opts := quiet()
	opts.RequestTimeout = 400 * time.Millisecond
	c, sc, leads := dialLeading(t, fs, opts)
	// This one leads and sets the read deadline to now+400ms.
	r1 := async(func() error { return c.Request(context.Background(), "one", msg{}, nil) })
	sc.reply(sc.nextKind(t, wire.KindRequest), []byte(`{}`))
	if err := result(t, r1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	// This one's expiry is 250ms later, so it keeps the deadline in place, which fires
	// while it waits.
	start := time.Now()
	r2 := async(func() error { return c.Request(context.Background(), "two", msg{}, nil) })
	f := sc.nextKind(t, wire.KindRequest)
	time.Sleep(300*time.Millisecond - time.Since(start))
	sc.reply(f, []byte(`{}`))
	if err := result(t, r2); err != nil {
		t.Fatalf("got %v after %v", err, time.Since(start))
	}
	if n := leads(); n != 2 {
		t.Fatalf("%d leads, want 2", n)
	}
}

func TestLeaderFailsOnDropAndClose(t *testing.T) {
	t.Run("drop", func(t *testing.T) {
		fs := newTCPServer(t)
		c, sc, leads := dialLeading(t, fs, quiet())
		r := async(func() error { return c.Request(context.Background(), "q", msg{}, nil) })
		sc.nextKind(t, wire.KindRequest)
		eventually(t, "the request leads", func() bool { return leads() == 1 })
		_ = sc.nc.Close()
		var ce *connector.CloseError
		if err := result(t, r); !errors.As(err, &ce) || ce.Reason != wire.CloseTransportError {
			t.Fatalf("got %v, want a TransportError disconnect", err)
		}
	})
	t.Run("heartbeat", func(t *testing.T) {
		fs := newTCPServer(t)
		opts := quiet()
		opts.Heartbeat = connector.HeartbeatOptions{Interval: 10 * time.Millisecond, Timeout: 50 * time.Millisecond}
		c, sc, leads := dialLeading(t, fs, opts)
		r := async(func() error { return c.Request(context.Background(), "q", msg{}, nil) })
		sc.nextKind(t, wire.KindRequest) // never answered, nor are the pings
		var ce *connector.CloseError
		if err := result(t, r); !errors.As(err, &ce) || ce.Reason != wire.CloseHeartbeatTimeout {
			t.Fatalf("got %v, want a HeartbeatTimeout disconnect", err)
		}
		if n := leads(); n != 1 {
			t.Fatalf("%d leads, want 1", n)
		}
	})
	t.Run("close", func(t *testing.T) {
		fs := newTCPServer(t)
		c, sc, leads := dialLeading(t, fs, quiet())
		r := async(func() error { return c.Request(context.Background(), "q", msg{}, nil) })
		sc.nextKind(t, wire.KindRequest)
		eventually(t, "the request leads", func() bool { return leads() == 1 })
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := result(t, r); !errors.Is(err, connector.ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
	})
}

// WebSocket connections close on a read deadline, so requests never lead there.
func TestWebSocketRequestsNeverLead(t *testing.T) {
	fs := newWSServer(t, nil, withOnFrame(echo))
	if n := echoesAndLeads(t, fs.endpoint, quiet(), 20); n != 0 {
		t.Fatalf("%d leads over WebSocket", n)
	}
}

// echoesAndLeads connects to endpoint with opts (reader grace long enough that any
// request finding the token free would lead), makes n echo requests and returns how
// many of them led.
func echoesAndLeads(t *testing.T, endpoint string, opts connector.Options, n int) uint64 {
	t.Helper()
	c, err := connector.New(endpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	connector.SetReaderGrace(c, time.Hour)
	defer c.Close()
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		var out msg
		err := c.Request(ctx, "echo", msg{N: i}, &out)
		cancel()
		if err != nil || out.N != i {
			t.Fatalf("request %d: %v %+v", i, err, out)
		}
	}
	return connector.Leads(c)
}

// Mixed concurrent requests on a TCP connection exercise every hand-over of the reader
// token: leaders, followers, the read goroutine taking over and giving back.
func TestConcurrentRequestsWithLeaders(t *testing.T) {
	fs := newTCPServer(t, withOnFrame(echo))
	opts := quiet()
	opts.NoCallerReads = false // a test of the fast path
	c, err := connector.New(fs.endpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	connector.SetReaderGrace(c, 50*time.Microsecond)
	defer c.Close()
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 300 {
				in := msg{N: g*1000 + i}
				var out msg
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if i%3 == 1 {
					ctx, cancel = context.WithTimeout(ctx, waitTimeout)
				}
				err := c.Request(ctx, "echo", in, &out)
				cancel()
				if err != nil || out != in {
					t.Errorf("request %+v: %v %+v", in, err, out)
					return
				}
				if i%50 == 0 {
					time.Sleep(time.Millisecond) // let the read goroutine take the token back
				}
			}
		})
	}
	wg.Wait()
	if connector.Leads(c) == 0 {
		t.Fatal("no request led")
	}
}

// Concurrent senders: every sender's frames arrive in its call order, interleaved with
// requests, and Close writes what was queued before it.
func TestCoalescedSendsKeepOrder(t *testing.T) {
	const senders, each = 8, 500
	var mu sync.Mutex
	next := make(map[int]int)
	var bad atomic.Value
	var got atomic.Int64
	fs := newTCPServer(t, withOnFrame(func(sc *serverConn, f frame) bool {
		if f.h.Kind == wire.KindRequest {
			return echo(sc, f)
		}
		if f.h.Kind != wire.KindSend {
			return false
		}
		var m msg
		if err := json.Unmarshal(f.payload, &m); err != nil {
			bad.Store(err.Error())
			return true
		}
		g, i := m.N/10000, m.N%10000
		mu.Lock()
		if next[g] != i {
			bad.Store(fmt.Sprintf("sender %d: frame %d, want %d", g, i, next[g]))
		}
		next[g] = i + 1
		mu.Unlock()
		got.Add(1)
		return true
	}))
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				if err := c.Send(context.Background(), "seq", msg{N: g*10000 + i}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			var out msg
			if err := c.Request(context.Background(), "echo", msg{N: i}, &out); err != nil || out.N != i {
				t.Errorf("request %d: %v %+v", i, err, out)
				return
			}
		}
	})
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sc.waitClosed(t)
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	if n := got.Load(); n != senders*each {
		t.Fatalf("server got %d sends, want %d: Close must write what was queued", n, senders*each)
	}
}

// stalledServer accepts one connection and reads nothing until resume is called, then
// reads and discards everything.
type stalledServer struct {
	endpoint string
	conn     chan net.Conn
	resume   chan struct{}
	done     chan struct{}
}

func newStalledServer(t *testing.T) *stalledServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stalledServer{endpoint: "tcp://" + ln.Addr().String(), conn: make(chan net.Conn, 1),
		resume: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		nc, err := ln.Accept()
		_ = ln.Close()
		if err != nil {
			return
		}
		s.conn <- nc
		<-s.resume
		_, _ = io.Copy(io.Discard, nc)
		_ = nc.Close()
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		select {
		case nc := <-s.conn:
			_ = nc.Close()
		default:
		}
		select {
		case <-s.resume:
		default:
			close(s.resume)
		}
		<-s.done
	})
	return s
}

// With the peer not reading, the write queue fills up to its bound and then Send and
// Request wait for room, bounded by their context; once the peer reads, they go on.
func TestWriteBackpressureHonoursContext(t *testing.T) {
	s := newStalledServer(t)
	c := dial(t, s.endpoint, quiet())
	nc := <-s.conn
	s.conn <- nc // for the cleanup
	payload := bytes.Repeat([]byte{'x'}, 60<<10)
	sent := 0
	var err error
	for ; sent < 2000; sent++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = c.SendRaw(ctx, "bulk", wire.CodecRaw, payload)
		cancel()
		if err != nil {
			break
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, connector.ErrDisconnected) {
		t.Fatalf("after %d sends: %v, want the context's deadline", sent, err)
	}
	// Kernel socket buffers take some MiB (about 65 of these frames here), the queue
	// 256 KiB (4 more): far below 2000 × 60 KiB, and far above a few.
	if sent < 20 || sent > 1000 {
		t.Fatalf("%d sends accepted before backpressure", sent)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = c.RequestRaw(ctx, "q", wire.CodecRaw, payload)
	cancel()
	if !errors.Is(err, connector.ErrRequestTimeout) {
		t.Fatalf("request under backpressure: %v", err)
	}
	if s := c.State(); s != connector.StateConnected {
		t.Fatalf("state %v: backpressure must not break the connection", s)
	}
	// The peer reads again: a waiting Send goes through.
	waiting := async(func() error {
		return c.SendRaw(context.Background(), "bulk", wire.CodecRaw, payload)
	})
	close(s.resume)
	if err := result(t, waiting); err != nil {
		t.Fatal(err)
	}
	if err := c.SendRaw(context.Background(), "bulk", wire.CodecRaw, payload); err != nil {
		t.Fatal(err)
	}
}

// Close does not hang on a peer that never reads: the flush of queued frames is
// bounded.
func TestCloseBoundedByStalledPeer(t *testing.T) {
	s := newStalledServer(t)
	c := dial(t, s.endpoint, quiet())
	nc := <-s.conn
	s.conn <- nc
	payload := bytes.Repeat([]byte{'x'}, 60<<10)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.SendRaw(ctx, "bulk", wire.CodecRaw, payload)
		cancel()
		if err != nil {
			break
		}
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Close took %v", d)
	}
}

// The frames on the wire carry the hex seq as correlation id and a flow whose
// timestamp is the current time.
func TestRequestIDsOnTheWire(t *testing.T) {
	fs := newTCPServer(t)
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)
	for range 20 {
		before := time.Now().UnixMilli()
		done := async(func() error { return c.Request(context.Background(), "q", msg{}, nil) })
		f := sc.nextKind(t, wire.KindRequest)
		after := time.Now().UnixMilli()
		if f.h.CorrelationID != fmt.Sprintf("%x", f.h.RequestSeq) {
			t.Fatalf("correlation id %q for seq %d", f.h.CorrelationID, f.h.RequestSeq)
		}
		hexMs := f.h.FlowID[0:8] + f.h.FlowID[9:13]
		var v int64
		if _, err := fmt.Sscanf(hexMs, "%x", &v); err != nil || v < before || v > after {
			t.Fatalf("flow %q: time %d not in [%d, %d]", f.h.FlowID, v, before, after)
		}
		sc.reply(f, []byte(`{}`))
		if err := result(t, done); err != nil {
			t.Fatal(err)
		}
	}
}

// With NoCallerReads no request reads its own reply on TCP either: the read goroutine
// reads every frame, and requests still get their replies.
func TestNoCallerReadsNeverLeads(t *testing.T) {
	fs := newTCPServer(t, withOnFrame(echo))
	opts := quiet()
	opts.NoCallerReads = true
	if n := echoesAndLeads(t, fs.endpoint, opts, 50); n != 0 {
		t.Fatalf("%d requests led with NoCallerReads", n)
	}
}
