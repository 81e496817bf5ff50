package stream_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// wsClient reads whole frames out of binary WebSocket messages (a message may carry
// one or more whole frames; digest §2.2).
type wsClient struct {
	t    testing.TB
	c    *websocket.Conn
	buf  []byte
	got  []testkit.Frame
	ctx  context.Context
	stop context.CancelFunc
}

func dialWS(t testing.TB, url string, opts *websocket.DialOptions) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	c, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		cancel()
		t.Fatalf("ws dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.CloseNow(); cancel() })
	return &wsClient{t: t, c: c, ctx: ctx, stop: cancel}
}

func (w *wsClient) writeMsg(b []byte) {
	w.t.Helper()
	if err := w.c.Write(w.ctx, websocket.MessageBinary, b); err != nil {
		w.t.Fatalf("ws write: %v", err)
	}
}

func (w *wsClient) readFrame() testkit.Frame {
	w.t.Helper()
	for len(w.got) == 0 {
		typ, msg, err := w.c.Read(w.ctx)
		if err != nil {
			w.t.Fatalf("ws read: %v", err)
		}
		if typ != websocket.MessageBinary {
			w.t.Fatalf("ws message type %v, want binary", typ)
		}
		fs, rest, err := testkit.SplitFrames(append(w.buf, msg...))
		if err != nil {
			w.t.Fatalf("ws frames: %v", err)
		}
		if len(rest) != 0 {
			// The server writes whole frames per message (digest §2.2).
			w.t.Fatalf("ws message ends inside a frame (%d trailing bytes)", len(rest))
		}
		w.buf = rest
		w.got = append(w.got, fs...)
	}
	f := w.got[0]
	w.got = w.got[1:]
	return f
}

func (w *wsClient) expectEcho(seq uint64, payload string) {
	w.t.Helper()
	f := w.readFrame()
	if f.Header.Kind != wire.KindResponse || f.Header.RequestSeq != seq || string(f.Payload) != payload {
		w.t.Fatalf("ws echo %d: %s seq %d %q", seq, kindName(f.Header.Kind), f.Header.RequestSeq, f.Payload)
	}
}

func TestWebSocket_Echo(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("ws://127.0.0.1:0/stream")
	})
	url := th.endpoint(t, "ws")
	w := dialWS(t, url, nil)
	evs := th.rec.waitFor(t, waitLong, "connect", func(evs []event) bool { return count(evs, evConnect, 0) == 1 })
	rid := evs[0].rid
	if evs[0].peer.Transport() != "ws" {
		t.Errorf("peer transport %q", evs[0].peer.Transport())
	}

	// One frame per message.
	w.writeMsg(request(1, "echo", `{"one":1}`))
	w.expectEcho(1, `{"one":1}`)

	// Two whole frames in one message.
	w.writeMsg(append(request(2, "echo", `{"two":2}`), request(3, "echo", `{"three":3}`)...))
	w.expectEcho(2, `{"two":2}`)
	w.expectEcho(3, `{"three":3}`)

	// One frame split across two messages: the server reassembles the byte stream.
	f := request(4, "echo", `{"split":true}`)
	w.writeMsg(f[:4]) // inside the prefix
	w.writeMsg(f[4:])
	w.expectEcho(4, `{"split":true}`)
	g := request(5, "echo", `{"split":"again"}`)
	w.writeMsg(g[:len(g)-3])
	w.writeMsg(append(g[len(g)-3:], request(6, "echo", `{}`)...)) // tail + a whole frame
	w.expectEcho(5, `{"split":"again"}`)
	w.expectEcho(6, `{}`)

	// Heartbeat and pushes work the same over WebSocket.
	w.writeMsg(control(wire.NameHeartbeatPing))
	if f := w.readFrame(); f.Header.Name != wire.NameHeartbeatPong {
		t.Fatalf("ws pong: %q", f.Header.Name)
	}

	// A normal WebSocket close is a ClientClose.
	mustNotErr(t, w.c.Close(websocket.StatusNormalClosure, "bye"), "ws close")
	evs = th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
	if d := filter(evs, evDisconnect, rid)[0]; d.reason != wire.CloseClientClose {
		t.Errorf("ws disconnect reason %s, want ClientClose", d.reason)
	}
	th.waitMetric(t, mClosed, 1, tr("ws"), reason("client_close"))
	th.waitMetric(t, mOpened, 1, tr("ws"))
	th.waitMetric(t, mActive, 0, tr("ws"))
}

