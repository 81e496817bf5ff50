package stream_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.opentelemetry.io/otel/attribute"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// One client must never hurt the others: the per-session bounds on the ingress side,
// the outbound queue and what a stalled or hostile client can hold.

const (
	mPaused      = "meshnode.stream.ingress.paused_sessions"
	mStalled     = "meshnode.stream.ingress.stalled_permits"
	mFrameTO     = "meshnode.stream.frame_timeouts"
	mSlow        = "meshnode.stream.slow_consumers"
	mRefused     = "meshnode.stream.connections.refused"
	pauseBacklog = "backlog"
	pauseWrite   = "write_queue"
)

func why(s string) attribute.KeyValue { return attribute.String("reason", s) }

// blockOn makes the recorder's "block" packets wait until release is closed (or the
// session ends); everything else is echoed.
func blockOn(rec *recorder, release <-chan struct{}) {
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		if p.Name == "block" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return echo(ctx, p)
	}
}

// A session pulls at most MaxPendingPackets packets its callback has not started; past
// that its reader stops and only its client stalls in TCP.
func TestBounds_SessionPullsAtMostMaxPendingPackets(t *testing.T) {
	const maxPending = 4
	rec := newRecorder()
	release := make(chan struct{})
	defer closeOnce(release)
	blockOn(rec, release)
	th := startHost(t, rec, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{MaxPendingPackets: maxPending})
	})
	a, ridA := th.connect(t)
	other, _ := th.connect(t)

	write(t, a, send("block", `{}`))
	rec.waitFor(t, waitLong, "block callback", func(evs []event) bool { return len(packetsNamed(evs, "block")) == 1 })
	var burst []byte
	for range 200 {
		burst = append(burst, send("queued", `{}`)...)
	}
	write(t, a, burst)
	// 1 block + maxPending queued are pulled; the reader then waits at the bound.
	th.waitMetric(t, mPaused, 1, why(pauseBacklog))
	th.waitMetric(t, mPackets, 1+maxPending, dirIn())
	rec.none(t, waitShort, "a packet pulled past the bound", func([]event) bool {
		return th.metric(t, mPackets, dirIn()) > 1+maxPending
	})
	roundTrip(t, other, 1) // the others are served meanwhile

	// Once the callback returns, everything arrives, in order, exactly once.
	closeOnce(release)
	evs := rec.waitFor(t, waitLong, "all queued packets", func(evs []event) bool {
		return len(packetsNamed(filter(evs, evPacket, ridA), "queued")) == 200
	})
	if n := len(packetsNamed(filter(evs, evPacket, ridA), "queued")); n != 200 {
		t.Fatalf("%d queued packets delivered, want 200", n)
	}
	th.waitMetric(t, mPaused, 0, why(pauseBacklog))
}

// The packets queued behind a callback that does not return give their host permits
// back (after StallTimeout): a stalled session holds none of the permits that other
// sessions wait for, even when there are more stalled sessions than permits.
func TestBounds_StalledSessionHoldsNoPermits(t *testing.T) {
	const permits = 4
	rec := newRecorder()
	release := make(chan struct{})
	defer closeOnce(release)
	blockOn(rec, release)
	th := startHost(t, rec, session.HostOptions{MaxQueuedApplicationJobs: permits}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{MaxPendingPackets: 8})
	})
	// Twice as many stalled sessions as permits, each with a full backlog.
	var stalled []*testkit.RawConn
	for range 2 * permits {
		c, _ := th.connect(t)
		stalled = append(stalled, c)
		burst := send("block", `{}`)
		for range 20 {
			burst = append(burst, send("queued", `{}`)...)
		}
		write(t, c, burst)
	}
	th.waitMetric(t, mPaused, 2*permits, why(pauseBacklog))
	th.waitMetric(t, mJobs, 0, state("in_use"))
	if th.metric(t, mStalled) == 0 {
		t.Error("no permit was given back by a stalled session")
	}
	// A well-behaved session is served, again and again.
	good, _ := th.connect(t)
	for seq := uint64(1); seq <= 20; seq++ {
		roundTrip(t, good, seq)
	}
	closeOnce(release)
	rec.waitFor(t, waitLong, "stalled sessions drained", func(evs []event) bool {
		return len(packetsNamed(evs, "queued")) == 20*len(stalled)
	})
	th.waitMetric(t, mJobs, 0, state("queued"))
}

