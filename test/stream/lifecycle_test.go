package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/compress"
	"github.com/meshnode/meshnode/session/wire"
)

// ---------------------------------------------------------------- heartbeat, idle

// Digest §2.10 / §4.4: a $zlink.heartbeat.ping control frame gets a pong; it is not a
// packet for the session.
func TestHeartbeat_PingGetsPong(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	// The exact bytes of digest §2.14.
	ping := append([]byte{0x00, 0x1a, 0, 0, 0, 0, 0xf2, 0x05, 0x00, 0x00, 0x15}, wire.NameHeartbeatPing...)
	for range 3 {
		write(t, c, ping)
		f := readFrame(t, c)
		want := testkit.RawFrame(append([]byte{0xf2, 0x05, 0x00, 0x00, 0x15}, wire.NameHeartbeatPong...), nil)
		if got := testkit.RawFrame(f.HeaderBytes, f.Payload); !bytes.Equal(got, want) {
			t.Fatalf("pong bytes %x, want %x", got, want)
		}
	}
	// A pong from the client is liveness only: no reply, no callback.
	write(t, c, control(wire.NameHeartbeatPong))
	roundTrip(t, c, 1)
	if n := count(th.rec.snapshot(), evPacket, rid); n != 1 {
		t.Errorf("handler saw %d packets; heartbeats must not reach it", n)
	}
}

// A node with IdleTimeout closes a silent client with session-closing IdleTimeout; a
// client that keeps sending (even only pings) stays.
func TestIdleTimeout_ClosesSilentClient(t *testing.T) {
	const idle = 200 * time.Millisecond
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").IdleTimeout(idle)
	})
	busy, busyRID := th.connect(t)
	silent, silentRID := th.connect(t)
	start := time.Now()

	// The busy client pings every idle/2 for 3 idle periods and is never closed.
	tick := time.NewTicker(idle / 2)
	defer tick.Stop()
	for i := 0; time.Since(start) < 3*idle; i++ {
		write(t, busy, control(wire.NameHeartbeatPing))
		if f := readFrame(t, busy); f.Header.Name != wire.NameHeartbeatPong {
			t.Fatalf("busy client got %s %q", kindName(f.Header.Kind), f.Header.Name)
		}
		<-tick.C
	}
	roundTrip(t, busy, 1)

	// The silent one was closed meanwhile, told why.
	expectSessionClosing(t, silent, wire.CloseIdleTimeout)
	if el := time.Since(start); el < idle {
		t.Errorf("closed after %v, before the idle timeout %v", el, idle)
	}
	evs := th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, silentRID) == 1 })
	if d := filter(evs, evDisconnect, silentRID)[0]; d.reason != wire.CloseIdleTimeout {
		t.Errorf("disconnect reason %s, want IdleTimeout", d.reason)
	}
	if n := count(evs, evDisconnect, busyRID); n != 0 {
		t.Error("the busy client was closed")
	}
	th.waitMetric(t, mClosed, 1, tr("tcp"), reason("idle_timeout"))

	// The busy one is closed too once it goes quiet.
	expectSessionClosing(t, busy, wire.CloseIdleTimeout)
}

// ---------------------------------------------------------------- shutdown

