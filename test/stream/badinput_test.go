package stream_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// Digest §2.8/§2.9, §9.3 and seed §7: a frame that does not decode closes only its own
// connection, with a session-closing ProtocolError frame first; it is counted in
// meshnode.stream.protocol_errors; it never reaches a handler; other connections of the
// same server keep working.
func TestBadInput_ClosesOnlyThatConnectionWithProtocolError(t *testing.T) {
	const (
		marker  = 0xF2
		sendK   = byte(wire.KindSend)
		req     = byte(wire.KindRequest)
		resp    = byte(wire.KindResponse)
		ctl     = byte(wire.KindControl)
		jsonC   = byte(wire.CodecJSON)
		fSeq    = byte(wire.FlagRequestSeq)
		fMeta   = byte(wire.FlagMetadata)
		fCorr   = byte(wire.FlagCorrelationID)
		fFlow   = byte(wire.FlagFlow)
		payload = `{}`
	)
	type badCase struct {
		name   string
		header []byte
	}
	cases := []badCase{
		{name: "BadMarker", header: testkit.NewHeader(0xF3, sendK, jsonC, 0).Name("x").Bytes()},
		{name: "ZeroMarker", header: testkit.NewHeader(0x00, sendK, jsonC, 0).Name("x").Bytes()},
		{name: "UnknownKind0", header: testkit.NewHeader(marker, 0, jsonC, 0).Name("x").Bytes()},
		{name: "UnknownKind6", header: testkit.NewHeader(marker, 6, jsonC, 0).Name("x").Bytes()},
		{name: "UnknownCodec", header: testkit.NewHeader(marker, sendK, 4, 0).Name("x").Bytes()},
		{name: "UnknownFlag0x20", header: testkit.NewHeader(marker, sendK, jsonC, 0x20).Name("x").Bytes()},
		{name: "UnknownFlag0x80", header: testkit.NewHeader(marker, sendK, jsonC, 0x80).Name("x").Bytes()},
		{name: "RequestWithoutSeqFlag", header: testkit.NewHeader(marker, req, jsonC, 0).Name("x").Bytes()},
		{name: "SendWithSeq", header: testkit.NewHeader(marker, sendK, jsonC, fSeq).Seq(1).Name("x").Bytes()},
		{name: "SeqZero", header: testkit.NewHeader(marker, req, jsonC, fSeq).Seq(0).Name("x").Bytes()},
		{name: "NameOnResponse", header: testkit.NewHeader(marker, resp, jsonC, fSeq).Seq(1).Name("x").Bytes()},
		{name: "EmptyNameOnSend", header: testkit.NewHeader(marker, sendK, jsonC, 0).Name("").Bytes()},
		{name: "ReservedNameOnSend", header: testkit.NewHeader(marker, sendK, jsonC, 0).Name("$zlink.heartbeat.ping").Bytes()},
		{name: "NameNotUTF8", header: testkit.NewHeader(marker, sendK, jsonC, 0).Name("\xff\xfe").Bytes()},
		{name: "TruncatedHeaderBelowMinimum", header: []byte{marker, sendK, jsonC}},
		{name: "EmptyHeader", header: []byte{}},
		{name: "TruncatedName", header: append(testkit.NewHeader(marker, sendK, jsonC, 0).Bytes(), 20, 'a', 'b')},
		{name: "TruncatedSeq", header: append(testkit.NewHeader(marker, req, jsonC, fSeq).Bytes(), 0, 0, 0, 1)},
		{name: "TrailingHeaderBytes", header: append(testkit.NewHeader(marker, sendK, jsonC, 0).Name("x").Bytes(), 0)},
		{name: "MetadataDuplicateKey", header: testkit.NewHeader(marker, sendK, jsonC, fMeta).Name("x").Metadata(2, "k", "1", "k", "2").Bytes()},
		{name: "MetadataCountMismatch", header: testkit.NewHeader(marker, sendK, jsonC, fMeta).Name("x").Metadata(3, "k", "1").Bytes()},
		{name: "MetadataEmptyKey", header: testkit.NewHeader(marker, sendK, jsonC, fMeta).Name("x").Metadata(1, "", "1").Bytes()},
		{name: "MetadataNUL", header: testkit.NewHeader(marker, sendK, jsonC, fMeta).Name("x").Metadata(1, "k", "a\x00b").Bytes()},
		{name: "MetadataOver1024", header: testkit.NewHeader(marker, sendK, jsonC, fMeta).Name("x").Metadata(1, "k", strings.Repeat("v", 1100)).Bytes()},
		{name: "FlowIDUppercase", header: testkit.NewHeader(marker, sendK, jsonC, fFlow).Name("x").Flow(strings.ToUpper(flowID), 3).Bytes()},
		{name: "FlowIDNotV7", header: testkit.NewHeader(marker, sendK, jsonC, fFlow).Name("x").Flow(strings.Replace(flowID, "-7a1b-", "-4a1b-", 1), 3).Bytes()},
		{name: "FlowOriginZero", header: testkit.NewHeader(marker, sendK, jsonC, fFlow).Name("x").Flow(flowID, 0).Bytes()},
		{name: "FlowTruncated", header: testkit.NewHeader(marker, sendK, jsonC, fFlow).Name("x").Flow(flowID[:20], 3).Bytes()[:4+2+20]},
		{name: "CorrelationIDEmpty", header: testkit.NewHeader(marker, req, jsonC, fSeq|fCorr).Seq(1).Name("x").Correlation("").Bytes()},
		{name: "CorrelationOnSend", header: testkit.NewHeader(marker, sendK, jsonC, fCorr).Name("x").Correlation("c").Bytes()},
		{name: "ControlWithCodec", header: testkit.NewHeader(marker, ctl, jsonC, 0).Name(wire.NameHeartbeatPing).Bytes()},
		{name: "ErrorNotJSON", header: testkit.NewHeader(marker, byte(wire.KindError), byte(wire.CodecRaw), fSeq).Seq(1).Name("").Bytes()},
	}

	th := startHost(t, nil, session.HostOptions{}, nil)
	healthy, healthyRID := th.connect(t)
	seq := uint64(1)
	roundTrip(t, healthy, seq)

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			frame := testkit.RawFrame(tc.header, []byte(payload))
			c, rid := th.connect(t)
			// A good packet first: the connection works until the bad frame.
			write(t, c, send("before", `{}`))
			write(t, c, frame)
			diag := expectSessionClosing(t, c, wire.CloseProtocolError)
			if diag == "" {
				t.Error("session-closing ProtocolError without a diagnostic")
			}
			th.waitMetric(t, mProtoErr, int64(i+1), tr("tcp"))
			th.waitMetric(t, mClosed, int64(i+1), tr("tcp"), reason("protocol_error"))
			evs := th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
			pk := filter(evs, evPacket, rid)
			if len(pk) != 1 || pk[0].pkt.Name != "before" {
				t.Errorf("handler saw %s; want only the packet before the bad frame", describe(pk))
			}
			d := filter(evs, evDisconnect, rid)[0]
			if d.reason != wire.CloseProtocolError {
				t.Errorf("disconnect reason %s, want ProtocolError", d.reason)
			}
			if n := count(evs, evTransport, rid); n != 0 {
				t.Errorf("protocol error reached the transport error callback %d times", n)
			}
			// The healthy connection is unaffected.
			seq++
			roundTrip(t, healthy, seq)
		})
	}
	if n := count(th.rec.snapshot(), evDisconnect, healthyRID); n != 0 {
		t.Error("the healthy connection was closed")
	}
}