// A client that pipelines requests and never reads their replies fills its session's
// outbound queue; at the soft limit the session stops pulling, its callback never
// holds a permit, and every other session keeps its latency. The non-reading client is
// closed when a socket write times out.
func TestBounds_ClientThatDoesNotReadStallsOnlyItself(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{MaxQueuedApplicationJobs: 4}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{MaxPendingWrite: 64 << 10, SendTimeout: 2 * time.Second})
	})
	good, _ := th.connect(t)
	deaf, ridDeaf := th.connect(t)
	if tc, ok := deaf.Conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10) // fill the path to the client sooner
	}
	payload := `"` + strings.Repeat("x", 4000) + `"`
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := deaf.WriteAll(request(seq, "echo", payload), 200*time.Millisecond); err != nil && !testkit.IsTimeout(err) {
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	// Its session stops pulling: at the outbound queue's soft limit, or at its backlog
	// bound behind a callback blocked writing to the socket.
	if !eventually(waitLong, func() bool {
		return th.metric(t, mPaused, why(pauseWrite))+th.metric(t, mPaused, why(pauseBacklog)) == 1
	}) {
		t.Fatal("the session of a client that does not read never stopped pulling")
	}
	th.waitMetric(t, mJobs, 0, state("in_use"))
	for seq := uint64(1); seq <= 50; seq++ {
		start := time.Now()
		roundTrip(t, good, seq)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("a round trip of a well-behaved client took %v while another client did not read", d)
		}
	}
	// The deaf client's session ends with a transport error once a write times out.
	evs := th.rec.waitFor(t, 10*time.Second, "deaf session closed", func(evs []event) bool {
		return count(evs, evDisconnect, ridDeaf) == 1
	})
	if d := filter(evs, evDisconnect, ridDeaf)[0]; d.reason != wire.CloseTransportError {
		t.Errorf("deaf session closed with %s, want TransportError", d.reason)
	}
	roundTrip(t, good, 51)
}

// Digest §9.3: permit waiters are served oldest source first, with one outstanding
// waiter per source. (Strict permit accounting, so that a permit stays taken until its
// packet's callback starts.)
//
// Each source first parks a "gate" callback, so that the packet the permit is granted
// to is queued behind it and keeps the permit: the grant is then observable one step
// at a time. The test opens the gates in the expected order; a source that was passed
// over has no packet behind its gate, and the wait for its callback fails.
func TestBounds_PermitWaitersOldestSourceFirstOnePerSource(t *testing.T) {
	rec := newRecorder()
	release := make(chan struct{})
	defer closeOnce(release)
	gates := [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	defer func() {
		for _, g := range gates {
			closeOnce(g)
		}
	}()
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		var wait <-chan struct{}
		switch p.Name {
		case "block":
			wait = release
		case "gate0", "gate1", "gate2":
			wait = gates[p.Name[4]-'0']
		}
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
			}
		}
		return echo(ctx, p)
	}
	th := startHost(t, rec, session.HostOptions{MaxQueuedApplicationJobs: 1, StallTimeout: -1}, nil)
	holder, _ := th.connect(t)
	write(t, holder, send("block", `{}`))
	rec.waitFor(t, waitLong, "block callback", func(evs []event) bool { return len(packetsNamed(evs, "block")) == 1 })
	conns := make([]*testkit.RawConn, 3)
	for i := range conns {
		conns[i], _ = th.connect(t)
		gate := fmt.Sprintf("gate%d", i)
		write(t, conns[i], send(gate, `{}`))
		rec.waitFor(t, waitLong, gate+" callback", func(evs []event) bool { return len(packetsNamed(evs, gate)) == 1 })
	}
	write(t, holder, send("held", `{}`)) // takes the only permit, queued behind the block
	th.waitMetric(t, mJobs, 1, state("queued"))

	for i, c := range conns {
		// The third source sends two packets: it still has one waiter only.
		n := 1
		if i == 2 {
			n = 2
		}
		for j := range n {
			write(t, c, send(fmt.Sprintf("src%d.%d", i, j), `{}`))
		}
		th.waitMetric(t, mWaiters, int64(i+1))
	}
	rec.none(t, waitShort, "a fourth waiter", func([]event) bool { return th.metric(t, mWaiters) > 3 })

	// The held packet's turn starts and hands its permit on: to source 0, the oldest.
	closeOnce(release)
	th.waitMetric(t, mWaiters, 2)
	for i := range conns {
		// The source granted last holds the permit behind its gate; when the gate
		// opens its packet runs, and the permit goes on to the next source.
		closeOnce(gates[i])
		name := fmt.Sprintf("src%d.0", i)
		rec.waitFor(t, waitLong, name+" (source "+fmt.Sprint(i)+" served in turn, oldest first)", func(evs []event) bool {
			return len(packetsNamed(evs, name)) == 1
		})
	}
	rec.waitFor(t, waitLong, "the third source's second packet", func(evs []event) bool {
		return len(packetsNamed(evs, "src2.1")) == 1
	})
	if got := th.metric(t, mWaiters); got != 0 {
		t.Errorf("%d permit waiters left, want 0", got)
	}
}

