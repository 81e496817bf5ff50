package stream_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// The verification items of seed §10 that do not need the Actor path, one test each
// (the two that need a connector are in connector_test.go).

const flowID = "0190b4f8-7c3e-7a1b-8c2d-0123456789ab" // lowercase UUIDv7

// Seed §10 "A packet a client sends reaches the session callback as a dispatch context
// holding packet name, metadata, and payload."
func TestSeed10_PacketReachesCallbackWithNameMetadataPayload(t *testing.T) {
	rec := newRecorder()
	type msg struct {
		T string `json:"t"`
	}
	var mu sync.Mutex
	decoded := map[string]msg{}
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		var m msg
		if err := p.Decode(&m); err != nil {
			return err
		}
		mu.Lock()
		decoded[p.Name] = m
		mu.Unlock()
		if p.Kind == wire.KindRequest {
			return p.Reply(wire.CodecJSON, []byte(`{"ok":true}`))
		}
		return nil
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, rid := th.connect(t)

	// 1. The worked example of digest §2.14, byte for byte, and its exact reply.
	golden, _ := hex.DecodeString("0024" + "0000000a" + "f2020103" + "0000000000000007" + "09" + hex.EncodeToString([]byte("chat.send")) +
		"000c0106" + hex.EncodeToString([]byte("locale")) + "0002" + hex.EncodeToString([]byte("ko")) + hex.EncodeToString([]byte(`{"t":"hi"}`)))
	write(t, c, golden)
	wantReply, _ := hex.DecodeString("000d0000000bf20301010000000000000007" + "00" + hex.EncodeToString([]byte(`{"ok":true}`)))
	f := readFrame(t, c)
	gotReply := testkit.RawFrame(f.HeaderBytes, f.Payload)
	if !bytes.Equal(gotReply, wantReply) {
		t.Errorf("reply bytes\n got %x\nwant %x", gotReply, wantReply)
	}

	// 2. A Send with every optional field the client may set.
	md := wire.Metadata{{Key: "locale", Value: "ko"}, {Key: "trace", Value: "t-1"}}
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "chat.msg", Metadata: md,
		FlowID: flowID, FlowOrigin: wire.FlowApplication}, []byte(`{"t":"yo"}`)))
	// 3. A Request with correlation id and flow.
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 1 << 40, Name: "chat.ask",
		CorrelationID: "corr-9", FlowID: flowID, FlowOrigin: wire.FlowInbound}, []byte(`{"t":"q"}`)))
	reply := readFrame(t, c)
	if reply.Header.RequestSeq != 1<<40 || reply.Header.CorrelationID != "corr-9" {
		t.Errorf("reply to chat.ask: seq %d corr %q", reply.Header.RequestSeq, reply.Header.CorrelationID)
	}

	evs := rec.waitFor(t, waitLong, "three packets", func(evs []event) bool { return count(evs, evPacket, rid) == 3 })
	pk := filter(evs, evPacket, rid)
	want := []struct {
		kind  wire.Kind
		name  string
		seq   uint64
		md    wire.Metadata
		corr  string
		flow  string
		orig  wire.FlowOrigin
		body  string
		value string
	}{
		{wire.KindRequest, "chat.send", 7, wire.Metadata{{Key: "locale", Value: "ko"}}, "", "", 0, `{"t":"hi"}`, "hi"},
		{wire.KindSend, "chat.msg", 0, md, "", flowID, wire.FlowApplication, `{"t":"yo"}`, "yo"},
		{wire.KindRequest, "chat.ask", 1 << 40, nil, "corr-9", flowID, wire.FlowInbound, `{"t":"q"}`, "q"},
	}
	for i, w := range want {
		p := pk[i].pkt
		if p.Kind != w.kind || p.Name != w.name || p.RequestSeq != w.seq || p.Codec != wire.CodecJSON ||
			p.CorrelationID != w.corr || p.FlowID != w.flow || p.FlowOrigin != w.orig || string(p.Payload) != w.body {
			t.Errorf("packet %d = %s %q seq %d codec %d corr %q flow %q/%d payload %q; want %+v",
				i, kindName(p.Kind), p.Name, p.RequestSeq, p.Codec, p.CorrelationID, p.FlowID, p.FlowOrigin, p.Payload, w)
		}
		if fmt.Sprint(p.Metadata) != fmt.Sprint(w.md) {
			t.Errorf("packet %d metadata %v, want %v", i, p.Metadata, w.md)
		}
		if v, ok := p.Metadata.Get("locale"); w.md != nil && (!ok || v != "ko") {
			t.Errorf("packet %d Metadata.Get(locale) = %q, %v", i, v, ok)
		}
		if p.IsRequest() != (w.kind == wire.KindRequest) {
			t.Errorf("packet %d IsRequest = %v", i, p.IsRequest())
		}
		mu.Lock()
		if decoded[w.name].T != w.value {
			t.Errorf("packet %d Decode gave %+v, want t=%q", i, decoded[w.name], w.value)
		}
		mu.Unlock()
	}
}