// Frames may arrive in any fragmentation, down to one byte per segment; the server
// waits for the whole frame and replies once.
func TestBadInput_TrickledFrameStillDecodes(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	frame := testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 42, Name: "echo",
		Metadata: wire.Metadata{{Key: "a", Value: "b"}}, CorrelationID: "x", FlowID: flowID, FlowOrigin: wire.FlowApplication},
		[]byte(`{"trickled":true}`))
	for i := 0; i < len(frame)-1; i++ {
		write(t, c, frame[i:i+1])
		if i == 2 || i == len(frame)/2 {
			// Half a prefix, then half a frame: nothing may come back yet.
			if f, err := c.ReadFrame(20 * time.Millisecond); err == nil || !testkit.IsTimeout(err) {
				t.Fatalf("after %d of %d bytes: %v %+v", i+1, len(frame), err, f.Header)
			}
		}
	}
	if n := count(th.rec.snapshot(), evPacket, rid); n != 0 {
		t.Fatal("packet delivered before its last byte")
	}
	write(t, c, frame[len(frame)-1:])
	f := readFrame(t, c)
	if f.Header.Kind != wire.KindResponse || f.Header.RequestSeq != 42 || string(f.Payload) != `{"trickled":true}` {
		t.Fatalf("reply %s %+v %q", kindName(f.Header.Kind), f.Header, f.Payload)
	}
	roundTrip(t, c, 43)
}

