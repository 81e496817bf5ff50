package gossipnet_test

import (
	"bytes"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/mesh/gossipnet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 5 * time.Second

func start(t *testing.T) *gossipnet.Transport {
	t.Helper()
	tr, err := gossipnet.New([]string{"127.0.0.1"}, 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

func addr(tr *gossipnet.Transport) string { return "127.0.0.1:" + strconv.Itoa(tr.Port()) }

func receive(t *testing.T, tr *gossipnet.Transport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(wait):
		t.Fatal("no packet arrived")
		return nil
	}
}

// Each packet arrives in a buffer of its own, of about its size: the next packet, read
// into the listener's reused buffer, does not change it.
func TestTransport_PacketArrivesAsItsOwnExactCopy(t *testing.T) {
	a, b := start(t), start(t)
	first := bytes.Repeat([]byte{1}, 1200)
	if _, err := a.WriteTo(first, addr(b)); err != nil {
		t.Fatal(err)
	}
	p1 := receive(t, b)
	if _, err := a.WriteToAddress(bytes.Repeat([]byte{2}, 1500), memberlist.Address{Addr: addr(b)}); err != nil {
		t.Fatal(err)
	}
	p2 := receive(t, b)
	if !bytes.Equal(p1.Buf, first) {
		t.Errorf("first packet: %d bytes, changed after the second arrived", len(p1.Buf))
	}
	if cap(p1.Buf) >= 2*len(first) {
		t.Errorf("first packet: %d bytes in a buffer of %d: not a copy of its own size", len(p1.Buf), cap(p1.Buf))
	}
	if len(p2.Buf) != 1500 || p2.Buf[0] != 2 {
		t.Errorf("second packet: %d bytes starting %d", len(p2.Buf), p2.Buf[0])
	}
	if p1.From.String() != addr(a) {
		t.Errorf("packet from %s, want %s", p1.From, addr(a))
	}
}

// A stream dialled to a transport comes out of its StreamCh, connected.
func TestTransport_StreamDialledIsAccepted(t *testing.T) {
	a, b := start(t), start(t)
	out, err := a.DialTimeout(addr(b), wait)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var in net.Conn
	select {
	case in = <-b.StreamCh():
	case <-time.After(wait):
		t.Fatal("no stream accepted")
	}
	defer in.Close()
	if _, err := out.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(in, got); err != nil || string(got) != "ping" {
		t.Fatalf("read %q, %v", got, err)
	}
}

// A taken port is a start error naming it; port 0 gives TCP and UDP the same port,
// which is what the node advertises.
func TestTransport_PortsAndAdvertiseAddress(t *testing.T) {
	a := start(t)
	if _, err := gossipnet.New([]string{"127.0.0.1"}, a.Port(), log.New(io.Discard, "", 0)); err == nil {
		t.Fatal("a second transport on a taken port started")
	}
	ip, port, err := a.FinalAdvertiseAddr("", 0)
	if err != nil || !ip.Equal(net.ParseIP("127.0.0.1")) || port != a.Port() {
		t.Errorf("FinalAdvertiseAddr = %v, %d, %v; want 127.0.0.1, %d", ip, port, err, a.Port())
	}
	ip, port, err = a.FinalAdvertiseAddr("127.0.0.9", 7946)
	if err != nil || !ip.Equal(net.ParseIP("127.0.0.9")) || port != 7946 {
		t.Errorf("FinalAdvertiseAddr(127.0.0.9, 7946) = %v, %d, %v", ip, port, err)
	}
	if _, _, err := a.FinalAdvertiseAddr("not an ip", 1); err == nil {
		t.Error("an unparsable advertise address was accepted")
	}
}

// A packet that came over a stream (memberlist's TCP fallback) is read to its end and
// handed on like a UDP one.
func TestTransport_IngestPacketFromAStream(t *testing.T) {
	a := start(t)
	client, server := net.Pipe()
	go func() {
		_, _ = client.Write([]byte("over tcp"))
		_ = client.Close()
	}()
	errc := make(chan error, 1)
	go func() {
		errc <- a.IngestPacket(server, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, time.Now(), true)
	}()
	if p := receive(t, a); string(p.Buf) != "over tcp" {
		t.Errorf("packet %q", p.Buf)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
