package connector_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// waitTimeout bounds every wait in these tests; nothing should take close to it.
const waitTimeout = 5 * time.Second

// frame is one decoded frame as the fake server saw it.
type frame struct {
	h       wire.Header
	payload []byte
}

// fakeServer is a minimal STREAM server: it accepts connections and hands every
// decoded frame either to onFrame (automatic behaviour, such as echo) or to the
// connection's frame channel for the test to inspect.
type fakeServer struct {
	t        testing.TB
	endpoint string
	ln       net.Listener     // tcp and tls
	http     *httptest.Server // ws and wss
	conns    chan *serverConn
	onFrame  func(sc *serverConn, f frame) bool // true: consumed

	mu   sync.Mutex
	all  []*serverConn
	wg   sync.WaitGroup
	done bool
}

type serverConn struct {
	fs     *fakeServer
	nc     net.Conn
	wmu    sync.Mutex
	wbuf   []byte
	frames chan frame
	closed chan struct{} // the read loop ended
}

// serverOpt tweaks a fake server before it starts accepting.
type serverOpt func(*fakeServer)

func withOnFrame(f func(sc *serverConn, f frame) bool) serverOpt {
	return func(fs *fakeServer) { fs.onFrame = f }
}

// echo answers every Request with a Response carrying the same seq, codec and payload.
func echo(sc *serverConn, f frame) bool {
	if f.h.Kind != wire.KindRequest {
		return false
	}
	sc.send(wire.Header{Kind: wire.KindResponse, Codec: f.h.Codec, RequestSeq: f.h.RequestSeq}, f.payload)
	return true
}

// autoPong answers heartbeat pings and hides them from the test.
func autoPong(sc *serverConn, f frame) bool {
	if f.h.Kind == wire.KindControl && f.h.Name == wire.NameHeartbeatPing {
		sc.sendControl(wire.NameHeartbeatPong, nil)
		return true
	}
	return false
}

func newTCPServer(t testing.TB, opts ...serverOpt) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startListener(t, "tcp://"+ln.Addr().String(), ln, opts)
}

func newTLSServer(t testing.TB, cert tls.Certificate, opts ...serverOpt) *fakeServer {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	return startListener(t, "tls://"+ln.Addr().String(), ln, opts)
}

func startListener(t testing.TB, endpoint string, ln net.Listener, opts []serverOpt) *fakeServer {
	fs := &fakeServer{t: t, endpoint: endpoint, ln: ln, conns: make(chan *serverConn, 16)}
	for _, o := range opts {
		o(fs)
	}
	fs.wg.Add(1)
	go func() {
		defer fs.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			if sc := fs.adopt(nc); sc != nil {
				fs.wg.Add(1)
				go func() {
					defer fs.wg.Done()
					sc.readLoop()
				}()
			}
		}
	}()
	t.Cleanup(fs.close)
	return fs
}

// newWSServer serves the STREAM wire on a WebSocket endpoint at /stream; with cert it
// is wss.
func newWSServer(t testing.TB, cert *tls.Certificate, opts ...serverOpt) *fakeServer {
	fs := &fakeServer{t: t, conns: make(chan *serverConn, 16)}
	for _, o := range opts {
		o(fs)
	}
	fs.http = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			http.NotFound(w, r)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
		if sc := fs.adopt(nc); sc != nil {
			sc.readLoop() // the handler lives as long as the connection
		}
	}))
	fs.http.Config.ErrorLog = log.New(io.Discard, "", 0) // failed handshakes are expected in some tests
	scheme := "ws://"
	if cert != nil {
		fs.http.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		fs.http.StartTLS()
		scheme = "wss://"
	} else {
		fs.http.Start()
	}
	fs.endpoint = scheme + strings.TrimPrefix(strings.TrimPrefix(fs.http.URL, "http://"), "https://") + "/stream"
	t.Cleanup(fs.close)
	return fs
}

func (fs *fakeServer) adopt(nc net.Conn) *serverConn {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.done {
		_ = nc.Close()
		return nil
	}
	sc := &serverConn{fs: fs, nc: nc, frames: make(chan frame, 1024), closed: make(chan struct{})}
	fs.all = append(fs.all, sc)
	fs.conns <- sc
	return sc
}