// Seed §10 "The public surface and execution of session lifecycle, packet, and error
// callbacks do not change on the STREAM packet-pull path, and packets reach the public
// session callback."
func TestSeed10_CallbacksUnchangedOnPullPath(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	a, ridA := th.connect(t)
	b, ridB := th.connect(t)
	if ridA == ridB {
		t.Fatalf("two connections share routing id %d", ridA)
	}
	// Interleave the two connections; each session sees its own packets in order.
	for i := range 5 {
		write(t, a, send("a", fmt.Sprintf(`{"i":%d}`, i)))
		write(t, b, send("b", fmt.Sprintf(`{"i":%d}`, i)))
	}
	roundTrip(t, a, 1)
	roundTrip(t, b, 1)
	_ = a.Close() // clean close: ClientClose
	_ = b.Close()

	evs := th.rec.waitFor(t, waitLong, "both disconnects", func(evs []event) bool {
		return count(evs, evDisconnect, ridA) == 1 && count(evs, evDisconnect, ridB) == 1
	})
	for _, rid := range []session.RoutingID{ridA, ridB} {
		var mine []event
		for _, e := range evs {
			if e.rid == rid {
				mine = append(mine, e)
			}
		}
		// connect, 5 sends, 1 request, disconnect(ClientClose): in that order, once each.
		if len(mine) != 8 || mine[0].kind != evConnect || mine[7].kind != evDisconnect {
			t.Fatalf("rid %d callbacks: %s", rid, describe(mine))
		}
		if mine[7].reason != wire.CloseClientClose {
			t.Errorf("rid %d disconnect reason %s, want ClientClose", rid, mine[7].reason)
		}
		for i := 1; i <= 5; i++ {
			p := mine[i].pkt
			if mine[i].kind != evPacket || string(p.Payload) != fmt.Sprintf(`{"i":%d}`, i-1) {
				t.Errorf("rid %d callback %d: %s payload %q", rid, i, mine[i].kind, p.Payload)
			}
		}
		if mine[6].kind != evPacket || mine[6].pkt.Name != "echo" {
			t.Errorf("rid %d callback 6: %s", rid, describe(mine[6:7]))
		}
		for _, e := range mine {
			if e.peer != mine[0].peer {
				t.Errorf("rid %d: callback %s got a different *Peer", rid, e.kind)
			}
		}
	}
	if n := count(evs, evTransport, 0); n != 0 {
		t.Errorf("%d transport error callbacks on clean closes", n)
	}
	if th.rec.overlap.Load() {
		t.Error("two callbacks of one session ran at the same time")
	}
}