// A frame begun and not completed within FrameTimeout closes its connection with
// session-closing IdleTimeout (tcp and ws); a client that sends whole frames slowly is
// not affected.
func TestFrameTimeout_TrickledFrameClosesConnection(t *testing.T) {
	const timeout = 300 * time.Millisecond
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Bind("ws://127.0.0.1:0/").Socket(session.SocketOptions{FrameTimeout: timeout})
	})
	frame := request(1, "echo", `{"slow":true}`)

	t.Run("tcp", func(t *testing.T) {
		c, rid := th.connect(t)
		write(t, c, frame[:3]) // inside the prefix
		start := time.Now()
		expectSessionClosing(t, c, wire.CloseIdleTimeout)
		if d := time.Since(start); d > timeout+2*time.Second {
			t.Errorf("closed after %v", d)
		}
		th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
		th.waitMetric(t, mFrameTO, 1, tr("tcp"))
	})
	t.Run("ws", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, th.endpoint(t, "ws"), nil)
		mustNotErr(t, err, "ws dial")
		defer ws.CloseNow()
		mustNotErr(t, ws.Write(ctx, websocket.MessageBinary, frame[:10]), "ws write") // past the prefix
		_, msg, err := ws.Read(ctx)
		mustNotErr(t, err, "ws read")
		fs, _, err := testkit.SplitFrames(msg)
		if err != nil || len(fs) != 1 || fs[0].Header.Name != wire.NameSessionClosing {
			t.Fatalf("ws got %d frames (%v), want session-closing", len(fs), err)
		}
		if sc, _ := wire.DecodeSessionClosing(fs[0].Payload); sc.Reason != wire.CloseIdleTimeout {
			t.Fatalf("session-closing reason %s, want IdleTimeout", sc.Reason)
		}
		th.waitMetric(t, mFrameTO, 1, tr("ws"))
	})
	t.Run("WholeFramesSlowlyAreFine", func(t *testing.T) {
		c, rid := th.connect(t)
		for seq := uint64(1); seq <= 3; seq++ {
			roundTrip(t, c, seq)
			// Idle between frames longer than the frame timeout: idleness is not a
			// frame in progress.
			rec := th.rec
			rec.none(t, 2*timeout, "close of a slow but whole-framed client", func(evs []event) bool {
				return count(evs, evDisconnect, rid) > 0
			})
		}
	})
}

