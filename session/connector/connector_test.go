package connector_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/compress"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder collects the connector's callbacks.
type recorder struct {
	states chan connector.State
	errs   chan error
}

func (r *recorder) install(o *connector.Options) {
	r.states = make(chan connector.State, 256)
	r.errs = make(chan error, 256)
	o.OnStateChange = func(s connector.State) { r.states <- s }
	o.OnError = func(err error) { r.errs <- err }
}

func (r *recorder) waitState(t testing.TB, want connector.State) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case s := <-r.states:
			if s == want {
				return
			}
		case <-timeout:
			t.Fatalf("state %v never reported", want)
		}
	}
}

func (r *recorder) nextError(t testing.TB) error {
	t.Helper()
	select {
	case err := <-r.errs:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("no OnError event")
		return nil
	}
}

// quiet options: no heartbeat, no reconnect, so the server sees only what a test sends.
func quiet() connector.Options {
	return connector.Options{
		Heartbeat:     connector.HeartbeatOptions{Disabled: true},
		Reconnect:     connector.ReconnectPolicy{Disabled: true},
		NoCallerReads: slowPaths(),
	}
}

// slowPaths reports whether this run turns the caller-reads fast path off (make test
// runs the contract suites a second time with MESHNODE_TEST_FAST_PATHS=off), so both
// read paths meet the same contract. Tests of the fast path itself keep it on.
func slowPaths() bool { return os.Getenv("MESHNODE_TEST_FAST_PATHS") == "off" }

// dial creates and connects a connector; Close runs before the server's cleanup.
func dial(t testing.TB, endpoint string, opts connector.Options) *connector.Connector {
	t.Helper()
	c, err := connector.New(endpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually polls cond until it holds or the wait times out.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitTimeout, what, cond)
}

// async runs f and returns a channel with its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func result(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("call did not return")
		return nil
	}
}

type msg struct {
	N int    `json:"n"`
	S string `json:"s,omitempty"`
}

func TestPingFrameMatchesDigestExample(t *testing.T) {
	// digest §2.14: the heartbeat ping is exactly these bytes on the wire.
	want := append([]byte{0x00, 0x1a, 0, 0, 0, 0, 0xf2, 0x05, 0x00, 0x00, 0x15}, "$zlink.heartbeat.ping"...)
	fs := newTCPServer(t)
	opts := quiet()
	opts.Heartbeat = connector.HeartbeatOptions{Interval: 10 * time.Millisecond, Timeout: time.Second}
	dial(t, fs.endpoint, opts)
	sc := fs.accept(t)
	f := sc.next(t)
	got, err := wire.AppendFrame(nil, &f.h, f.payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("ping frame\n got %x\nwant %x", got, want)
	}
}

func TestRequestRepliesMatchedBySeqOutOfOrder(t *testing.T) {
	fs := newTCPServer(t)
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)

	const n = 3
	results := make([]chan error, n)
	replies := make([]msg, n)
	for i := range n {
		results[i] = make(chan error, 1)
		go func() { results[i] <- c.Request(context.Background(), "calc.square", msg{N: i}, &replies[i]) }()
	}
	reqs := make([]frame, n)
	seen := map[uint64]bool{}
	for i := range n {
		f := sc.nextKind(t, wire.KindRequest)
		h := f.h
		if h.RequestSeq == 0 || h.RequestSeq > n || seen[h.RequestSeq] {
			t.Fatalf("bad request_seq %d (seen %v)", h.RequestSeq, seen)
		}
		seen[h.RequestSeq] = true
		if h.Name != "calc.square" || h.Codec != wire.CodecJSON {
			t.Fatalf("header %+v", h)
		}
		if want := fmt.Sprintf("%x", h.RequestSeq); h.CorrelationID != want {
			t.Fatalf("correlation id %q, want %q", h.CorrelationID, want)
		}
		if h.FlowOrigin != wire.FlowApplication || len(h.FlowID) != wire.FlowIDLen {
			t.Fatalf("flow %q/%d, want a UUIDv7 with origin application", h.FlowID, h.FlowOrigin)
		}
		reqs[i] = f
	}
	// Reply in reverse order; the reply payload identifies the request it answers.
	for i := n - 1; i >= 0; i-- {
		var in msg
		if err := json.Unmarshal(reqs[i].payload, &in); err != nil {
			t.Fatal(err)
		}
		out, _ := json.Marshal(msg{N: in.N * in.N, S: fmt.Sprint("for ", in.N)})
		sc.reply(reqs[i], out)
	}
	for i := range n {
		if err := result(t, results[i]); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if want := (msg{N: i * i, S: fmt.Sprint("for ", i)}); replies[i] != want {
			t.Fatalf("request %d got %+v, want %+v", i, replies[i], want)
		}
	}
}