// Seed §7 / §10: a transport error attributed to the session reaches the session error
// callback, before the disconnect callback, on the same pull path.
func TestSeed10_CallbacksUnchangedOnPullPath_TransportErrorCallback(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	roundTrip(t, c, 1)
	// Reset the connection (SO_LINGER 0): the server's read fails with ECONNRESET.
	tc := c.Conn.(*net.TCPConn)
	mustNotErr(t, tc.SetLinger(0), "linger")
	_ = c.Close()
	evs := th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
	var mine []event
	for _, e := range evs {
		if e.rid == rid {
			mine = append(mine, e)
		}
	}
	if len(mine) != 4 || mine[2].kind != evTransport || mine[3].kind != evDisconnect {
		t.Fatalf("callbacks: %s; want connect, packet, transport_error, disconnect", describe(mine))
	}
	if mine[2].err == nil {
		t.Error("transport error callback got a nil error")
	}
	if mine[3].reason != wire.CloseTransportError {
		t.Errorf("disconnect reason %s, want TransportError", mine[3].reason)
	}
	th.waitMetric(t, mClosed, 1, tr("tcp"), reason("transport_error"))
}

// Seed §10 "While the session callback can't consume the managed queue, a client that
// keeps sending stalls at the Core receive pipe HWM on the client side. Once the queue
// drains, packets reach the callback in order exactly once each." Also §4: the permit
// pool is host-wide, so a second connection is paused as well. The host runs with the
// strict permit accounting of digest §9.3 (StallTimeout < 0: queued packets keep their
// permits while the callback blocks); the default, under which a stalled session gives
// its permits back, is TestBounds_StalledSessionHoldsNoPermits.
func TestSeed10_BackpressureStallsClientThenDeliversInOrderExactlyOnce(t *testing.T) {
	const (
		limit     = 2
		maxFrames = 20000
		extra     = 200 // frames written after the stall
		frameBody = 1024
	)
	rec := newRecorder()
	release := make(chan struct{})
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		if p.Name == "bp" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}
	th := startHost(t, rec, session.HostOptions{MaxQueuedApplicationJobs: limit, StallTimeout: -1}, nil)
	if got := th.metric(t, mJobLimit); got != limit {
		t.Errorf("%s = %d, want %d", mJobLimit, got, limit)
	}
	a, ridA := th.connect(t)
	b, ridB := th.connect(t)

	frame := func(i int) []byte {
		body := bytes.Repeat([]byte{byte(i)}, frameBody)
		binary.BigEndian.PutUint32(body, uint32(i))
		return testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "bp"}, body)
	}
	stalled := make(chan int, 1) // frames begun when a write timed out
	resume := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		var pending []byte
		next := 0
		total := maxFrames
		stall := false
		for next < total || len(pending) > 0 {
			if len(pending) == 0 {
				pending = frame(next)
				next++
			}
			timeout := 250 * time.Millisecond
			if stall {
				timeout = waitLong
			}
			_ = a.SetWriteDeadline(time.Now().Add(timeout))
			n, err := a.Write(pending)
			pending = pending[n:]
			switch {
			case err == nil:
			case !stall && testkit.IsTimeout(err):
				stall = true
				total = next + extra
				stalled <- next
				<-resume
			default:
				writerDone <- fmt.Errorf("write of frame %d: %w", next-1, err)
				return
			}
		}
		if !stall {
			writerDone <- fmt.Errorf("wrote all %d frames (%d MiB) without ever stalling", maxFrames, maxFrames*frameBody>>20)
			return
		}
		writerDone <- nil
	}()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	var begun int
	select {
	case begun = <-stalled:
	case err := <-writerDone:
		t.Fatalf("client writer: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("client writes never stalled")
	}
	t.Logf("client stalled after %d frames (%d KiB)", begun, begun*(frameBody+9)>>10)

	// While stalled: one callback is running (blocked), and no more frames were pulled
	// than the permits allow: 1 in the callback + limit queued behind it.
	th.waitMetric(t, mPackets, 1+limit, dirIn())
	th.waitMetric(t, mJobs, limit, state("in_use"))
	th.waitMetric(t, mJobs, limit, state("queued"))
	evs := rec.snapshot()
	if n := len(packetsNamed(evs, "bp")); n != 1 || n > limit {
		t.Fatalf("%d callbacks started while blocked; want 1 (<= %d permits)", n, limit)
	}

	// The permits are host-wide: connection B is paused too.
	write(t, b, send("other", `{"from":"b"}`))
	th.waitMetric(t, mWaiters, 2)
	rec.none(t, waitShort, "connection B's packet reached its callback while every permit was taken",
		func(evs []event) bool { return count(evs, evPacket, ridB) > 0 })
	if got := th.metric(t, mPackets, dirIn()); got != 1+limit {
		t.Fatalf("frames pulled while no permit was free: %d, want %d", got, 1+limit)
	}

	// Drain.
	close(release)
	close(resume)
	if err := <-writerDone; err != nil {
		t.Fatalf("client writer: %v", err)
	}
	total := begun + extra
	evs = rec.waitFor(t, 30*time.Second, fmt.Sprintf("%d bp packets and B's packet", total), func(evs []event) bool {
		return len(packetsNamed(evs, "bp")) >= total && count(evs, evPacket, ridB) == 1
	})
	bp := packetsNamed(evs, "bp")
	if len(bp) != total {
		t.Fatalf("%d bp packets delivered, want exactly %d", len(bp), total)
	}
	for i, e := range bp {
		if e.rid != ridA {
			t.Fatalf("bp packet %d came from rid %d", i, e.rid)
		}
		p := e.pkt.Payload
		if len(p) != frameBody {
			t.Fatalf("bp packet %d has %d payload bytes", i, len(p))
		}
		if got := binary.BigEndian.Uint32(p); got != uint32(i) {
			t.Fatalf("bp packet %d carries sequence %d: out of order, lost or duplicated", i, got)
		}
	}
	if rec.overlap.Load() {
		t.Error("two callbacks of one session ran at the same time")
	}
	// Everything drained: no permit stays taken.
	th.waitMetric(t, mJobs, 0, state("in_use"))
	th.waitMetric(t, mJobs, 0, state("queued"))
	th.waitMetric(t, mPressure, 1, state("running"))
}