// Host.Shutdown sends every session session-closing ServerDrain, then closes; every
// disconnect callback ran (reason ServerDrain) before Shutdown returns, and it is the
// last callback of its session even while a client keeps sending.
func TestShutdown_DrainsEverySession(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Bind("ws://127.0.0.1:0/")
	})
	quiet1, rid1 := th.connect(t)
	quiet2, rid2 := th.connect(t)
	blaster, ridB := th.connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, th.endpoint(t, "ws"), nil)
	mustNotErr(t, err, "ws dial")
	defer ws.CloseNow()
	evs := th.rec.waitFor(t, waitLong, "ws connect", func(evs []event) bool { return count(evs, evConnect, 0) == 4 })
	ridW := filter(evs, evConnect, 0)[3].rid
	mustNotErr(t, ws.Write(ctx, websocket.MessageBinary, send("hello", `{}`)), "ws write")
	for _, c := range []*testkit.RawConn{quiet1, quiet2, blaster} {
		write(t, c, send("hello", `{}`))
	}
	th.rec.waitFor(t, waitLong, "hello from all", func(evs []event) bool { return len(packetsNamed(evs, "hello")) == 4 })

	// The blaster keeps sending until the server closes it.
	blastDone := make(chan struct{})
	go func() {
		defer close(blastDone)
		f := send("blast", `{"x":1}`)
		for {
			if err := blaster.WriteAll(f, waitLong); err != nil {
				return
			}
		}
	}()
	th.rec.waitFor(t, waitLong, "blast packets", func(evs []event) bool { return len(packetsNamed(evs, "blast")) > 10 })

	shutdownErr := make(chan error, 1)
	go func() { shutdownErr <- th.h.Shutdown(context.Background()) }()

	expectSessionClosing(t, quiet1, wire.CloseServerDrain)
	expectSessionClosing(t, quiet2, wire.CloseServerDrain)
	// WebSocket: the session-closing frame arrives as (part of) a binary message.
	var buf []byte
	var wsFrames []testkit.Frame
	for len(wsFrames) == 0 {
		typ, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("ws read before session-closing: %v", err)
		}
		if typ != websocket.MessageBinary {
			t.Fatalf("ws message type %v", typ)
		}
		var fs []testkit.Frame
		fs, buf, err = testkit.SplitFrames(append(buf, msg...))
		mustNotErr(t, err, "ws frames")
		wsFrames = append(wsFrames, fs...)
	}
	if f := wsFrames[0]; f.Header.Name != wire.NameSessionClosing {
		t.Fatalf("ws got %s %q, want session-closing", kindName(f.Header.Kind), f.Header.Name)
	} else if sc, err := wire.DecodeSessionClosing(f.Payload); err != nil || sc.Reason != wire.CloseServerDrain {
		t.Fatalf("ws session-closing %+v %v", sc, err)
	}
	select {
	case err := <-shutdownErr:
		mustNotErr(t, err, "Shutdown")
	case <-time.After(waitLong):
		t.Fatal("Shutdown did not return")
	}
	<-blastDone

	// Every disconnect ran before Shutdown returned, exactly once, last, ServerDrain.
	evs = th.rec.snapshot()
	for _, rid := range []session.RoutingID{rid1, rid2, ridB, ridW} {
		var mine []event
		for _, e := range evs {
			if e.rid == rid {
				mine = append(mine, e)
			}
		}
		if len(mine) < 3 || mine[0].kind != evConnect {
			t.Errorf("rid %d: %s", rid, describe(mine))
			continue
		}
		last := mine[len(mine)-1]
		if last.kind != evDisconnect || last.reason != wire.CloseServerDrain {
			t.Errorf("rid %d: last callback %s (%s), want disconnect(ServerDrain): %s", rid, last.kind, last.reason, describe(mine))
		}
		if n := count(mine, evDisconnect, rid); n != 1 {
			t.Errorf("rid %d: %d disconnect callbacks", rid, n)
		}
		// Push after the session closed.
		if err := last.peer.Send(context.Background(), "late", wire.CodecJSON, []byte(`{}`)); !errors.Is(err, session.ErrSessionClosed) {
			t.Errorf("rid %d: Send after shutdown = %v, want ErrSessionClosed", rid, err)
		}
	}
	th.rec.none(t, waitShort, "a callback after Shutdown returned", func(now []event) bool { return len(now) != len(evs) })
	if th.rec.overlap.Load() {
		t.Error("two callbacks of one session ran at the same time")
	}
	rm := th.collect(t)
	if v := metricValue(rm, mClosed, reason("server_shutdown")); v != 4 {
		t.Errorf("closed{server_shutdown} = %d, want 4", v)
	}
	if v := metricValue(rm, mActive); v != 0 {
		t.Errorf("active = %d after shutdown", v)
	}
	// Nothing accepts any more.
	if c, err := net.DialTimeout("tcp", th.addr(t, "tcp"), time.Second); err == nil {
		c.Close()
		t.Error("tcp listener still accepts after Shutdown")
	}
}