func TestErrorReplyIsRemoteError(t *testing.T) {
	fs := newTCPServer(t)
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)
	done := async(func() error { return c.Request(context.Background(), "room.join", msg{N: 1}, nil) })
	req := sc.nextKind(t, wire.KindRequest)
	sc.replyError(req.h.RequestSeq, "not_found", "no such room")
	err := result(t, done)
	var re *connector.RemoteError
	if !errors.As(err, &re) || re.Code != "not_found" || re.Message != "no such room" {
		t.Fatalf("got %v, want RemoteError(not_found, no such room)", err)
	}
}

func TestMalformedErrorPayloadKeepsConnection(t *testing.T) {
	fs := newTCPServer(t)
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)
	done := async(func() error { return c.Request(context.Background(), "x", msg{}, nil) })
	req := sc.nextKind(t, wire.KindRequest)
	sc.send(wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON, RequestSeq: req.h.RequestSeq}, []byte(`{"code":1}`))
	if err := result(t, done); !errors.Is(err, connector.ErrFrameDecode) {
		t.Fatalf("got %v, want ErrFrameDecode", err)
	}
	// The connection is still the same one and still works.
	done = async(func() error { return c.Request(context.Background(), "x", msg{N: 2}, nil) })
	req = sc.nextKind(t, wire.KindRequest)
	sc.reply(req, []byte(`{}`))
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	if s := c.State(); s != connector.StateConnected {
		t.Fatalf("state %v", s)
	}
}

func TestStreamLevelErrorsGoToOnError(t *testing.T) {
	fs := newTCPServer(t)
	var rec recorder
	opts := quiet()
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)

	// Error without request_seq.
	sc.send(wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON}, []byte(`{"code":"shutting_down","message":"bye"}`))
	var re *connector.RemoteError
	if err := rec.nextError(t); !errors.As(err, &re) || re.Code != "shutting_down" {
		t.Fatalf("got %v, want a RemoteError event", err)
	}
	// Error and Response for a seq nobody is waiting for.
	sc.replyError(99, "late", "too late")
	if err := rec.nextError(t); !errors.Is(err, connector.ErrUnexpectedReply) || !errors.As(err, &re) || re.Code != "late" {
		t.Fatalf("got %v, want ErrUnexpectedReply wrapping the RemoteError", err)
	}
	sc.send(wire.Header{Kind: wire.KindResponse, Codec: wire.CodecJSON, RequestSeq: 77}, []byte(`{}`))
	if err := rec.nextError(t); !errors.Is(err, connector.ErrUnexpectedReply) {
		t.Fatalf("got %v, want ErrUnexpectedReply", err)
	}
	// Malformed seq-less Error payload: an event too, the connection stays.
	sc.send(wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON}, []byte(`nope`))
	if err := rec.nextError(t); !errors.Is(err, connector.ErrFrameDecode) {
		t.Fatalf("got %v, want ErrFrameDecode", err)
	}
	if s := c.State(); s != connector.StateConnected {
		t.Fatalf("state %v", s)
	}
}

func TestPendingRequestFailsOnDropAndIsNotResent(t *testing.T) {
	fs := newTCPServer(t, withOnFrame(autoPong))
	var rec recorder
	opts := quiet()
	opts.Reconnect = connector.ReconnectPolicy{InitialDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)

	done := async(func() error { return c.Request(context.Background(), "slow", msg{N: 1}, nil) })
	first := sc.nextKind(t, wire.KindRequest)
	_ = sc.nc.Close() // the server goes away without a session-closing

	err := result(t, done)
	var ce *connector.CloseError
	if !errors.Is(err, connector.ErrDisconnected) || !errors.As(err, &ce) || ce.Reason != wire.CloseTransportError {
		t.Fatalf("got %v, want a TransportError disconnect", err)
	}
	rec.waitState(t, connector.StateReconnecting)
	rec.waitState(t, connector.StateConnected)
	if r := c.CloseReason(); r != wire.CloseTransportError {
		t.Fatalf("close reason %v", r)
	}

	// The new session sees the next request first: the failed one was not resent, and
	// the seq was not reused.
	sc2 := fs.accept(t)
	done = async(func() error { return c.Request(context.Background(), "again", msg{N: 2}, nil) })
	f := sc2.nextKind(t, wire.KindRequest)
	if f.h.Name != "again" || f.h.RequestSeq <= first.h.RequestSeq {
		t.Fatalf("first frame after reconnect: %+v (old seq %d)", f.h, first.h.RequestSeq)
	}
	sc2.reply(f, []byte(`{}`))
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestSessionClosingReasonIsExposed(t *testing.T) {
	fs := newTCPServer(t)
	var rec recorder
	opts := quiet()
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)

	done := async(func() error { return c.Request(context.Background(), "q", msg{}, nil) })
	sc.nextKind(t, wire.KindRequest)
	sc.sessionClosing(wire.CloseServerDrain, "node draining")

	err := result(t, done)
	var ce *connector.CloseError
	if !errors.As(err, &ce) || ce.Reason != wire.CloseServerDrain || ce.Diagnostic != "node draining" {
		t.Fatalf("got %v, want ServerDrain with the diagnostic", err)
	}
	rec.waitState(t, connector.StateDisconnected)
	if r := c.CloseReason(); r != wire.CloseServerDrain {
		t.Fatalf("CloseReason %v, want ServerDrain", r)
	}
	sc.waitClosed(t) // the connector closed its side
	if err := c.Send(context.Background(), "x", msg{}); !errors.Is(err, connector.ErrDisconnected) {
		t.Fatalf("send while disconnected: %v", err)
	}
	// A manual Connect from Disconnected opens a brand-new session.
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc2 := fs.accept(t)
	if err := c.Send(context.Background(), "x", msg{}); err != nil {
		t.Fatal(err)
	}
	if f := sc2.next(t); f.h.Name != "x" {
		t.Fatalf("got %+v", f.h)
	}
}