// Seed §10 "The dispatch context's routing ID equals the peer identity value from the
// recv result."
func TestSeed10_RoutingIDEqualsPeerIdentity(t *testing.T) {
	rec := newRecorder()
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		if p.Name == "whoami" {
			return p.ReplyValue(map[string]uint32{"packet": uint32(p.RoutingID()), "peer": uint32(p.Peer.RoutingID())})
		}
		return nil
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	seen := map[session.RoutingID]bool{}
	for i := range 4 {
		c, rid := th.connect(t)
		if rid == 0 {
			t.Fatal("routing id 0")
		}
		if seen[rid] {
			t.Fatalf("routing id %d reused by a live connection", rid)
		}
		seen[rid] = true
		for seq := uint64(1); seq <= 3; seq++ {
			write(t, c, request(seq, "whoami", `{}`))
			f := readFrame(t, c)
			var got map[string]uint32
			mustNotErr(t, json.Unmarshal(f.Payload, &got), "reply")
			if got["packet"] != uint32(rid) || got["peer"] != uint32(rid) {
				t.Errorf("connection %d: dispatch routing id %d, peer %d; connect callback saw %d", i, got["packet"], got["peer"], rid)
			}
		}
		evs := rec.waitFor(t, waitLong, "packets", func(evs []event) bool { return count(evs, evPacket, rid) == 3 })
		for _, e := range filter(evs, evPacket, rid) {
			if e.pkt.RoutingID() != rid || e.peer.RoutingID() != rid {
				t.Errorf("packet routing id %d / %d, want %d", e.pkt.RoutingID(), e.peer.RoutingID(), rid)
			}
		}
	}
}