// Shutdown(ctx) must return once ctx ends even when a session callback is still
// running; a callback that waits on its ctx must be let go.
func TestShutdown_ContextExpiryReturnsWhileCallbackBlocked(t *testing.T) {
	rec := newRecorder()
	unstick := make(chan struct{})
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		select {
		case <-ctx.Done(): // the well-behaved way to wait
		case <-unstick: // test fallback, so a failing run does not hang
		}
		return nil
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	write(t, c, send("stuck", `{}`))
	rec.waitFor(t, waitLong, "stuck packet", func(evs []event) bool { return count(evs, evPacket, rid) == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- th.h.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("Shutdown(ctx) still blocked 2 s after its 200 ms deadline: the callback's ctx was never cancelled")
		close(unstick)
		<-done
	}
	th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
}

// Close closes everything at once and waits for the disconnect callbacks; a callback
// waiting on its ctx must be let go, or Close never returns.
func TestClose_CancelsCallbackContext(t *testing.T) {
	rec := newRecorder()
	unstick := make(chan struct{})
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		select {
		case <-ctx.Done():
		case <-unstick:
		}
		return nil
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	write(t, c, send("stuck", `{}`))
	rec.waitFor(t, waitLong, "stuck packet", func(evs []event) bool { return count(evs, evPacket, rid) == 1 })
	done := make(chan error, 1)
	go func() { done <- th.h.Close() }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Error("Close still blocked after 2 s: the callback's ctx is not cancelled by Close")
		close(unstick)
		<-done
	}
	// Close sends no session-closing.
	expectEOF(t, c)
}

// ---------------------------------------------------------------- handler failures

// Seed §7: an application handler failure is not a transport error. A failed Request
// gets an Error reply {"code","message"} (code internal_failure, or the CodedError's),
// the session error callback is not run, and the connection stays.
func TestHandlerFailure_ErrorReplyNotTransportError(t *testing.T) {
	rec := newRecorder()
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		switch p.Name {
		case "err", "send-err":
			return errors.New("boom: secret internals")
		case "coded":
			return session.Errorf(fault.Rejected.Code(), "nope %d", 1)
		case "wrapped-coded":
			return fmt.Errorf("layer: %w", &session.CodedError{Code: fault.Unavailable.Code(), Message: "down"})
		case "panic", "send-panic":
			panic("kaboom")
		case "panic-error":
			panic(errors.New("kaboom error"))
		case "reply-then-err":
			_ = p.Reply(wire.CodecJSON, []byte(`{"ok":1}`))
			return errors.New("after reply")
		}
		return echo(ctx, p)
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	cases := []struct {
		name, code, msg string
	}{
		{"err", fault.InternalFailure.Code(), ""},
		{"coded", fault.Rejected.Code(), "nope 1"},
		{"wrapped-coded", fault.Unavailable.Code(), "down"},
		{"panic", fault.InternalFailure.Code(), ""},
		{"panic-error", fault.InternalFailure.Code(), ""},
	}
	seq := uint64(100)
	for _, tc := range cases {
		seq++
		write(t, c, testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecMsgPack, RequestSeq: seq, Name: tc.name,
			CorrelationID: "c" + tc.name}, []byte{0x80}))
		f := readFrame(t, c)
		if f.Header.Kind != wire.KindError || f.Header.RequestSeq != seq || f.Header.Codec != wire.CodecJSON || f.Header.Name != "" {
			t.Errorf("%s: reply %s seq %d codec %d name %q", tc.name, kindName(f.Header.Kind), f.Header.RequestSeq, f.Header.Codec, f.Header.Name)
		}
		if f.Header.CorrelationID != "c"+tc.name {
			t.Errorf("%s: correlation %q not preserved", tc.name, f.Header.CorrelationID)
		}
		ep, err := codec.DecodeErrorPayload(f.Payload)
		if err != nil {
			t.Errorf("%s: error payload %q: %v", tc.name, f.Payload, err)
			continue
		}
		if ep.Code != tc.code || (tc.msg != "" && ep.Message != tc.msg) || ep.Message == "" {
			t.Errorf("%s: error payload %+v, want code %q message %q", tc.name, ep, tc.code, tc.msg)
		}
		if bytes.Contains(f.Payload, []byte("secret")) || bytes.Contains(f.Payload, []byte("kaboom")) {
			t.Errorf("%s: error payload leaks the internal error: %s", tc.name, f.Payload)
		}
	}
	// A reply already made wins; the later error sends nothing more.
	seq++
	write(t, c, request(seq, "reply-then-err", `{}`))
	if f := readFrame(t, c); f.Header.Kind != wire.KindResponse || f.Header.RequestSeq != seq {
		t.Errorf("reply-then-err: %s seq %d", kindName(f.Header.Kind), f.Header.RequestSeq)
	}
	// Failing Sends get no reply at all.
	write(t, c, send("send-err", `{}`))
	write(t, c, send("send-panic", `{}`))
	roundTrip(t, c, seq+1) // the next frame is the echo: nothing was sent in between

	evs := th.rec.snapshot()
	if n := count(evs, evTransport, 0); n != 0 {
		t.Errorf("handler failures reached the transport error callback %d times", n)
	}
	if n := count(evs, evDisconnect, rid); n != 0 {
		t.Error("a handler failure closed the connection")
	}
	if got := th.metric(t, mProtoErr); got != 0 {
		t.Errorf("protocol errors %d", got)
	}
}

