package session_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

func TestSmokeEchoOverTCP(t *testing.T) {
	h := session.NewHost(session.HostOptions{})
	h.AddStreamNode("gw").Bind("tcp://127.0.0.1:0").Session(sampleapp.Type(nil, nil))
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	addr := h.Node("gw").BindAddrs()[0]
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 7, Name: "echo"}
	frame, err := wire.AppendFrame(nil, &req, []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(nc)
	pre := make([]byte, 6)
	if _, err := io.ReadFull(br, pre); err != nil {
		t.Fatal(err)
	}
	hl, pl := wire.ParsePrefix(pre)
	body := make([]byte, hl+pl)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	got, err := wire.DecodeHeader(body[:hl])
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != wire.KindResponse || got.RequestSeq != 7 || got.Name != "" || string(body[hl:]) != `{"a":1}` {
		t.Fatalf("reply %+v payload %q", got, body[hl:])
	}
}

// A listener that cannot bind fails Start and leaves nothing bound or running.
func TestStartFailureReleasesEverything(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	_ = free.Close()

	h := session.NewHost(session.HostOptions{})
	h.AddStreamNode("a").Bind("tcp://" + freeAddr).Session(sampleapp.Type(nil, nil))
	h.AddStreamNode("b").Bind("tcp://" + busy.Addr().String()).Session(session.NewSessionType(func() *otherSession { return &otherSession{} }))
	if err := h.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded on a busy port")
	}
	again, err := net.Listen("tcp", freeAddr)
	if err != nil {
		t.Fatalf("first node's port still bound after failed Start: %v", err)
	}
	_ = again.Close()
	if err := h.Start(context.Background()); !errors.Is(err, session.ErrHostStarted) {
		t.Fatalf("restart of a failed host: %v", err)
	}
}

type otherSession struct{}

func (*otherSession) OnPacket(context.Context, *session.Packet) error { return nil }