func TestHeartbeatPingAndPong(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		t.Run(fmt.Sprint("disabled=", disabled), func(t *testing.T) {
			fs := newTCPServer(t)
			opts := quiet()
			opts.Heartbeat = connector.HeartbeatOptions{Disabled: disabled, Interval: 10 * time.Millisecond, Timeout: time.Minute}
			dial(t, fs.endpoint, opts)
			sc := fs.accept(t)
			if !disabled {
				f := sc.next(t)
				if f.h.Kind != wire.KindControl || f.h.Name != wire.NameHeartbeatPing || f.h.Codec != wire.CodecRaw ||
					f.h.Flags() != 0 || len(f.payload) != 0 {
					t.Fatalf("want a ping, got %+v %q", f.h, f.payload)
				}
			}
			// The connector answers the server's ping even with its heartbeat off.
			sc.sendControl(wire.NameHeartbeatPing, nil)
			for {
				f := sc.next(t)
				if f.h.Kind == wire.KindControl && f.h.Name == wire.NameHeartbeatPong {
					if f.h.Flags() != 0 || len(f.payload) != 0 {
						t.Fatalf("bad pong %+v", f.h)
					}
					break
				}
				if f.h.Name != wire.NameHeartbeatPing {
					t.Fatalf("unexpected frame %+v", f.h)
				}
			}
		})
	}
}

func TestHeartbeatTimeoutDropsSilentConnection(t *testing.T) {
	fs := newTCPServer(t) // never answers pings
	var rec recorder
	opts := quiet()
	opts.Heartbeat = connector.HeartbeatOptions{Interval: 10 * time.Millisecond, Timeout: 50 * time.Millisecond}
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)

	done := async(func() error { return c.Request(context.Background(), "q", msg{}, nil) })
	rec.waitState(t, connector.StateDisconnected)
	err := result(t, done)
	var ce *connector.CloseError
	if !errors.As(err, &ce) || ce.Reason != wire.CloseHeartbeatTimeout {
		t.Fatalf("got %v, want a HeartbeatTimeout disconnect", err)
	}
	if r := c.CloseReason(); r != wire.CloseHeartbeatTimeout {
		t.Fatalf("CloseReason %v", r)
	}
	sc.waitClosed(t)
}

func TestHeartbeatPongsKeepConnectionAlive(t *testing.T) {
	var pongs atomic.Int32
	fs := newTCPServer(t, withOnFrame(func(sc *serverConn, f frame) bool {
		if autoPong(sc, f) {
			pongs.Add(1)
			return true
		}
		return false
	}))
	var rec recorder
	opts := quiet()
	opts.Heartbeat = connector.HeartbeatOptions{Interval: 5 * time.Millisecond, Timeout: 30 * time.Millisecond}
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	// 20 answered pings span well over the timeout.
	eventually(t, "20 pings answered", func() bool { return pongs.Load() >= 20 })
	if s := c.State(); s != connector.StateConnected {
		t.Fatalf("state %v", s)
	}
	for _, want := range []connector.State{connector.StateConnecting, connector.StateConnected} {
		if s := <-rec.states; s != want {
			t.Fatalf("state %v, want %v", s, want)
		}
	}
	select {
	case s := <-rec.states:
		t.Fatalf("unexpected state change to %v", s)
	default:
	}
}

func TestReconnectAfterDropAndGiveUp(t *testing.T) {
	fs := newTCPServer(t, withOnFrame(echo))
	var rec recorder
	opts := quiet()
	opts.Reconnect = connector.ReconnectPolicy{InitialDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond, MaxAttempts: 2}
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	rec.waitState(t, connector.StateConnected)
	sc := fs.accept(t)
	_ = sc.nc.Close()
	rec.waitState(t, connector.StateReconnecting)
	rec.waitState(t, connector.StateConnected)
	fs.accept(t)

	var out msg
	if err := c.Request(context.Background(), "echo", msg{N: 5}, &out); err != nil || out.N != 5 {
		t.Fatalf("request after reconnect: %v %+v", err, out)
	}

	// Now the server disappears for good: two attempts, then Disconnected, and a
	// Connect that joins the running reconnect gets its failure.
	fs.close()
	rec.waitState(t, connector.StateReconnecting)
	joined := async(func() error { return c.Connect(context.Background()) })
	rec.waitState(t, connector.StateDisconnected)
	if err := result(t, joined); err == nil {
		// Connect may also have started after the loop gave up and failed on its own.
		t.Fatal("Connect succeeded against a closed server")
	}
	if err := c.Request(context.Background(), "echo", msg{}, nil); !errors.Is(err, connector.ErrDisconnected) {
		t.Fatalf("request while disconnected: %v", err)
	}
}