// Digest §3 (.NET, informative): the reply token is one-shot; a reply to a Send fails.
func TestReply_OneShotToken(t *testing.T) {
	rec := newRecorder()
	results := make(chan error, 8)
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		if p.Kind == wire.KindSend {
			results <- p.Reply(wire.CodecJSON, []byte(`{}`))
			results <- p.ReplyError(fault.Rejected.Code(), "x")
			return nil
		}
		results <- p.Reply(wire.CodecJSON, []byte(`{"first":true}`))
		results <- p.Reply(wire.CodecJSON, []byte(`{"second":true}`))
		results <- p.ReplyError(fault.Rejected.Code(), "third")
		results <- p.ReplyValue(map[string]int{"fourth": 4})
		return nil
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, _ := th.connect(t)
	write(t, c, send("s", `{}`))
	for _, want := range []error{session.ErrNotRequest, session.ErrNotRequest} {
		if err := <-results; !errors.Is(err, want) {
			t.Errorf("reply to a Send: %v, want %v", err, want)
		}
	}
	write(t, c, request(5, "r", `{}`))
	for i, want := range []error{nil, session.ErrAlreadyReplied, session.ErrAlreadyReplied, session.ErrAlreadyReplied} {
		if err := <-results; !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("reply %d: %v, want %v", i+1, err, want)
		}
	}
	if f := readFrame(t, c); string(f.Payload) != `{"first":true}` {
		t.Errorf("reply %q", f.Payload)
	}
	if f, err := c.ReadFrame(waitShort); err == nil {
		t.Errorf("a second reply went out: %s %q", kindName(f.Header.Kind), f.Payload)
	}
}

// ---------------------------------------------------------------- push

// Peer.Send from any goroutine reaches the client as a Send frame; after the session
// closed it returns ErrSessionClosed.
func TestPush_FromAnotherGoroutine(t *testing.T) {
	rec := newRecorder()
	peers := make(chan *session.Peer, 1)
	rec.onConnect = func(ctx context.Context, peer *session.Peer) { peers <- peer }
	th := startHost(t, rec, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").MaxMessageSize(1024) // inbound only: pushes are not capped
	})
	c, rid := th.connect(t)
	peer := <-peers
	if peer.RoutingID() != rid || peer.Node() != "gw" || peer.Transport() != "tcp" {
		t.Errorf("peer rid %d node %q transport %q", peer.RoutingID(), peer.Node(), peer.Transport())
	}
	ctx := context.Background()

	mustNotErr(t, peer.Send(ctx, "news", wire.CodecJSON, []byte(`{"n":1}`)), "Send")
	f := readFrame(t, c)
	if f.Header.Kind != wire.KindSend || f.Header.Name != "news" || f.Header.RequestSeq != 0 || string(f.Payload) != `{"n":1}` {
		t.Fatalf("push: %s %+v %q", kindName(f.Header.Kind), f.Header, f.Payload)
	}
	mustNotErr(t, peer.SendValue(ctx, "news", wire.CodecJSON, map[string]int{"n": 2},
		session.WithMetadata(wire.Metadata{{Key: "src", Value: "test"}})), "SendValue")
	f = readFrame(t, c)
	if v, _ := f.Header.Metadata.Get("src"); string(f.Payload) != `{"n":2}` || v != "test" {
		t.Fatalf("push with metadata: %+v %q", f.Header, f.Payload)
	}
	big := bytes.Repeat([]byte("p"), 100<<10)
	mustNotErr(t, peer.Send(ctx, "big", wire.CodecRaw, big), "big Send")
	if f = readFrame(t, c); !bytes.Equal(f.Payload, big) {
		t.Fatalf("big push: %d bytes", len(f.Payload))
	}

	// Concurrent pushers: every frame arrives whole, each pusher's in its order.
	const pushers, each = 4, 50
	var wg sync.WaitGroup
	for g := range pushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := peer.Send(ctx, fmt.Sprintf("g%d", g), wire.CodecJSON, fmt.Appendf(nil, `{"i":%d}`, i)); err != nil {
					t.Errorf("push g%d/%d: %v", g, i, err)
					return
				}
			}
		}()
	}
	next := map[string]int{}
	for range pushers * each {
		f := readFrame(t, c)
		if want := fmt.Sprintf(`{"i":%d}`, next[f.Header.Name]); string(f.Payload) != want {
			t.Fatalf("push %s: %q, want %q", f.Header.Name, f.Payload, want)
		}
		next[f.Header.Name]++
	}
	wg.Wait()

	// After the client left: Done is closed and pushes fail with ErrSessionClosed.
	_ = c.Close()
	th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
	select {
	case <-peer.Done():
	default:
		t.Error("Peer.Done not closed after disconnect")
	}
	if err := peer.Send(ctx, "news", wire.CodecJSON, []byte(`{}`)); !errors.Is(err, session.ErrSessionClosed) {
		t.Errorf("Send after close = %v, want ErrSessionClosed", err)
	}
	if err := peer.Close(wire.CloseServerDrain, "again"); !errors.Is(err, session.ErrSessionClosed) {
		t.Errorf("Close after close = %v, want ErrSessionClosed", err)
	}
}