// Seed §10 "Registering two session types on the same node fails startup as a
// configuration error." (The other §3.2 conditions: startup_test.go.)
func TestSeed10_TwoSessionTypesOnOneNodeFailsStartup(t *testing.T) {
	rec := newRecorder()
	mp, _ := newMeter(t)
	h := newHost(session.HostOptions{MeterProvider: mp, Logger: quietLogger()})
	t.Cleanup(func() { _ = h.Close() })
	h.AddStreamNode("gw").Bind(tcp0).Session(recType(rec)).Session(otherType(rec))
	before := socketFDs(t)
	err := h.Start(context.Background())
	if !errors.Is(err, session.ErrMultipleSessionTypes) || !errors.Is(err, session.ErrConfiguration) {
		t.Fatalf("Start: %v; want ErrMultipleSessionTypes and ErrConfiguration", err)
	}
	assertNoNewSockets(t, before)
	if h.Node("gw") != nil {
		t.Error("node reported as started")
	}
}

// Seed §10 / §9 "Sending a message above MaxMessageSize closes the connection without
// the session handler receiving any part of that message. EMSGSIZE is recorded on the
// server side, and the client observes only the termination."
func TestSeed10_OversizeMessageClosesWithoutHandler(t *testing.T) {
	const max = 1024
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").MaxMessageSize(max)
	})
	healthy, _ := th.connect(t)
	hdrLen := headerLen(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "big"})

	// Exactly at the cap (header + payload = max, prefix not counted): delivered.
	c, rid := th.connect(t)
	atCap := bytes.Repeat([]byte{'a'}, max-hdrLen)
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "big"}, atCap))
	roundTrip(t, c, 1)

	// One byte over: the whole frame is sent, nothing of it reaches the handler, the
	// client reads no frame at all (no session-closing, no Error), only the close.
	over := bytes.Repeat([]byte{'b'}, max-hdrLen+1)
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "big"}, over))
	expectEOF(t, c)
	th.waitMetric(t, mEMsgSize, 1, tr("tcp"))
	evs := th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
	big := packetsNamed(filter(evs, evPacket, rid), "big")
	if len(big) != 1 || len(big[0].pkt.Payload) != max-hdrLen {
		t.Fatalf("handler saw %d big packets; want only the one at the cap: %s", len(big), describe(evs))
	}
	if d := filter(evs, evDisconnect, rid); d[0].reason == wire.CloseClientClose {
		t.Errorf("disconnect reason ClientClose for a server-side EMSGSIZE close")
	}

	// Only a prefix announcing an oversize message: the server closes at once, without
	// waiting for (or reading) the body.
	c2, rid2 := th.connect(t)
	write(t, c2, wire.AppendPrefix(nil, 10, 1<<20))
	expectEOF(t, c2)
	th.waitMetric(t, mEMsgSize, 2, tr("tcp"))
	th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid2) == 1 })
	if n := count(th.rec.snapshot(), evPacket, rid2); n != 0 {
		t.Errorf("handler saw %d packets of the oversize-prefix connection", n)
	}
	// Another connection is not affected.
	roundTrip(t, healthy, 7)
}