func TestSendBoundCheckedBeforeWrite(t *testing.T) {
	fs := newTCPServer(t)
	opts := quiet()
	opts.MaxSendPayload = 32
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)
	big := bytes.Repeat([]byte{'a'}, 33)
	if err := c.SendRaw(context.Background(), "big", wire.CodecRaw, big); !errors.Is(err, connector.ErrValidation) {
		t.Fatalf("got %v, want ErrValidation", err)
	}
	if _, err := c.RequestRaw(context.Background(), "big", wire.CodecRaw, big); !errors.Is(err, connector.ErrValidation) {
		t.Fatalf("got %v, want ErrValidation", err)
	}
	// A compressible payload over the bound passes once compressed: the bound counts
	// the bytes after compression.
	if err := c.SendRaw(context.Background(), "big", wire.CodecRaw, bytes.Repeat([]byte{'a'}, 1000), connector.WithCompression()); err != nil {
		t.Fatal(err)
	}
	if err := c.SendRaw(context.Background(), "ok", wire.CodecRaw, big[:32]); err != nil {
		t.Fatal(err)
	}
	if f := sc.next(t); f.h.Name != "big" || !f.h.Compressed {
		t.Fatalf("first frame %+v", f.h)
	}
	if f := sc.next(t); f.h.Name != "ok" || len(f.payload) != 32 {
		t.Fatalf("second frame %+v: the oversized ones must not have been written", f.h)
	}
}

func TestReceiveBoundEndsConnection(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		t.Run(fmt.Sprint("compressed=", compressed), func(t *testing.T) {
			fs := newTCPServer(t)
			var rec recorder
			opts := quiet()
			opts.MaxReceivePayload = 100
			rec.install(&opts)
			c := dial(t, fs.endpoint, opts)
			sc := fs.accept(t)
			done := async(func() error {
				_, err := c.RequestRaw(context.Background(), "get", wire.CodecRaw, nil)
				return err
			})
			req := sc.nextKind(t, wire.KindRequest)
			payload := bytes.Repeat([]byte{'z'}, 101)
			h := wire.Header{Kind: wire.KindResponse, Codec: wire.CodecRaw, RequestSeq: req.h.RequestSeq}
			if compressed {
				// Small on the wire, over the bound once decompressed.
				payload = compress.AppendLZ4(nil, payload)
				if len(payload) > 100 {
					t.Fatalf("container of %d bytes does not test the decompressed bound", len(payload))
				}
				h.Compressed = true
			}
			sc.send(h, payload)
			err := result(t, done)
			var ce *connector.CloseError
			if !errors.Is(err, connector.ErrFrameTooLarge) || !errors.As(err, &ce) || ce.Reason != wire.CloseTransportError {
				t.Fatalf("got %v, want FrameTooLarge ending the connection with TransportError", err)
			}
			if err := rec.nextError(t); !errors.Is(err, connector.ErrFrameTooLarge) {
				t.Fatalf("OnError %v", err)
			}
			rec.waitState(t, connector.StateDisconnected)
			sc.waitClosed(t)
		})
	}
}

func TestCompressionBothWays(t *testing.T) {
	fs := newTCPServer(t)
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)
	payload := []byte(strings.Repeat(`{"hello":"world"}`, 50))

	// Client → server: flag 0x04 and a valid container.
	done := async(func() error {
		r, err := c.RequestRaw(context.Background(), "z", wire.CodecJSON, payload, connector.WithCompression())
		if err == nil && !bytes.Equal(r.Payload, payload) {
			err = fmt.Errorf("reply payload %q", r.Payload)
		}
		return err
	})
	req := sc.nextKind(t, wire.KindRequest)
	if !req.h.Compressed || req.h.Flags()&wire.FlagCompressed == 0 {
		t.Fatalf("request not flagged compressed: %+v", req.h)
	}
	got, err := compress.DecodeLZ4(req.payload, 0)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("container does not decode to the payload: %v", err)
	}
	if len(req.payload) >= len(payload) {
		t.Fatalf("container %d bytes for %d", len(req.payload), len(payload))
	}
	// Server → client: a compressed reply is decompressed before the caller sees it.
	sc.send(wire.Header{Kind: wire.KindResponse, Codec: wire.CodecJSON, RequestSeq: req.h.RequestSeq, Compressed: true},
		compress.AppendLZ4(nil, payload))
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}

	// And a compressed push reaches its handler decompressed.
	pushed := make(chan connector.Message, 1)
	c.Handle("news", func(m connector.Message) { pushed <- m })
	sc.send(wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "news", Compressed: true}, compress.AppendLZ4(nil, payload))
	select {
	case m := <-pushed:
		if !bytes.Equal(m.Payload, payload) {
			t.Fatalf("push payload %q", m.Payload)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no push")
	}
}