// Peer.Close: the client gets session-closing with the reason and diagnostic, then the
// close; the disconnect callback gets the same reason.
func TestPush_PeerCloseSendsSessionClosing(t *testing.T) {
	rec := newRecorder()
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		if p.Name == "kick" {
			if err := p.Peer.Close(0, "bad reason"); err == nil {
				return errors.New("Close with reason 0 succeeded")
			}
			_ = p.Peer.Send(ctx, "bye", wire.CodecJSON, []byte(`{}`))
			return p.Peer.Close(wire.CloseServerDrain, "moving you")
		}
		return echo(ctx, p)
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	write(t, c, send("kick", `{}`))
	if f := readFrame(t, c); f.Header.Name != "bye" {
		t.Fatalf("want the push queued before Close, got %q", f.Header.Name)
	}
	if diag := expectSessionClosing(t, c, wire.CloseServerDrain); diag != "moving you" {
		t.Errorf("diagnostic %q", diag)
	}
	evs := th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
	if d := filter(evs, evDisconnect, rid)[0]; d.reason != wire.CloseServerDrain {
		t.Errorf("disconnect reason %s", d.reason)
	}
}

// ---------------------------------------------------------------- compression

// Digest §2.13: flag 0x04 = payload in the LZ4 container; the callback sees the plain
// payload; a reply sent with session.Compressed() carries the flag and decodes.
func TestCompression_InboundDecompressedOutboundCompressed(t *testing.T) {
	rec := newRecorder()
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		if p.Kind == wire.KindRequest && p.Name == "zip" {
			return p.Reply(p.Codec, p.Payload, session.Compressed())
		}
		return echo(ctx, p)
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	plain := bytes.Repeat([]byte(`{"k":"compress me"}`), 200)

	// Stored form (what the TS connector emits): 0x00 then the raw bytes.
	stored := append([]byte{0x00}, []byte(`{"stored":true}`)...)
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Compressed: true, Name: "s"}, stored))
	// A real LZ4 block.
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, Compressed: true, RequestSeq: 1, Name: "zip"},
		compress.AppendLZ4(nil, plain)))
	f := readFrame(t, c)
	if f.Header.Kind != wire.KindResponse || f.Header.RequestSeq != 1 {
		t.Fatalf("zip reply %s seq %d", kindName(f.Header.Kind), f.Header.RequestSeq)
	}
	if !f.Header.Compressed || f.HeaderBytes[3]&byte(wire.FlagCompressed) == 0 {
		t.Errorf("reply flags 0x%02x: want 0x04 set", f.HeaderBytes[3])
	}
	if len(f.Payload) >= len(plain) {
		t.Errorf("compressed reply is %d bytes for %d plain", len(f.Payload), len(plain))
	}
	got, err := compress.DecodeLZ4(f.Payload, 1<<20)
	mustNotErr(t, err, "DecodeLZ4 of the reply")
	if !bytes.Equal(got, plain) {
		t.Errorf("reply decompresses to %d bytes, want the %d plain bytes", len(got), len(plain))
	}
	evs := th.rec.waitFor(t, waitLong, "two packets", func(evs []event) bool { return count(evs, evPacket, rid) == 2 })
	pk := filter(evs, evPacket, rid)
	if string(pk[0].pkt.Payload) != `{"stored":true}` || !bytes.Equal(pk[1].pkt.Payload, plain) {
		t.Errorf("callback payloads %q / %d bytes", pk[0].pkt.Payload, len(pk[1].pkt.Payload))
	}
}