// A frame larger than the server's receive buffer (16 KiB by default) but under
// MaxMessageSize, written in uneven pieces, and several frames in one write.
func TestBadInput_LargeAndCoalescedFrames(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	c, _ := th.connect(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3000) // 48,000 bytes
	frame := testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecRaw, RequestSeq: 1, Name: "echo"}, big)
	for off := 0; off < len(frame); {
		n := min(7919, len(frame)-off)
		write(t, c, frame[off:off+n])
		off += n
	}
	f := readFrame(t, c)
	if f.Header.RequestSeq != 1 || !bytes.Equal(f.Payload, big) {
		t.Fatalf("big echo: seq %d, %d bytes", f.Header.RequestSeq, len(f.Payload))
	}
	var burst []byte
	for seq := uint64(2); seq < 50; seq++ {
		burst = append(burst, request(seq, "echo", fmt.Sprintf(`{"n":%d}`, seq))...)
	}
	write(t, c, burst)
	for seq := uint64(2); seq < 50; seq++ {
		f := readFrame(t, c)
		if f.Header.RequestSeq != seq || string(f.Payload) != fmt.Sprintf(`{"n":%d}`, seq) {
			t.Fatalf("burst reply %d: seq %d payload %q", seq, f.Header.RequestSeq, f.Payload)
		}
	}
}

// A Response or Error from the client completes nothing on the server (it sends no
// requests): it is dropped and the connection stays.
func TestBadInput_ClientReplyIsDroppedConnectionKept(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindResponse, Codec: wire.CodecJSON, RequestSeq: 77}, []byte(`{}`)))
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON, RequestSeq: 78}, []byte(`{"code":"x","message":"y"}`)))
	write(t, c, testkit.Encode(wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON}, []byte(`{"code":"x","message":"y"}`)))
	roundTrip(t, c, 1)
	if n := count(th.rec.snapshot(), evPacket, rid); n != 1 {
		t.Errorf("handler saw %d packets; client replies must not reach it", n)
	}
	if got := th.metric(t, mProtoErr); got != 0 {
		t.Errorf("protocol errors %d", got)
	}
}

// An unknown control packet is dropped; the connection stays.
func TestBadInput_UnknownControlIsDroppedConnectionKept(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	write(t, c, control("$zlink.actor.bound"))
	write(t, c, control("something-else"))
	roundTrip(t, c, 1)
	if n := count(th.rec.snapshot(), evPacket, rid); n != 1 {
		t.Errorf("handler saw %d packets; control packets must not reach it", n)
	}
}

// A burst that arrives in one segment reaches the session in one go (the read loop
// pulls what is already buffered together): a malformed frame at its end still closes
// with ProtocolError only after every Request before it was answered, in order, and a
// heartbeat in the middle of the burst is still answered.
func TestBadInput_MalformedFrameEndingABurstClosesAfterTheBurstsReplies(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	c, _ := th.connect(t)
	bad := testkit.RawFrame(testkit.NewHeader(0xF3, byte(wire.KindSend), byte(wire.CodecJSON), 0).Name("x").Bytes(), []byte(`{}`))
	const n = 40
	var burst []byte
	for seq := uint64(1); seq <= n; seq++ {
		burst = append(burst, request(seq, "echo", fmt.Sprintf(`{"n":%d}`, seq))...)
		if seq == n/2 {
			burst = append(burst, control(wire.NameHeartbeatPing)...)
		}
	}
	write(t, c, append(burst, bad...))
	next, pongs := uint64(1), 0
	for next <= n {
		f := readFrame(t, c)
		if f.Header.Kind == wire.KindControl && f.Header.Name == wire.NameHeartbeatPong {
			pongs++
			continue
		}
		if f.Header.Kind != wire.KindResponse || f.Header.RequestSeq != next || string(f.Payload) != fmt.Sprintf(`{"n":%d}`, next) {
			t.Fatalf("reply %d: got %s seq %d payload %q", next, kindName(f.Header.Kind), f.Header.RequestSeq, f.Payload)
		}
		next++
	}
	if pongs == 0 {
		f := readFrame(t, c)
		if f.Header.Kind != wire.KindControl || f.Header.Name != wire.NameHeartbeatPong {
			t.Fatalf("want the heartbeat's pong, got %s %q", kindName(f.Header.Kind), f.Header.Name)
		}
	}
	expectSessionClosing(t, c, wire.CloseProtocolError)
}