func TestCompressionNone(t *testing.T) {
	fs := newTCPServer(t)
	var rec recorder
	opts := quiet()
	opts.Compression = connector.CompressionNone
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)

	if err := c.Send(context.Background(), "x", msg{}, connector.WithCompression()); !errors.Is(err, connector.ErrCompression) {
		t.Fatalf("got %v, want ErrCompression", err)
	}
	done := async(func() error { return c.Request(context.Background(), "x", msg{}, nil) })
	req := sc.nextKind(t, wire.KindRequest)
	sc.send(wire.Header{Kind: wire.KindResponse, Codec: wire.CodecJSON, RequestSeq: req.h.RequestSeq, Compressed: true},
		compress.AppendLZ4(nil, []byte(`{}`)))
	if err := result(t, done); !errors.Is(err, connector.ErrDecompression) {
		t.Fatalf("got %v, want ErrDecompression", err)
	}
	c.Handle("p", func(connector.Message) { t.Error("handler got an undecompressable push") })
	sc.send(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "p", Compressed: true}, []byte{0, 1})
	if err := rec.nextError(t); !errors.Is(err, connector.ErrDecompression) {
		t.Fatalf("OnError %v", err)
	}
	// The connection is kept.
	done = async(func() error { return c.Request(context.Background(), "x", msg{}, nil) })
	sc.reply(sc.nextKind(t, wire.KindRequest), []byte(`{}`))
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestContextCancelAndTimeout(t *testing.T) {
	fs := newTCPServer(t)
	var rec recorder
	opts := quiet()
	opts.RequestTimeout = 20 * time.Millisecond
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)

	// Cancel.
	ctx, cancel := context.WithCancel(context.Background())
	done := async(func() error { return c.Request(ctx, "q", msg{N: 1}, nil) })
	cancelled := sc.nextKind(t, wire.KindRequest)
	cancel()
	if err := result(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// Context deadline.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := c.Request(ctx, "q", msg{N: 2}, nil)
	if !errors.Is(err, connector.ErrRequestTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrRequestTimeout and DeadlineExceeded", err)
	}
	sc.nextKind(t, wire.KindRequest)
	// No deadline: RequestTimeout applies.
	err = c.Request(context.Background(), "q", msg{N: 3}, nil)
	if !errors.Is(err, connector.ErrRequestTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrRequestTimeout", err)
	}
	sc.nextKind(t, wire.KindRequest)

	// The late reply to the cancelled request is dropped, not given to the next one.
	var out msg
	done = async(func() error { return c.Request(context.Background(), "q", msg{N: 4}, &out) })
	live := sc.nextKind(t, wire.KindRequest)
	sc.reply(cancelled, []byte(`{"n":-1}`))
	if err := rec.nextError(t); !errors.Is(err, connector.ErrUnexpectedReply) {
		t.Fatalf("late reply event %v", err)
	}
	sc.reply(live, []byte(`{"n":4}`))
	if err := result(t, done); err != nil || out.N != 4 {
		t.Fatalf("got %v %+v", err, out)
	}
}

func TestPushHandlerMetadataAndDecode(t *testing.T) {
	fs := newTCPServer(t)
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)
	got := make(chan connector.Message, 2)
	c.Handle("chat.msg", func(m connector.Message) { got <- m })
	md := wire.Metadata{{Key: "locale", Value: "ko"}}
	// Two frames in one write: the reader must split them.
	a, _ := wire.AppendFrame(nil, &wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "chat.msg", Metadata: md}, []byte(`{"n":1}`))
	b, _ := wire.AppendFrame(nil, &wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "unhandled"}, []byte(`{}`))
	d, _ := wire.AppendFrame(nil, &wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "chat.msg"}, []byte(`{"n":2}`))
	sc.write(append(append(a, b...), d...))
	for want := 1; want <= 2; want++ {
		select {
		case m := <-got:
			var v msg
			if err := m.Decode(&v); err != nil || v.N != want {
				t.Fatalf("push %d: %v %+v", want, err, v)
			}
			if v, _ := m.Metadata.Get("locale"); want == 1 && v != "ko" {
				t.Fatalf("metadata %v", m.Metadata)
			}
		case <-time.After(waitTimeout):
			t.Fatal("no push")
		}
	}
}