// The receive buffer grows with the bytes that actually arrive: connections that
// announce a large frame and send a few bytes of it cost a few bytes each, not the
// announced length.
func TestReadBuffer_GrowsWithArrivedBytesNotAnnouncedLength(t *testing.T) {
	const (
		conns     = 300
		announced = 60000
	)
	th := startHost(t, nil, session.HostOptions{}, nil)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	h := wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "big"}
	f := testkit.Encode(h, make([]byte, announced-headerLen(h)))
	var cs []net.Conn // plain sockets: the client side must cost next to nothing here
	for range conns {
		c, err := net.Dial("tcp", th.addr(t, "tcp"))
		mustNotErr(t, err, "dial")
		t.Cleanup(func() { _ = c.Close() })
		_, err = c.Write(f[:100])
		mustNotErr(t, err, "write")
		cs = append(cs, c)
	}
	th.waitMetric(t, mActive, conns, tr("tcp"))
	if !eventually(waitLong, func() bool { return heap()-before < conns*8<<10 }) {
		t.Fatalf("heap grew %d KiB for %d connections that announced %d-byte frames and sent 100 bytes (announced total %d KiB)",
			(heap()-before)>>10, conns, announced, conns*announced>>10)
	}
	t.Logf("heap grew %d KiB for %d connections (announced %d KiB)", (heap()-before)>>10, conns, conns*announced>>10)
	// A frame that completes is served as usual.
	rc := testkit.NewRawConn(cs[0])
	write(t, rc, f[100:])
	req := wire.Header{Kind: wire.KindRequest, Codec: wire.CodecRaw, RequestSeq: 1, Name: "echo"}
	write(t, rc, testkit.Encode(req, bytes.Repeat([]byte{'q'}, announced-headerLen(req))))
	if g := readFrame(t, rc); g.Header.RequestSeq != 1 || len(g.Payload) != announced-headerLen(req) {
		t.Fatalf("reply seq %d, %d bytes", g.Header.RequestSeq, len(g.Payload))
	}
}

// Past MaxConnections a new connection is refused cleanly (tcp: session-closing
// ServerDrain, ws: HTTP 503), counted, and the others keep working; a freed slot is
// usable again.
func TestMaxConnections_RefusesCleanlyPastTheLimit(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{MaxConnections: 2}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Bind("ws://127.0.0.1:0/")
	})
	if th.h.MaxConnections() != 2 {
		t.Fatalf("MaxConnections() = %d", th.h.MaxConnections())
	}
	a, _ := th.connect(t)
	b, _ := th.connect(t)

	refused := th.dial(t)
	expectSessionClosing(t, refused, wire.CloseServerDrain)
	expectEOF(t, refused)
	th.waitMetric(t, mRefused, 1, tr("tcp"))

	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, th.endpoint(t, "ws"), nil)
	if err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("ws dial past the limit: err %v, response %v; want HTTP 503", err, resp)
	}
	th.waitMetric(t, mRefused, 1, tr("ws"))

	roundTrip(t, a, 1)
	roundTrip(t, b, 1)
	_ = a.Close()
	if !eventually(waitLong, func() bool { return th.h.Connections() == 1 }) {
		t.Fatalf("%d connections held after one closed", th.h.Connections())
	}
	c, _ := th.connect(t)
	roundTrip(t, c, 1)
}

// A WebSocket client that closes without a status code (1005, what browsers and the
// zlink TypeScript connector send) ends its session as a client close, not as a
// transport error.
func TestWebSocket_CloseWithoutStatusIsClientClose(t *testing.T) {
	for _, code := range []websocket.StatusCode{websocket.StatusNoStatusRcvd, websocket.StatusNormalClosure, websocket.StatusGoingAway} {
		t.Run(fmt.Sprint(int(code)), func(t *testing.T) {
			th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) { b.Bind("ws://127.0.0.1:0/") })
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, th.endpoint(t, "ws"), nil)
			mustNotErr(t, err, "ws dial")
			evs := th.rec.waitFor(t, waitLong, "connect", func(evs []event) bool { return count(evs, evConnect, 0) == 1 })
			rid := evs[0].rid
			_ = ws.Close(code, "")
			evs = th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
			if d := filter(evs, evDisconnect, rid)[0]; d.reason != wire.CloseClientClose {
				t.Errorf("disconnect reason %s, want ClientClose", d.reason)
			}
			if n := count(evs, evTransport, rid); n != 0 {
				t.Errorf("the transport-error callback ran %d times", n)
			}
			th.waitMetric(t, mClosed, 1, tr("ws"), reason("client_close"))
		})
	}
}