// close stops accepting, closes every connection and waits for all server goroutines.
func (fs *fakeServer) close() {
	fs.mu.Lock()
	fs.done = true
	all := fs.all
	fs.mu.Unlock()
	if fs.ln != nil {
		_ = fs.ln.Close()
	}
	for _, sc := range all {
		_ = sc.nc.Close()
	}
	if fs.http != nil {
		fs.http.Close()
	}
	fs.wg.Wait()
}

// accept returns the next accepted connection.
func (fs *fakeServer) accept(t testing.TB) *serverConn {
	t.Helper()
	select {
	case sc := <-fs.conns:
		return sc
	case <-time.After(waitTimeout):
		t.Fatal("fake server: no connection accepted")
		return nil
	}
}

func (sc *serverConn) readLoop() {
	defer close(sc.closed)
	r := wire.NewReader(sc.nc, 64<<10)
	for {
		hl, body, err := r.Next()
		if err != nil {
			return
		}
		h, err := wire.DecodeHeader(body[:hl])
		if err != nil {
			sc.fs.t.Errorf("fake server: client sent an undecodable header: %v", err)
			return
		}
		f := frame{h: h, payload: body[hl:]}
		if sc.fs.onFrame != nil && sc.fs.onFrame(sc, f) {
			continue
		}
		sc.frames <- f
	}
}

// next returns the next frame the test did not let onFrame consume.
func (sc *serverConn) next(t testing.TB) frame {
	t.Helper()
	select {
	case f := <-sc.frames:
		return f
	case <-sc.closed:
		select {
		case f := <-sc.frames:
			return f
		default:
		}
		t.Fatal("fake server: connection closed while waiting for a frame")
	case <-time.After(waitTimeout):
		t.Fatal("fake server: no frame")
	}
	return frame{}
}

// nextKind skips heartbeat controls and returns the next frame of kind k.
func (sc *serverConn) nextKind(t testing.TB, k wire.Kind) frame {
	t.Helper()
	for {
		f := sc.next(t)
		if f.h.Kind == k {
			return f
		}
		if f.h.Kind != wire.KindControl {
			t.Fatalf("fake server: want kind %d, got %+v", k, f.h)
		}
	}
}

// waitClosed waits until the client's side of the connection is gone.
func (sc *serverConn) waitClosed(t testing.TB) {
	t.Helper()
	select {
	case <-sc.closed:
	case <-time.After(waitTimeout):
		t.Fatal("fake server: connection still open")
	}
}

func (sc *serverConn) send(h wire.Header, payload []byte) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	b, err := wire.AppendFrame(sc.wbuf[:0], &h, payload)
	if err != nil {
		sc.fs.t.Errorf("fake server: encode %+v: %v", h, err)
		return
	}
	sc.wbuf = b // reused, so benchmarks count the connector's allocations, not ours
	sc.writeLocked(b)
}

func (sc *serverConn) write(b []byte) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.writeLocked(b)
}

func (sc *serverConn) writeLocked(b []byte) {
	if _, err := sc.nc.Write(b); err != nil && !errors.Is(err, net.ErrClosed) {
		sc.fs.t.Logf("fake server: write: %v", err)
	}
}

func (sc *serverConn) sendControl(name string, payload []byte) {
	sc.send(wire.Header{Kind: wire.KindControl, Codec: wire.CodecRaw, Name: name}, payload)
}

func (sc *serverConn) reply(req frame, payload []byte) {
	sc.send(wire.Header{Kind: wire.KindResponse, Codec: wire.CodecJSON, RequestSeq: req.h.RequestSeq}, payload)
}

func (sc *serverConn) replyError(seq uint64, code, message string) {
	sc.send(wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON, RequestSeq: seq}, codec.EncodeErrorPayload(code, message))
}

func (sc *serverConn) sessionClosing(reason wire.CloseReason, diag string) {
	p, err := wire.AppendSessionClosing(nil, wire.SessionClosing{Reason: reason, Diagnostic: diag})
	if err != nil {
		sc.fs.t.Errorf("fake server: session-closing: %v", err)
		return
	}
	sc.sendControl(wire.NameSessionClosing, p)
}

// selfSignedCert makes a server certificate for 127.0.0.1 and a pool that trusts it.
func selfSignedCert(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	p, err := testkit.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	cert, pool, err := p.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	return cert, pool
}