func TestOutboundHeaderShape(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprint("diagnosticsOff=", off), func(t *testing.T) {
			fs := newTCPServer(t)
			opts := quiet()
			opts.DiagnosticsOff = off
			c := dial(t, fs.endpoint, opts)
			sc := fs.accept(t)
			err := c.Send(context.Background(), "chat.send", msg{S: "hi"},
				connector.WithMetadata("locale", "en"), connector.WithMetadata("locale", "ko"))
			if err != nil {
				t.Fatal(err)
			}
			f := sc.next(t)
			if f.h.Kind != wire.KindSend || f.h.RequestSeq != 0 || f.h.CorrelationID != "" {
				t.Fatalf("send header %+v: no seq, never a correlation id", f.h)
			}
			if len(f.h.Metadata) != 1 || f.h.Metadata[0] != (wire.MetadataEntry{Key: "locale", Value: "ko"}) {
				t.Fatalf("metadata %v, want the last value only", f.h.Metadata)
			}
			if hasFlow := f.h.Flags()&wire.FlagFlow != 0; hasFlow == off {
				t.Fatalf("flow flag %v with diagnostics off=%v", hasFlow, off)
			}
			done := async(func() error {
				_, err := c.RequestRaw(context.Background(), "r", wire.CodecMsgPack, []byte{0x80})
				return err
			})
			f = sc.nextKind(t, wire.KindRequest)
			if f.h.CorrelationID == "" || f.h.Codec != wire.CodecMsgPack {
				t.Fatalf("request header %+v: always a correlation id, codec as given", f.h)
			}
			if hasFlow := f.h.Flags()&wire.FlagFlow != 0; hasFlow == off {
				t.Fatalf("flow flag %v with diagnostics off=%v", hasFlow, off)
			}
			sc.send(wire.Header{Kind: wire.KindResponse, Codec: wire.CodecRaw, RequestSeq: f.h.RequestSeq}, nil)
			if err := result(t, done); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestValidationErrors(t *testing.T) {
	fs := newTCPServer(t)
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)
	ctx := context.Background()
	cases := map[string]error{
		"empty name":     c.Send(ctx, "", msg{}),
		"reserved name":  c.Send(ctx, "$zlink.heartbeat.ping", msg{}),
		"long name":      c.Send(ctx, strings.Repeat("n", 256), msg{}),
		"empty key":      c.Send(ctx, "x", msg{}, connector.WithMetadata("", "v")),
		"big metadata":   c.Send(ctx, "x", msg{}, connector.WithMetadata("k", strings.Repeat("v", 1100))),
		"unmarshallable": c.Send(ctx, "x", make(chan int)),
		"request name":   c.Request(ctx, "", msg{}, nil),
	}
	for what, err := range cases {
		if !errors.Is(err, connector.ErrValidation) {
			t.Errorf("%s: got %v, want ErrValidation", what, err)
		}
	}
	if err := c.Send(ctx, "fine", msg{}); err != nil {
		t.Fatal(err)
	}
	if f := sc.next(t); f.h.Name != "fine" {
		t.Fatalf("an invalid call reached the wire: %+v", f.h)
	}
}

func TestConfigurationErrors(t *testing.T) {
	tlsCfg := &tls.Config{}
	cases := []struct {
		endpoint string
		opts     connector.Options
	}{
		{"http://127.0.0.1:1", connector.Options{}},
		{"udp://127.0.0.1:1", connector.Options{}},
		{"127.0.0.1:1", connector.Options{}},
		{"tcp://127.0.0.1", connector.Options{}},
		{"tcp://127.0.0.1:0", connector.Options{}},
		{"tcp://127.0.0.1:99999", connector.Options{}},
		{"tcp://:80", connector.Options{}},
		{"tcp://127.0.0.1:80/path", connector.Options{}},
		{"tcp://127.0.0.1:80", connector.Options{TLS: tlsCfg}},
		{"ws://127.0.0.1:80/s", connector.Options{TLS: tlsCfg}},
		{"tcp://127.0.0.1:80", connector.Options{MaxSendPayload: -1}},
		{"tcp://127.0.0.1:80", connector.Options{ConnectTimeout: -time.Second}},
		{"tcp://127.0.0.1:80", connector.Options{Codec: 9}},
		{"tcp://127.0.0.1:80", connector.Options{Compression: 7}},
		{"tcp://127.0.0.1:80", connector.Options{Reconnect: connector.ReconnectPolicy{Multiplier: 0.5}}},
		{"tcp://127.0.0.1:80", connector.Options{Reconnect: connector.ReconnectPolicy{InitialDelay: time.Second, MaxDelay: time.Millisecond}}},
	}
	for _, tc := range cases {
		if _, err := connector.New(tc.endpoint, tc.opts); !errors.Is(err, connector.ErrConfiguration) {
			t.Errorf("New(%q, %+v): got %v, want ErrConfiguration", tc.endpoint, tc.opts, err)
		}
	}
	// Valid shapes, including tls:// without a TLS config (system roots).
	for _, ep := range []string{"tcp://127.0.0.1:1", "tls://localhost:443", "ws://127.0.0.1:8080", "wss://example.com/stream", "ws://[::1]:80/a/b"} {
		c, err := connector.New(ep, connector.Options{})
		if err != nil {
			t.Errorf("New(%q): %v", ep, err)
			continue
		}
		if s := c.State(); s != connector.StateCreated {
			t.Errorf("state %v", s)
		}
		_ = c.Close()
	}
}

func TestWebSocketRoundTrip(t *testing.T) {
	fs := newWSServer(t, nil, withOnFrame(echo))
	testRoundTrip(t, fs, quiet())
}

func TestTLSRoundTrip(t *testing.T) {
	cert, pool := selfSignedCert(t)
	fs := newTLSServer(t, cert, withOnFrame(echo))
	opts := quiet()
	opts.TLS = &tls.Config{RootCAs: pool}
	testRoundTrip(t, fs, opts)

	// Without trusting the certificate the connect fails validation.
	c, err := connector.New(fs.endpoint, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Connect(context.Background()); !errors.Is(err, connector.ErrTLSValidation) {
		t.Fatalf("got %v, want ErrTLSValidation", err)
	}
	if s := c.State(); s != connector.StateDisconnected {
		t.Fatalf("state %v", s)
	}
}

func TestWSSRoundTrip(t *testing.T) {
	cert, pool := selfSignedCert(t)
	fs := newWSServer(t, &cert, withOnFrame(echo))
	opts := quiet()
	opts.TLS = &tls.Config{RootCAs: pool}
	testRoundTrip(t, fs, opts)

	c, err := connector.New(fs.endpoint, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Connect(context.Background()); !errors.Is(err, connector.ErrTLSValidation) {
		t.Fatalf("got %v, want ErrTLSValidation", err)
	}
}

func TestConnectTimeout(t *testing.T) {
	// A TCP listener that never answers the TLS or WebSocket handshake: the kernel
	// completes the TCP connect, nothing else ever happens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, ep := range []string{"tls://" + ln.Addr().String(), "ws://" + ln.Addr().String() + "/s"} {
		opts := quiet()
		opts.ConnectTimeout = 30 * time.Millisecond
		c, err := connector.New(ep, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Connect(context.Background()); !errors.Is(err, connector.ErrConnectTimeout) {
			t.Errorf("%s: got %v, want ErrConnectTimeout", ep, err)
		}
		if s := c.State(); s != connector.StateDisconnected {
			t.Errorf("%s: state %v", ep, s)
		}
		_ = c.Close()
	}
}

// testRoundTrip makes typed and raw requests (one of them compressed), and receives a
// push in the same server message as a reply.
func testRoundTrip(t *testing.T, fs *fakeServer, opts connector.Options) {
	t.Helper()
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)
	var out msg
	if err := c.Request(context.Background(), "echo", msg{N: 7, S: "seven"}, &out); err != nil || out != (msg{N: 7, S: "seven"}) {
		t.Fatalf("typed request: %v %+v", err, out)
	}
	big := bytes.Repeat([]byte("abc"), 1000)
	r, err := c.RequestRaw(context.Background(), "echo", wire.CodecRaw, big, connector.WithCompression())
	if err != nil {
		t.Fatal(err)
	}
	// The echo returns the container with flag 0x04 dropped: compare containers.
	if want := compress.AppendLZ4(nil, big); !bytes.Equal(r.Payload, want) {
		t.Fatalf("raw reply of %d bytes", len(r.Payload))
	}
	pushed := make(chan connector.Message, 1)
	c.Handle("tick", func(m connector.Message) { pushed <- m })
	a, _ := wire.AppendFrame(nil, &wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "tick"}, []byte(`{"n":1}`))
	b, _ := wire.AppendFrame(nil, &wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "tick"}, []byte(`{"n":2}`))
	sc.write(append(a, b...)) // one WebSocket message, two whole frames
	for want := 1; want <= 2; want++ {
		select {
		case m := <-pushed:
			var v msg
			if err := m.Decode(&v); err != nil || v.N != want {
				t.Fatalf("push: %v %+v", err, v)
			}
		case <-time.After(waitTimeout):
			t.Fatal("no push")
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sc.waitClosed(t)
}

func TestLifecycle(t *testing.T) {
	fs := newTCPServer(t)
	var rec recorder
	opts := quiet()
	rec.install(&opts)
	c, err := connector.New(fs.endpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Send(ctx, "x", msg{}); !errors.Is(err, connector.ErrDisconnected) {
		t.Fatalf("send before connect: %v", err)
	}
	// Concurrent Connect calls share one attempt.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := c.Connect(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	sc := fs.accept(t)
	select {
	case sc := <-fs.conns:
		t.Fatalf("second connection %v", sc.nc.RemoteAddr())
	default:
	}
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []connector.State{connector.StateConnecting, connector.StateConnected} {
		if s := <-rec.states; s != want {
			t.Fatalf("state %v, want %v", s, want)
		}
	}

	// Close fails pending requests with ErrClosed and is terminal.
	done := async(func() error { return c.Request(ctx, "never", msg{}, nil) })
	sc.nextKind(t, wire.KindRequest)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := result(t, done); !errors.Is(err, connector.ErrClosed) || !errors.Is(err, connector.ErrDisconnected) {
		t.Fatalf("pending after Close: %v", err)
	}
	if s := <-rec.states; s != connector.StateClosed {
		t.Fatalf("state %v, want Closed", s)
	}
	if c.CloseReason() != wire.CloseClientClose || c.State() != connector.StateClosed {
		t.Fatalf("after Close: %v %v", c.CloseReason(), c.State())
	}
	if err := c.Connect(ctx); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("Connect after Close: %v", err)
	}
	if err := c.Send(ctx, "x", msg{}); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConnectFailure(t *testing.T) {
	fs := newTCPServer(t)
	endpoint := fs.endpoint
	fs.close() // nothing listens now
	c, err := connector.New(endpoint, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Connect(context.Background()); !errors.Is(err, connector.ErrDisconnected) {
		t.Fatalf("got %v, want ErrDisconnected", err)
	}
	if c.State() != connector.StateDisconnected || c.CloseReason() != wire.CloseTransportError {
		t.Fatalf("after failed connect: %v %v", c.State(), c.CloseReason())
	}
}

func TestHandlerPanicIsReported(t *testing.T) {
	fs := newTCPServer(t)
	var rec recorder
	opts := quiet()
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)
	c.Handle("boom", func(connector.Message) { panic("kaboom") })
	sc.send(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "boom"}, nil)
	if err := rec.nextError(t); !errors.Is(err, connector.ErrUserCallback) {
		t.Fatalf("got %v", err)
	}
}

func TestCloseFromHandler(t *testing.T) {
	fs := newTCPServer(t)
	c := dial(t, fs.endpoint, quiet())
	sc := fs.accept(t)
	closed := make(chan error, 1)
	c.Handle("bye", func(connector.Message) { closed <- c.Close() })
	sc.send(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "bye"}, nil)
	if err := result(t, closed); err != nil {
		t.Fatal(err)
	}
	sc.waitClosed(t)
}

func TestCorruptFrameEndsConnection(t *testing.T) {
	fs := newTCPServer(t)
	var rec recorder
	opts := quiet()
	rec.install(&opts)
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)
	done := async(func() error { return c.Request(context.Background(), "q", msg{}, nil) })
	sc.nextKind(t, wire.KindRequest)
	sc.write([]byte{0, 5, 0, 0, 0, 0, 0xf1, 1, 1, 0, 1}) // bad marker
	err := result(t, done)
	var ce *connector.CloseError
	if !errors.Is(err, connector.ErrFrameDecode) || !errors.As(err, &ce) || ce.Reason != wire.CloseTransportError {
		t.Fatalf("got %v", err)
	}
	if err := rec.nextError(t); !errors.Is(err, connector.ErrFrameDecode) {
		t.Fatalf("OnError %v", err)
	}
	rec.waitState(t, connector.StateDisconnected)
}