// A close the server starts sends a WebSocket close frame after the session-closing
// frame: normal closure, or going-away when the server drains.
func TestWebSocket_ServerCloseSendsCloseFrame(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(th *testHost, peer *session.Peer)
		want  websocket.StatusCode
	}{
		{"PeerClose", func(_ *testHost, p *session.Peer) { _ = p.Close(wire.CloseIdleTimeout, "bye") }, websocket.StatusNormalClosure},
		{"Drain", func(th *testHost, _ *session.Peer) { go func() { _ = th.h.Shutdown(context.Background()) }() }, websocket.StatusGoingAway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) { b.Bind("ws://127.0.0.1:0/") })
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, th.endpoint(t, "ws"), nil)
			mustNotErr(t, err, "ws dial")
			defer ws.CloseNow()
			evs := th.rec.waitFor(t, waitLong, "connect", func(evs []event) bool { return count(evs, evConnect, 0) == 1 })
			tc.close(th, evs[0].peer)
			_, msg, err := ws.Read(ctx)
			mustNotErr(t, err, "ws read")
			if fs, _, _ := testkit.SplitFrames(msg); len(fs) != 1 || fs[0].Header.Name != wire.NameSessionClosing {
				t.Fatalf("first message is not session-closing: %d frames", len(fs))
			}
			_, _, err = ws.Read(ctx)
			if got := websocket.CloseStatus(err); got != tc.want {
				t.Fatalf("after session-closing the client read %v (close status %d), want a close frame %d", err, got, tc.want)
			}
		})
	}
}

// A valid request written just before an oversize frame is run and its reply reaches
// the client before the EMSGSIZE close (which still sends no frame of its own).
func TestEMSGSIZE_RepliesToEarlierRequestsAreFlushed(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").MaxMessageSize(1024)
	})
	c, _ := th.connect(t)
	burst := request(1, "echo", `{"first":1}`)
	burst = append(burst, request(2, "echo", `{"second":2}`)...)
	burst = append(burst, wire.AppendPrefix(nil, 10, 4096)...)
	write(t, c, burst)
	for seq := uint64(1); seq <= 2; seq++ {
		f := readFrame(t, c)
		if f.Header.Kind != wire.KindResponse || f.Header.RequestSeq != seq {
			t.Fatalf("got %s seq %d, want the reply to request %d", kindName(f.Header.Kind), f.Header.RequestSeq, seq)
		}
	}
	expectEOF(t, c)
	th.waitMetric(t, mEMsgSize, 1, tr("tcp"))
}

// Packets whose replies fail because their session closed are logged as one line for
// the session, not one line each.
func TestClose_PacketsFailingAtCloseLogOneLine(t *testing.T) {
	var logs testkit.LockedBuffer
	rec := newRecorder()
	pulled := make(chan struct{}) // every request is pulled and queued behind "close"
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		if p.Name == "close" {
			<-pulled
			_ = p.Peer.Close(wire.CloseServerDrain, "closing under queued requests")
			return nil
		}
		return echo(ctx, p)
	}
	th := startHost(t, rec, session.HostOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{MaxPendingPackets: 64})
	})
	c, rid := th.connect(t)
	burst := send("close", `{}`)
	for seq := uint64(1); seq <= 40; seq++ {
		burst = append(burst, request(seq, "echo", `{}`)...)
	}
	write(t, c, burst)
	th.waitMetric(t, mPackets, 41, dirIn())
	close(pulled)
	th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
	// The line is written in the session's last turn, right after the disconnect callback.
	eventually(waitLong, func() bool { return strings.Contains(logs.String(), "closed under packets") })
	out := logs.String()
	if n := strings.Count(out, "packet callback failed"); n != 0 {
		t.Errorf("%d per-packet warnings at close:\n%s", n, out)
	}
	if n := strings.Count(out, "closed under packets"); n != 1 {
		t.Errorf("%d aggregated lines, want 1:\n%s", n, out)
	}
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// The WebSocket upgrade must complete within the handshake timeout: a client that
// connects to a ws:// listener and sends nothing, or half a request, or a plain HTTP
// request and then idles on the connection, is cut after it.
func TestWebSocket_UpgradeTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("ws://127.0.0.1:0/").Socket(session.SocketOptions{HandshakeTimeout: timeout})
	})
	for _, tc := range []struct{ name, send string }{
		{"Nothing", ""},
		{"HalfARequest", "GET / HTTP/1.1\r\nHost: x\r\n"},
		{"KeptAliveAfterAPlainRequest", "GET /other HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", th.addr(t, "ws"))
			mustNotErr(t, err, "dial")
			defer c.Close()
			if tc.send != "" {
				_, err := c.Write([]byte(tc.send))
				mustNotErr(t, err, "write")
			}
			start := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(waitLong))
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					if testkit.IsTimeout(err) {
						t.Fatalf("the connection was still open after %v", waitLong)
					}
					break
				}
			}
			if d := time.Since(start); d < timeout/2 || d > timeout+2*time.Second {
				t.Errorf("closed after %v, handshake timeout %v", d, timeout)
			}
		})
	}
}