// Seed §9: the default cap is 64 KiB of header + payload; 0 means no framework cap.
func TestSeed10_OversizeMessageClosesWithoutHandler_DefaultAndZeroCap(t *testing.T) {
	t.Run("Default64KiB", func(t *testing.T) {
		th := startHost(t, nil, session.HostOptions{}, nil)
		c, rid := th.connect(t)
		hdrLen := headerLen(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "big"})
		write(t, c, testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "big"}, make([]byte, session.DefaultMaxMessageSize-hdrLen)))
		roundTrip(t, c, 1)
		write(t, c, testkit.Encode(wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "big"}, make([]byte, session.DefaultMaxMessageSize-hdrLen+1)))
		expectEOF(t, c)
		th.waitMetric(t, mEMsgSize, 1, tr("tcp"))
		if n := len(packetsNamed(filter(th.rec.snapshot(), evPacket, rid), "big")); n != 1 {
			t.Errorf("%d big packets delivered, want 1", n)
		}
	})
	t.Run("ZeroMeansNoCap", func(t *testing.T) {
		th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
			b.Bind("tcp://127.0.0.1:0").MaxMessageSize(0)
		})
		c, _ := th.connect(t)
		payload := bytes.Repeat([]byte("z"), 300<<10)
		write(t, c, testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecRaw, RequestSeq: 1, Name: "echo"}, payload))
		f := readFrame(t, c)
		if f.Header.Kind != wire.KindResponse || !bytes.Equal(f.Payload, payload) {
			t.Fatalf("300 KiB echo: %s, %d bytes", kindName(f.Header.Kind), len(f.Payload))
		}
		if got := th.metric(t, mEMsgSize); got != 0 {
			t.Errorf("EMSGSIZE recorded %d times with no cap", got)
		}
	})
}

// Seed §10 "A Response/Error header a session builds has no packet name, and the client
// matches by request sequence alone to complete normally." Replies go out in an order
// different from the requests', with the same packet name on every request.
func TestSeed10_ReplyHeaderHasNoNameAndMatchesBySeq(t *testing.T) {
	rec := newRecorder()
	var mu sync.Mutex
	var held []*session.Packet
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		mu.Lock()
		held = append(held, p)
		all := len(held) == 3
		batch := held
		mu.Unlock()
		if all {
			// Reply later, from another goroutine, in reverse arrival order.
			go func() {
				for i := len(batch) - 1; i >= 0; i-- {
					q := batch[i]
					if q.RequestSeq == 3 {
						_ = q.ReplyError(fault.Rejected.Code(), "seq three is rejected")
						continue
					}
					_ = q.ReplyValue(map[string]uint64{"seq": q.RequestSeq})
				}
			}()
		}
		return nil
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, _ := th.connect(t)
	md := wire.Metadata{{Key: "k", Value: "v"}}
	for _, seq := range []uint64{5, 3, 9} {
		h := wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: seq, Name: "same.name", Metadata: md}
		if seq == 9 {
			h.CorrelationID = "c9"
		}
		write(t, c, testkit.Encode(h, []byte(`{}`)))
	}
	gotOrder := []uint64{}
	for range 3 {
		f := readFrame(t, c)
		h := f.Header
		gotOrder = append(gotOrder, h.RequestSeq)
		// name_len is the byte right after marker, kind, codec, flags and the 8-byte seq.
		if len(f.HeaderBytes) < 13 || f.HeaderBytes[3]&byte(wire.FlagRequestSeq) == 0 || f.HeaderBytes[12] != 0 || h.Name != "" {
			t.Errorf("reply header %x carries a packet name or no seq", f.HeaderBytes)
		}
		if h.Metadata != nil {
			t.Errorf("reply to seq %d copied request metadata %v", h.RequestSeq, h.Metadata)
		}
		switch h.RequestSeq {
		case 5, 9:
			if h.Kind != wire.KindResponse || string(f.Payload) != fmt.Sprintf(`{"seq":%d}`, h.RequestSeq) {
				t.Errorf("reply seq %d: %s %q", h.RequestSeq, kindName(h.Kind), f.Payload)
			}
			if h.RequestSeq == 9 && h.CorrelationID != "c9" {
				t.Errorf("reply seq 9 correlation %q, want c9 (preserved through the reply)", h.CorrelationID)
			}
		case 3:
			if h.Kind != wire.KindError || h.Codec != wire.CodecJSON {
				t.Errorf("reply seq 3: %s codec %d, want Error JSON", kindName(h.Kind), h.Codec)
			}
			ep, err := codec.DecodeErrorPayload(f.Payload)
			if err != nil || ep.Code != fault.Rejected.Code() {
				t.Errorf("error payload %q: %+v %v", f.Payload, ep, err)
			}
		default:
			t.Errorf("reply with unknown seq %d", h.RequestSeq)
		}
	}
	if fmt.Sprint(gotOrder) != "[9 3 5]" {
		t.Errorf("reply order %v, want [9 3 5] (the order the session replied in)", gotOrder)
	}
}

