package stream_test

import (
	"context"
	"crypto/tls"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// Robustness of the ingress loop and the host life cycle beyond the seed's list: a slow
// client must not hold host-wide resources, and closing the host must not wait on
// clients that never finish a handshake.

// A client trickling a frame larger than the server's receive buffer (16 KiB) but under
// MaxMessageSize must not hold a host-wide permit while the server waits for its bytes
// (session/conn.go says "a permit is never held while a slow client trickles bytes";
// digest §9.6 "one busy connection doesn't block others"). With one permit, another
// connection's request must still be served.
func TestBackpressure_SlowLargeFrameDoesNotHoldPermit(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{MaxQueuedApplicationJobs: 1}, nil)
	slow, slowRID := th.connect(t)
	other, _ := th.connect(t)
	roundTrip(t, other, 1)

	big := testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecRaw, RequestSeq: 1, Name: "echo"}, make([]byte, 40<<10))
	write(t, slow, big[:len(big)/2]) // and then nothing, for now
	// The server has the slow frame's prefix; it must not take a permit for the frame
	// while its bytes trickle in: no permit is in use during a window of 200 ms.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := th.metric(t, mJobs, state("in_use")); n != 0 {
			t.Fatalf("a permit is in use (%d) while a slow client trickles a large frame", n)
		}
		runtime.Gosched()
	}
	write(t, other, request(2, "echo", `{"n":2}`))
	f, err := other.ReadFrame(time.Second)
	if err != nil {
		t.Errorf("another connection was not served for 1 s while a slow client trickled a 40 KiB frame: %v", err)
		// Let the slow client finish, which frees the permit; then the reply comes.
		write(t, slow, big[len(big)/2:])
		f = readFrame(t, other)
	} else {
		write(t, slow, big[len(big)/2:])
	}
	if f.Header.RequestSeq != 2 || string(f.Payload) != `{"n":2}` {
		t.Fatalf("reply %+v %q", f.Header, f.Payload)
	}
	if g := readFrame(t, slow); g.Header.RequestSeq != 1 || len(g.Payload) != 40<<10 {
		t.Fatalf("slow client's reply: seq %d, %d bytes", g.Header.RequestSeq, len(g.Payload))
	}
	if n := count(th.rec.snapshot(), evDisconnect, slowRID); n != 0 {
		t.Error("slow client was closed")
	}
}

// IdleTimeout is about the client being silent ("no frame arrived from its client for
// d", builder.go). A client whose frames wait unread because the server holds no free
// permit is not idle and must not be closed with IdleTimeout. (Strict permit
// accounting, StallTimeout < 0, so that the blocked session's queued packet keeps the
// only permit and the client's pings really wait for it.)
func TestIdleTimeout_NotWhileServerIsBackpressured(t *testing.T) {
	const idle = 300 * time.Millisecond
	rec := newRecorder()
	release := make(chan struct{})
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		if p.Name == "block" {
			select {
			case <-release:
			case <-p.Peer.Done():
			}
		}
		return echo(ctx, p)
	}
	th := startHost(t, rec, session.HostOptions{MaxQueuedApplicationJobs: 1, StallTimeout: -1}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").IdleTimeout(idle)
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	c, rid := th.connect(t)
	write(t, c, send("block", `{}`))  // its callback blocks (the permit went back at its start)
	write(t, c, send("queued", `{}`)) // takes the only permit, waits in the mailbox
	rec.waitFor(t, waitLong, "block callback", func(evs []event) bool { return len(packetsNamed(evs, "block")) == 1 })

	// The client keeps talking for 3 idle periods; its pings wait for a permit.
	tick := time.NewTicker(idle / 4)
	defer tick.Stop()
	closedBy := func() {
		t.Helper()
		r := "unknown"
		if eventually(waitLong, func() bool { return count(th.rec.snapshot(), evDisconnect, rid) == 1 }) {
			r = filter(th.rec.snapshot(), evDisconnect, rid)[0].reason.String()
		}
		t.Errorf("a client that kept sending every %v was closed by the server (reason %s) while its frames waited for a permit",
			idle/4, r)
	}
	for start := time.Now(); time.Since(start) < 3*idle; <-tick.C {
		if err := c.WriteAll(control(wire.NameHeartbeatPing), waitLong); err != nil {
			closedBy()
			return
		}
	}
	if _, err := c.ReadFrame(10 * time.Millisecond); !testkit.IsTimeout(err) {
		closedBy()
		return
	}
	close(release)
	// Everything it sent is served: the queued Send, then a pong per ping.
	if f := readFrame(t, c); f.Header.Name != wire.NameHeartbeatPong {
		t.Fatalf("after release: %s %q", kindName(f.Header.Kind), f.Header.Name)
	}
	if n := count(th.rec.snapshot(), evDisconnect, rid); n != 0 {
		t.Error("session closed")
	}
}

// Close and Shutdown must not wait for a TLS client that connected but never sent its
// ClientHello (the handshake goroutine waits up to HandshakeTimeout, 10 s by default).
func TestClose_DoesNotWaitForPendingTLSHandshake(t *testing.T) {
	for _, how := range []string{"Close", "Shutdown"} {
		t.Run(how, func(t *testing.T) {
			p := testPKI(t)
			_, cert, key := tlsFiles(t)
			th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
				b.Bind("tls://127.0.0.1:0").TLSServer(cert, key)
			})
			addr := th.addr(t, "tls")
			silent, err := net.Dial("tcp", addr)
			mustNotErr(t, err, "dial")
			defer silent.Close()
			// A full TLS session after it proves the accept loop has taken the silent one.
			tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: certPool(t, p.CACert), ServerName: "127.0.0.1"})
			mustNotErr(t, err, "tls dial")
			roundTrip(t, testkit.NewRawConn(tc), 1)
			_ = tc.Close()

			done := make(chan struct{})
			go func() {
				if how == "Close" {
					_ = th.h.Close()
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), waitLong)
					_ = th.h.Shutdown(ctx)
					cancel()
				}
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				t.Errorf("%s still blocked after 2 s by a client that never sent a TLS ClientHello", how)
				_ = silent.Close() // ends the handshake so the host can finish
				<-done
			}
		})
	}
}

// A panicking connect or disconnect callback is contained: the session works, the
// disconnect still runs, the host closes.
func TestHandlerFailure_PanicInLifecycleCallbacks(t *testing.T) {
	rec := newRecorder()
	rec.onConnect = func(ctx context.Context, peer *session.Peer) { panic("connect panic") }
	rec.onDisconnect = func(ctx context.Context, peer *session.Peer) { panic("disconnect panic") }
	th := startHost(t, rec, session.HostOptions{}, nil)
	c, rid := th.connect(t)
	roundTrip(t, c, 1)
	_ = c.Close()
	th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool { return count(evs, evDisconnect, rid) == 1 })
	th.waitMetric(t, mActive, 0, tr("tcp"))
	c2, _ := th.connect(t)
	roundTrip(t, c2, 2)
}
