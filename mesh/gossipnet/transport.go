// Package gossipnet is a node's memberlist transport: memberlist's NetTransport (TCP
// streams and UDP packets on one port per bind address), except for how a UDP packet
// is read. NetTransport reads every packet into a fresh 64 KiB buffer and hands that
// buffer on, so each gossip message, probe and ack a node received left 64 KiB of
// garbage: over a quarter of all allocation while a 30-node fleet joined, and most of
// an idle node's. Here a packet is read into the listener's one reused buffer and handed
// on as an exact-size copy.
package gossipnet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

const (
	// maxPacket is the largest UDP payload (memberlist's own read buffer size).
	maxPacket = 65536
	// recvBuffer is the socket receive buffer asked for (halved until the kernel
	// accepts it), as NetTransport does: bursts of gossip must not be dropped.
	recvBuffer = 2 << 20
)

// Transport is a memberlist.NodeAwareTransport over TCP and UDP.
type Transport struct {
	bindAddrs []string
	logger    *log.Logger
	packetCh  chan *memberlist.Packet
	streamCh  chan net.Conn
	tcp       []*net.TCPListener
	udp       []*net.UDPConn
	stopped   atomic.Bool
	wg        sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// New listens on TCP and UDP at port (0: any free port, the same for both) of each
// bind address and starts reading them. logger receives accept and read errors.
func New(bindAddrs []string, port int, logger *log.Logger) (*Transport, error) {
	if len(bindAddrs) == 0 {
		return nil, errors.New("gossipnet: no bind address")
	}
	t := &Transport{
		bindAddrs: bindAddrs, logger: logger,
		packetCh: make(chan *memberlist.Packet), streamCh: make(chan net.Conn),
	}
	for _, addr := range bindAddrs {
		ip := net.ParseIP(addr)
		tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
		if err != nil {
			t.closeListeners()
			return nil, fmt.Errorf("gossipnet: TCP listener on %q port %d: %w", addr, port, err)
		}
		t.tcp = append(t.tcp, tl)
		if port == 0 {
			port = tl.Addr().(*net.TCPAddr).Port
		}
		ul, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
		if err != nil {
			t.closeListeners()
			return nil, fmt.Errorf("gossipnet: UDP listener on %q port %d: %w", addr, port, err)
		}
		t.udp = append(t.udp, ul)
		if err := setRecvBuffer(ul); err != nil {
			t.closeListeners()
			return nil, fmt.Errorf("gossipnet: UDP receive buffer: %w", err)
		}
	}
	for i := range t.tcp {
		t.wg.Add(2)
		go t.acceptStreams(t.tcp[i])
		go t.readPackets(t.udp[i])
	}
	return t, nil
}

func setRecvBuffer(c *net.UDPConn) error {
	var err error
	for size := recvBuffer; size > 0; size /= 2 {
		if err = c.SetReadBuffer(size); err == nil {
			return nil
		}
	}
	return err
}

// Port returns the port the first bind address listens on.
func (t *Transport) Port() int { return t.tcp[0].Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr returns the address to advertise: ip and port when ip is set;
// otherwise the first listener's address, or a private address of this host when
// that listener is on every interface (as NetTransport does).
func (t *Transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, 0, fmt.Errorf("gossipnet: cannot parse advertise address %q", ip)
		}
		if a4 := a.To4(); a4 != nil {
			a = a4
		}
		return a, port, nil
	}
	if t.bindAddrs[0] == "0.0.0.0" {
		private, err := sockaddr.GetPrivateIP()
		if err != nil {
			return nil, 0, fmt.Errorf("gossipnet: interface addresses: %w", err)
		}
		a := net.ParseIP(private)
		if a == nil {
			return nil, 0, errors.New("gossipnet: no private IP address found, and no advertise address given")
		}
		return a, t.Port(), nil
	}
	return t.tcp[0].Addr().(*net.TCPAddr).IP, t.Port(), nil
}

// WriteTo sends a packet to addr (host:port).
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet from the first listener's port.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	ua, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp[0].WriteTo(b, ua)
	return time.Now(), err
}

// PacketCh delivers the packets received, each in a buffer of its own.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// IngestPacket hands on a packet that arrived over a stream (memberlist's TCP
// fallback for packets), reading conn to its end.
func (t *Transport) IngestPacket(conn net.Conn, addr net.Addr, now time.Time, shouldClose bool) error {
	if shouldClose {
		defer func() { _ = conn.Close() }()
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, conn); err != nil {
		return fmt.Errorf("gossipnet: read packet: %w", err)
	}
	if buf.Len() < 1 {
		return fmt.Errorf("gossipnet: empty packet from %s", memberlist.LogAddress(addr))
	}
	t.packetCh <- &memberlist.Packet{Buf: buf.Bytes(), From: addr, Timestamp: now}
	return nil
}

// DialTimeout opens a stream to addr.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a stream to a.Addr.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

// StreamCh delivers the streams accepted.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streamCh }

// IngestStream hands on a stream accepted elsewhere.
func (t *Transport) IngestStream(conn net.Conn) error {
	t.streamCh <- conn
	return nil
}

// Shutdown closes the listeners and waits for their readers to end.
func (t *Transport) Shutdown() error {
	t.stopped.Store(true)
	t.closeListeners()
	t.wg.Wait()
	return nil
}

func (t *Transport) closeListeners() {
	for _, l := range t.tcp {
		_ = l.Close()
	}
	for _, l := range t.udp {
		_ = l.Close()
	}
}

// acceptStreams hands each accepted connection on; after an accept error it waits
// (5 ms, doubling to 1 s) before trying again, as NetTransport does.
func (t *Transport) acceptStreams(l *net.TCPListener) {
	defer t.wg.Done()
	var delay time.Duration
	for {
		conn, err := l.AcceptTCP()
		if err != nil {
			if t.stopped.Load() {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.logger.Printf("[ERR] memberlist: Error accepting TCP connection: %v", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		t.streamCh <- conn
	}
}

// readPackets reads each packet into the one buffer and hands on an exact-size copy.
func (t *Transport) readPackets(c *net.UDPConn) {
	defer t.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, addr, err := c.ReadFrom(buf)
		ts := time.Now()
		if err != nil {
			if t.stopped.Load() {
				return
			}
			t.logger.Printf("[ERR] memberlist: Error reading UDP packet: %v", err)
			continue
		}
		if n < 1 {
			t.logger.Printf("[ERR] memberlist: UDP packet too short (%d bytes) %s", n, memberlist.LogAddress(addr))
			continue
		}
		t.packetCh <- &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: addr, Timestamp: ts}
	}
}