// A bad frame over WebSocket is a protocol error like over TCP.
func TestWebSocket_ProtocolError(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("ws://127.0.0.1:0/")
	})
	w := dialWS(t, th.endpoint(t, "ws"), nil)
	w.writeMsg(testkit.RawFrame(testkit.NewHeader(0xF2, 9, 1, 0).Name("x").Bytes(), nil))
	f := w.readFrame()
	sc, err := wire.DecodeSessionClosing(f.Payload)
	if f.Header.Name != wire.NameSessionClosing || err != nil || sc.Reason != wire.CloseProtocolError {
		t.Fatalf("got %q %+v %v", f.Header.Name, sc, err)
	}
	if _, _, err := w.c.Read(w.ctx); err == nil {
		t.Fatal("ws connection still open after the protocol error")
	}
	th.waitMetric(t, mProtoErr, 1, tr("ws"))
	th.waitMetric(t, mClosed, 1, tr("ws"), reason("protocol_error"))
}

// A path other than the listener's is not upgraded.
func TestWebSocket_WrongPathIsNotASession(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("ws://127.0.0.1:0/stream")
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if c, _, err := websocket.Dial(ctx, "ws://"+th.addr(t, "ws")+"/other", nil); err == nil {
		_ = c.CloseNow()
		t.Fatal("upgrade on a path the node does not serve")
	}
	if evs := th.rec.snapshot(); len(evs) != 0 {
		t.Errorf("callbacks: %s", describe(evs))
	}
	if v := th.metric(t, mOpened); v != 0 {
		t.Errorf("opened = %d", v)
	}
}

func TestTLS_Echo(t *testing.T) {
	p := testPKI(t)
	_, cert, key := tlsFiles(t)
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tls://127.0.0.1:0").Bind("wss://127.0.0.1:0/").TLSServer(cert, key)
	})
	cfg := &tls.Config{RootCAs: certPool(t, p.CACert), ServerName: "127.0.0.1"}
	tc, err := tls.Dial("tcp", th.addr(t, "tls"), cfg)
	mustNotErr(t, err, "tls dial")
	defer tc.Close()
	c := testkit.NewRawConn(tc)
	roundTrip(t, c, 1)
	roundTrip(t, c, 2)
	evs := th.rec.waitFor(t, waitLong, "packets", func(evs []event) bool { return count(evs, evPacket, 0) == 2 })
	if tr := evs[0].peer.Transport(); tr != "tls" {
		t.Errorf("peer transport %q", tr)
	}
	th.waitMetric(t, mOpened, 1, tr("tls"))

	// wss:// on the same node.
	w := dialWS(t, th.endpoint(t, "wss"), &websocket.DialOptions{HTTPClient: &http.Client{
		Transport: &http.Transport{TLSClientConfig: cfg},
	}})
	w.writeMsg(request(3, "echo", `{"wss":1}`))
	w.expectEcho(3, `{"wss":1}`)
	th.waitMetric(t, mOpened, 1, tr("wss"))

	_ = tc.Close()
	th.waitMetric(t, mClosed, 1, tr("tls"), reason("client_close"))
}

// Seed §3.1: with RequireClientCertificate, a client without a valid certificate is
// rejected before a session is built: handshake failure metric, no connect callback.
func TestTLS_RequireClientCertificate(t *testing.T) {
	p := testPKI(t)
	ca, cert, key := tlsFiles(t)
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tls://127.0.0.1:0").TLSServer(cert, key).RequireClientCertificate(ca)
	})
	addr := th.addr(t, "tls")
	roots := certPool(t, p.CACert)

	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err == nil {
		// TLS 1.3: the client learns of the rejection on its first read.
		c := testkit.NewRawConn(tc)
		_ = c.WriteAll(request(1, "echo", `{}`), waitLong)
		if f, err := c.ReadFrame(waitLong); err == nil {
			t.Fatalf("client without certificate got a frame %+v", f.Header)
		}
		_ = tc.Close()
	}
	th.waitMetric(t, mHandshake, 1, tr("tls"))
	th.rec.none(t, waitShort, "a session callback for a rejected client", func(evs []event) bool { return len(evs) > 0 })
	if v := th.metric(t, mOpened); v != 0 {
		t.Errorf("opened = %d for a rejected client", v)
	}

	good, err := tls.X509KeyPair(p.ClientCert, p.ClientKey)
	mustNotErr(t, err, "client key pair")
	tc, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{good}})
	mustNotErr(t, err, "tls dial with certificate")
	defer tc.Close()
	roundTrip(t, testkit.NewRawConn(tc), 1)
	th.rec.waitFor(t, waitLong, "connect", func(evs []event) bool { return count(evs, evConnect, 0) == 1 })
}