// Seed §10 "Handshake failure and socket-level errors don't run the session error
// callback and are only recorded in runtime monitoring."
func TestSeed10_HandshakeAndSocketErrorsOnlyInMonitoring(t *testing.T) {
	p := testPKI(t)
	ca, cert, key := tlsFiles(t)
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tls://127.0.0.1:0").Bind("ws://127.0.0.1:0/").TLSServer(cert, key).RequireClientCertificate(ca)
	})
	tlsAddr := th.addr(t, "tls")

	// 1. A plain STREAM client on the TLS port: not a TLS ClientHello.
	raw, err := testkit.Dial(tlsAddr)
	mustNotErr(t, err, "dial")
	defer raw.Close()
	write(t, raw, request(1, "echo", `{}`))
	if _, err := raw.ReadFrame(waitLong); err == nil {
		t.Error("plain client on a TLS port got a frame")
	}
	th.waitMetric(t, mHandshake, 1, tr("tls"))

	// 2. A TLS client without the client certificate the node requires.
	roots := certPool(t, p.CACert)
	noCert, err := tls.Dial("tcp", tlsAddr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err == nil {
		c := testkit.NewRawConn(noCert)
		_ = c.WriteAll(request(1, "echo", `{}`), waitLong)
		if f, err := c.ReadFrame(waitLong); err == nil {
			t.Errorf("client without certificate got a frame: %+v", f.Header)
		}
		_ = noCert.Close()
	}
	th.waitMetric(t, mHandshake, 2, tr("tls"))

	// 3. A TLS client whose certificate another CA signed.
	other, err := tls.X509KeyPair(p.OtherClientCert, p.OtherClientKey)
	mustNotErr(t, err, "key pair")
	stranger, err := tls.Dial("tcp", tlsAddr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{other}})
	if err == nil {
		c := testkit.NewRawConn(stranger)
		_ = c.WriteAll(request(1, "echo", `{}`), waitLong)
		if f, err := c.ReadFrame(waitLong); err == nil {
			t.Errorf("client with a foreign certificate got a frame: %+v", f.Header)
		}
		_ = stranger.Close()
	}
	th.waitMetric(t, mHandshake, 3, tr("tls"))

	// 4. A WebSocket listener asked for plain HTTP: the upgrade handshake fails.
	resp, err := http.Get("http://" + th.addr(t, "ws") + "/")
	if err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("plain GET on the ws listener: status %d", resp.StatusCode)
		}
	}
	th.waitMetric(t, mHandshake, 1, tr("ws"))
	http.DefaultClient.CloseIdleConnections()

	// None of that built a session: no callback of any kind, no connection counted.
	if evs := th.rec.snapshot(); len(evs) != 0 {
		t.Errorf("session callbacks ran for failed handshakes: %s", describe(evs))
	}
	rm := th.collect(t)
	for _, m := range []string{mOpened, mClosed, mActive, mProtoErr} {
		if v := metricValue(rm, m); v != 0 {
			t.Errorf("%s = %d after handshake failures only", m, v)
		}
	}

	// A client with the right certificate still gets through.
	good, err := tls.X509KeyPair(p.ClientCert, p.ClientKey)
	mustNotErr(t, err, "key pair")
	tc, err := tls.Dial("tcp", tlsAddr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{good}})
	mustNotErr(t, err, "tls dial with certificate")
	defer tc.Close()
	roundTrip(t, testkit.NewRawConn(tc), 1)
	if !strings.Contains(fmt.Sprint(th.node.Endpoints()), "tls://127.0.0.1:") {
		t.Errorf("endpoints %v", th.node.Endpoints())
	}
}
