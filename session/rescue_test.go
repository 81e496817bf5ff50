package session_test

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// blocker blocks its "block" request until release is closed.
type blocker struct {
	entered chan struct{}
	release chan struct{}
}

type blockingSession struct{ b *blocker }

func (s blockingSession) OnPacket(ctx context.Context, pkt *session.Packet) error {
	if pkt.Name == "block" {
		close(s.b.entered)
		<-s.b.release
	}
	return pkt.Reply(pkt.Codec, pkt.Payload)
}

func rawFrame(t *testing.T, h wire.Header, payload string) []byte {
	t.Helper()
	b, err := wire.AppendFrame(nil, &h, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readRawFrame(t *testing.T, br *bufio.Reader) (wire.Header, []byte) {
	f := testkit.MustReadFrame(t, br)
	return f.Header, f.Payload
}

// A callback that blocks holds its session's turn, not the connection's reading: the
// read loop moves to another goroutine, so a heartbeat ping is still answered and the
// next packet is pulled (it runs after the blocked one, in order).
func TestBlockedCallbackStillAnswersHeartbeat(t *testing.T) {
	b := &blocker{entered: make(chan struct{}), release: make(chan struct{})}
	h := session.NewHost(session.HostOptions{})
	h.AddStreamNode("gw").Bind("tcp://127.0.0.1:0").
		Session(session.NewSessionType(func() blockingSession { return blockingSession{b} }))
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	nc, err := net.Dial("tcp", h.Node("gw").BindAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)

	if _, err := nc.Write(rawFrame(t, wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 1, Name: "block"}, `1`)); err != nil {
		t.Fatal(err)
	}
	<-b.entered
	ping := rawFrame(t, wire.Header{Kind: wire.KindControl, Name: wire.NameHeartbeatPing}, "")
	next := rawFrame(t, wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 2, Name: "echo"}, `2`)
	if _, err := nc.Write(append(ping, next...)); err != nil {
		t.Fatal(err)
	}
	got, _ := readRawFrame(t, br)
	if got.Kind != wire.KindControl || got.Name != wire.NameHeartbeatPong {
		t.Fatalf("while the callback blocks, got %+v, want pong", got)
	}
	close(b.release)
	for _, want := range []uint64{1, 2} {
		got, p := readRawFrame(t, br)
		if got.Kind != wire.KindResponse || got.RequestSeq != want {
			t.Fatalf("got %+v %q, want response %d", got, p, want)
		}
	}
}