// A client that does not read what it is sent: frames that cannot wait (NonBlocking,
// how a node's record receiver pushes) use the room up to the hard limit, twice
// MaxPendingWrite; past it the session is closed as a slow consumer (a transport
// error, counted) instead of frames being dropped silently.
func TestBounds_SlowConsumerIsClosed(t *testing.T) {
	const soft = 32 << 10
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{MaxPendingWrite: soft})
	})
	c, rid := th.connect(t)
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	evs := th.rec.snapshot()
	peer := filter(evs, evConnect, rid)[0].peer
	payload := bytes.Repeat([]byte("p"), 1000)
	var err error
	sent := 0
	for sent < 100_000 {
		if err = peer.Send(context.Background(), "flood", wire.CodecRaw, payload, session.NonBlocking()); err != nil {
			break
		}
		sent++
	}
	if !errors.Is(err, session.ErrSlowConsumer) {
		t.Fatalf("after %d pushes to a client that does not read: %v, want ErrSlowConsumer", sent, err)
	}
	evs = th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
	if d := filter(evs, evDisconnect, rid)[0]; d.reason != wire.CloseTransportError {
		t.Errorf("slow consumer closed with %s, want TransportError", d.reason)
	}
	if te := filter(evs, evTransport, rid); len(te) != 1 || !errors.Is(te[0].err, session.ErrSlowConsumer) {
		t.Errorf("transport error callback: %s", describe(te))
	}
	th.waitMetric(t, mSlow, 1, tr("tcp"))
}

// The ingress gate of a layer above the session (Peer.SetIngressGate) is asked before
// each Send or Request is pulled, also when a burst arrives in one segment and the read
// loop takes what is buffered in one go: a gate that lets three packets through holds
// the fourth, and once it opens everything arrives, in order, exactly once.
func TestBounds_IngressGateIsAskedBeforeEachPacketOfABurst(t *testing.T) {
	const allowed, burst = 3, 40
	rec := newRecorder()
	hold := make(chan struct{})
	defer closeOnce(hold)
	var passes atomic.Int64
	var open atomic.Bool
	rec.onConnect = func(_ context.Context, peer *session.Peer) {
		peer.SetIngressGate(func() <-chan struct{} {
			if open.Load() || passes.Add(1) <= allowed {
				return nil
			}
			return hold
		})
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	var frames []byte
	for i := range burst {
		frames = append(frames, send("queued", fmt.Sprintf(`{"n":%d}`, i))...)
	}
	write(t, c, frames)
	th.waitMetric(t, mPackets, allowed, dirIn())
	rec.none(t, waitShort, "a packet pulled past the gate", func([]event) bool {
		return th.metric(t, mPackets, dirIn()) > allowed
	})
	open.Store(true)
	closeOnce(hold)
	evs := rec.waitFor(t, waitLong, "the whole burst", func(evs []event) bool {
		return len(packetsNamed(filter(evs, evPacket, rid), "queued")) == burst
	})
	for i, e := range packetsNamed(filter(evs, evPacket, rid), "queued") {
		if want := fmt.Sprintf(`{"n":%d}`, i); string(e.pkt.Payload) != want {
			t.Fatalf("packet %d is %s, want %s", i, e.pkt.Payload, want)
		}
	}
}

// Frames queued without waiting from outside the session's turn (how a reply that came
// from another node is sent) reach the client whole, once each and in order, also
// when the socket takes only part of what is queued: 18 MB are queued before the
// client reads, more than the socket buffers hold, so the writes run into a full
// socket; what it did not take is written later, before anything queued after it.
func TestBounds_NonBlockingFramesBeyondAFullSocketArriveInOrder(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{MaxPendingWrite: 64 << 20})
	})
	c, rid := th.connect(t)
	peer := filter(th.rec.snapshot(), evConnect, rid)[0].peer
	const frames = 20000
	payload := bytes.Repeat([]byte("p"), 900)
	for i := range frames {
		binary.BigEndian.PutUint32(payload, uint32(i))
		if err := peer.Send(context.Background(), "flood", wire.CodecRaw, payload, session.NonBlocking()); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	for i := range frames {
		f, err := c.ReadFrame(waitLong)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got := binary.BigEndian.Uint32(f.Payload); f.Header.Name != "flood" || got != uint32(i) || len(f.Payload) != len(payload) {
			t.Fatalf("frame %d: %q #%d, %d bytes", i, f.Header.Name, got, len(f.Payload))
		}
	}
}