func TestConcurrentRequests(t *testing.T) {
	fs := newTCPServer(t, withOnFrame(echo))
	c := dial(t, fs.endpoint, quiet())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				var out msg
				in := msg{N: g*1000 + i}
				if err := c.Request(context.Background(), "echo", in, &out); err != nil || out != in {
					t.Errorf("request %+v: %v %+v", in, err, out)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkRequest(b *testing.B) {
	fs := newTCPServer(b, withOnFrame(echo))
	c := dial(b, fs.endpoint, quiet())
	ctx := context.Background()
	in := msg{N: 42, S: "hello"}
	b.ReportAllocs()
	for b.Loop() {
		var out msg
		if err := c.Request(ctx, "echo", in, &out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRequestRaw(b *testing.B) {
	fs := newTCPServer(b, withOnFrame(echo))
	c := dial(b, fs.endpoint, quiet())
	ctx := context.Background()
	payload := []byte(`{"n":42,"s":"hello"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.RequestRaw(ctx, "echo", wire.CodecJSON, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRequestParallel(b *testing.B) {
	fs := newTCPServer(b, withOnFrame(echo))
	c := dial(b, fs.endpoint, quiet())
	ctx := context.Background()
	payload := []byte(`{"n":42,"s":"hello"}`)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.RequestRaw(ctx, "echo", wire.CodecJSON, payload); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// WatchState, registered on a connector after it was made (by a library handed the
// connector), is told every transition in order as OnStateChange is, and nothing after
// its stop.
func TestWatchStateSeesReconnectAndClose(t *testing.T) {
	fs := newTCPServer(t, withOnFrame(echo))
	opts := quiet()
	opts.Reconnect = connector.ReconnectPolicy{InitialDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond}
	c := dial(t, fs.endpoint, opts)
	sc := fs.accept(t)
	seen := make(chan connector.State, 16)
	stop := c.WatchState(func(s connector.State) { seen <- s })
	other := make(chan connector.State, 16)
	stopOther := c.WatchState(func(s connector.State) { other <- s })
	stopOther()
	_ = sc.nc.Close()
	next := func() connector.State {
		select {
		case s := <-seen:
			return s
		case <-time.After(waitTimeout):
			t.Fatal("no state transition reported")
			return 0
		}
	}
	if s := next(); s != connector.StateReconnecting {
		t.Fatalf("first transition %v, want reconnecting", s)
	}
	if s := next(); s != connector.StateConnected {
		t.Fatalf("then %v, want connected", s)
	}
	fs.accept(t)
	_ = c.Close()
	if s := next(); s != connector.StateClosed {
		t.Fatalf("then %v, want closed", s)
	}
	stop()
	if len(other) != 0 {
		t.Fatalf("a stopped watcher was told %v", <-other)
	}
}