// A container that does not decode: a Request gets an Error reply (protocol_error), a
// Send is dropped, and the connection stays (digest §9.3).
func TestCompression_BadContainerKeepsConnection(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	bad := []byte{0x07, 'x', 'y'} // version bits set
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Compressed: true, Name: "echo"}, bad))
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, Compressed: true, RequestSeq: 9, Name: "echo"}, bad))
	f := readFrame(t, c)
	if f.Header.Kind != wire.KindError || f.Header.RequestSeq != 9 {
		t.Fatalf("reply %s seq %d payload %q", kindName(f.Header.Kind), f.Header.RequestSeq, f.Payload)
	}
	if ep, err := codec.DecodeErrorPayload(f.Payload); err != nil || ep.Code != fault.ProtocolError.Code() {
		t.Errorf("error payload %q: %+v %v", f.Payload, ep, err)
	}
	roundTrip(t, c, 10)
	if n := count(th.rec.snapshot(), evPacket, rid); n != 1 {
		t.Errorf("handler saw %d packets; undecodable payloads must not reach it", n)
	}
}

// Peer.Send applies send-side backpressure: while a client does not read, pushes queue
// up to MaxPendingWrite and then wait (bounded by their ctx); once the client reads,
// every accepted push arrives whole and in order, and pushing works again.
func TestPush_BackpressureWhenClientDoesNotRead(t *testing.T) {
	rec := newRecorder()
	peers := make(chan *session.Peer, 1)
	rec.onConnect = func(ctx context.Context, peer *session.Peer) { peers <- peer }
	th := startHost(t, rec, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Socket(session.SocketOptions{MaxPendingWrite: 64 << 10})
	})
	c, _ := th.connect(t)
	peer := <-peers
	payload := func(i int) []byte {
		b := bytes.Repeat([]byte{byte(i)}, 32<<10)
		copy(b, fmt.Sprintf("%08d", i))
		return b
	}
	accepted := 0
	var blockedErr error
	for accepted < 5000 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := peer.Send(ctx, "bulk", wire.CodecRaw, payload(accepted))
		cancel()
		if err != nil {
			blockedErr = err
			break
		}
		accepted++
	}
	if !errors.Is(blockedErr, context.DeadlineExceeded) {
		t.Fatalf("after %d pushes to a client that does not read: %v, want context.DeadlineExceeded", accepted, blockedErr)
	}
	t.Logf("%d pushes of 32 KiB accepted before Send waited", accepted)
	for i := range accepted {
		f, err := c.ReadFrame(waitLong)
		if err != nil {
			t.Fatalf("push %d of %d: %v", i, accepted, err)
		}
		if f.Header.Name != "bulk" || !bytes.Equal(f.Payload, payload(i)) {
			t.Fatalf("push %d: %q, %d bytes, prefix %q", i, f.Header.Name, len(f.Payload), f.Payload[:8])
		}
	}
	mustNotErr(t, peer.Send(context.Background(), "after", wire.CodecJSON, []byte(`{}`)), "Send after draining")
	if f := readFrame(t, c); f.Header.Name != "after" {
		t.Fatalf("got %q", f.Header.Name)
	}
}

// A metrics collection that runs while the host shuts down (a scraper, the dashboard's
// sampler) never deadlocks with it: the collection's callbacks take the host's lock,
// and the shutdown unregisters them. Once it held its lock while it waited for a
// collection in progress, which waited for that lock; the binary's stop hung.
func TestLifecycle_ShutdownWhileMetricsAreCollected(t *testing.T) {
	for round := 0; round < 30; round++ {
		th := startHost(t, nil, session.HostOptions{}, nil)
		th.connect(t) // a session, so that the callbacks walk one
		stop := make(chan struct{})
		collecting := make(chan struct{})
		go func() {
			defer close(collecting)
			for {
				select {
				case <-stop:
					return
				default:
				}
				var rm metricdata.ResourceMetrics
				_ = th.reader.Collect(context.Background(), &rm) // not t.Fatal: not the test's goroutine
			}
		}()
		done := make(chan error, 1)
		go func() { done <- th.h.Shutdown(context.Background()) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitLong):
			t.Fatalf("round %d: Shutdown did not return while metrics were collected", round)
		}
		close(stop)
		<-collecting
	}
}