// A frame written without waiting long after the last write (past SendTimeout, the
// deadline the writer set for that one) is written, not failed on that stale deadline:
// the session stays open and the client gets the frame.
func TestBounds_NonBlockingFrameLongAfterTheLastWriteArrives(t *testing.T) {
	const sendTimeout = 100 * time.Millisecond
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{SendTimeout: sendTimeout})
	})
	c, rid := th.connect(t)
	peer := filter(th.rec.snapshot(), evConnect, rid)[0].peer
	if err := peer.Send(context.Background(), "first", wire.CodecRaw, []byte("1")); err != nil {
		t.Fatal(err)
	}
	if f, err := c.ReadFrame(waitLong); err != nil || f.Header.Name != "first" {
		t.Fatalf("first push: %v %q", err, f.Header.Name)
	}
	// What is tested is the passing of time itself: the first write's deadline expires.
	time.Sleep(3 * sendTimeout)
	if err := peer.Send(context.Background(), "second", wire.CodecRaw, []byte("2"), session.NonBlocking()); err != nil {
		t.Fatal(err)
	}
	if f, err := c.ReadFrame(waitLong); err != nil || f.Header.Name != "second" {
		t.Fatalf("second push, %v after the first: %v %q", 3*sendTimeout, err, f.Header.Name)
	}
	if n := count(th.rec.snapshot(), evDisconnect, rid); n != 0 {
		t.Fatal("the session closed")
	}
}

// A frame encoded once (session.EncodeSend, how a topic's fan-out writes one publish to
// many sessions) reaches each client byte for byte; to a client that does not read,
// SendFrame never waits and stops at the soft limit (MaxPendingWrite) with ErrBehind,
// leaving the session open (the caller decides what such a client loses), while the
// room up to the hard limit stays for frames that cannot wait.
func TestBounds_EncodedFrameStopsAtTheSoftLimitWithoutClosing(t *testing.T) {
	const soft = 32 << 10
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{MaxPendingWrite: soft})
	})
	reader, rid := th.connect(t)
	idle, idleRid := th.connect(t)
	evs := th.rec.snapshot()
	payload := bytes.Repeat([]byte("p"), 1000)
	f, err := session.EncodeSend("topic.msg", wire.CodecRaw, payload, wire.Metadata{{Key: "topic", Value: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := filter(evs, evConnect, rid)[0].peer.SendFrame(f); err != nil {
		t.Fatal(err)
	}
	got := readFrame(t, reader)
	if got.Header.Name != "topic.msg" || !bytes.Equal(got.Payload, payload) || len(got.Header.Metadata) != 1 {
		t.Fatalf("the encoded frame arrived as %+v", got.Header)
	}
	peer := filter(evs, evConnect, idleRid)[0].peer
	sent := 0
	for sent < 100_000 {
		if err = peer.SendFrame(f); err != nil {
			break
		}
		sent++
	}
	if !errors.Is(err, session.ErrBehind) {
		t.Fatalf("after %d frames to a client that does not read: %v, want ErrBehind", sent, err)
	}
	if err := peer.Send(context.Background(), "notice", wire.CodecRaw, []byte("x"), session.NonBlocking()); err != nil {
		t.Fatalf("a NonBlocking frame after ErrBehind: %v (the room to the hard limit is still there)", err)
	}
	th.rec.none(t, waitShort, "the session behind closed", func(evs []event) bool { return count(evs, evDisconnect, idleRid) > 0 })
	// Once the client reads, every frame SendFrame took arrives once, then the notice.
	for i := 0; i < sent; i++ {
		if got := readFrame(t, idle); got.Header.Name != "topic.msg" {
			t.Fatalf("frame %d of %d is %q", i, sent, got.Header.Name)
		}
	}
	if got := readFrame(t, idle); got.Header.Name != "notice" {
		t.Fatalf("after the %d frames: %q, want the notice", sent, got.Header.Name)
	}
}
