package stream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// Seed §4: packets reach the callback in receive order, exactly once, one callback at a
// time per session, whatever mix of request/response round trips, pipelined bursts,
// control frames and callbacks slow enough to make the server move its reading to
// another goroutine. Replies leave in the order the session made them.
func TestOrdering_InOrderExactlyOnceWithSlowAndFastCallbacks(t *testing.T) {
	rec := newRecorder()
	block := make(chan struct{})
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		switch p.Name {
		case "slow":
			<-time.After(15 * time.Millisecond) // work that outlasts an inline turn
		case "block":
			select {
			case <-block:
			case <-p.Peer.Done():
			}
		}
		if p.IsRequest() {
			return p.Reply(p.Codec, p.Payload)
		}
		return nil
	}
	th := startHost(t, rec, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Bind("ws://127.0.0.1:0/")
	})

	type client struct {
		write func([]byte)
		read  func() testkit.Frame
	}
	run := func(t *testing.T, cl client, rid session.RoutingID) {
		seq := uint64(0)
		name := func(s uint64, every uint64) string {
			if s%every == 0 {
				return "slow"
			}
			return "fast"
		}
		// 1. One round trip at a time (the server may run these turns inline).
		for range 40 {
			seq++
			cl.write(request(seq, name(seq, 8), fmt.Sprintf(`{"s":%d}`, seq)))
			f := cl.read()
			if f.Header.RequestSeq != seq || string(f.Payload) != fmt.Sprintf(`{"s":%d}`, seq) {
				t.Fatalf("round trip %d: seq %d payload %q", seq, f.Header.RequestSeq, f.Payload)
			}
		}
		// 2. A pipelined burst mixing slow and fast requests, one-way sends and pings.
		first := seq + 1
		var burst []byte
		pings := 0
		for range 150 {
			seq++
			burst = append(burst, request(seq, name(seq, 25), fmt.Sprintf(`{"s":%d}`, seq))...)
			if seq%10 == 0 {
				burst = append(burst, send("oneway", fmt.Sprintf(`{"s":%d}`, seq))...)
			}
			if seq%30 == 0 {
				burst = append(burst, control(wire.NameHeartbeatPing)...)
				pings++
			}
		}
		cl.write(burst)
		next, pongs := first, 0
		for next <= seq || pongs < pings {
			f := cl.read()
			if f.Header.Kind == wire.KindControl {
				if f.Header.Name != wire.NameHeartbeatPong {
					t.Fatalf("control %q", f.Header.Name)
				}
				pongs++
				continue
			}
			if f.Header.RequestSeq != next || string(f.Payload) != fmt.Sprintf(`{"s":%d}`, next) {
				t.Fatalf("burst reply: seq %d payload %q, want seq %d", f.Header.RequestSeq, f.Payload, next)
			}
			next++
		}
		// 3. While a callback blocks, heartbeats are still answered and the packets behind
		// it still run afterwards, in order.
		seq++
		blockSeq := seq
		cl.write(request(blockSeq, "block", fmt.Sprintf(`{"s":%d}`, blockSeq)))
		th.rec.waitFor(t, waitLong, "block callback", func(evs []event) bool {
			return len(packetsNamed(filter(evs, evPacket, rid), "block")) == 1
		})
		cl.write(control(wire.NameHeartbeatPing))
		if f := cl.read(); f.Header.Name != wire.NameHeartbeatPong {
			t.Fatalf("while a callback blocks: got %s %q, want a pong", kindName(f.Header.Kind), f.Header.Name)
		}
		seq++
		cl.write(request(seq, "fast", fmt.Sprintf(`{"s":%d}`, seq)))
		block <- struct{}{}
		for s := blockSeq; s <= seq; s++ {
			if f := cl.read(); f.Header.RequestSeq != s {
				t.Fatalf("after unblocking: seq %d, want %d", f.Header.RequestSeq, s)
			}
		}

		// Every request reached the callback once, in order; the one-way sends too.
		evs := th.rec.snapshot()
		want := uint64(1)
		for _, e := range filter(evs, evPacket, rid) {
			if e.pkt.Kind != wire.KindRequest {
				continue
			}
			if e.pkt.RequestSeq != want {
				t.Fatalf("callback order: seq %d, want %d", e.pkt.RequestSeq, want)
			}
			want++
		}
		if want != seq+1 {
			t.Fatalf("%d requests reached the callback, want %d", want-1, seq)
		}
		if n := len(packetsNamed(filter(evs, evPacket, rid), "oneway")); n != 15 {
			t.Errorf("%d one-way sends reached the callback, want 15", n)
		}
		if th.rec.overlap.Load() {
			t.Error("two callbacks of one session ran at the same time")
		}
	}

	t.Run("tcp", func(t *testing.T) {
		c, rid := th.connect(t)
		run(t, client{write: func(b []byte) { write(t, c, b) }, read: func() testkit.Frame { return readFrame(t, c) }}, rid)
	})
	t.Run("ws", func(t *testing.T) {
		before := count(th.rec.snapshot(), evConnect, 0)
		w := dialWS(t, th.endpoint(t, "ws"), nil)
		evs := th.rec.waitFor(t, waitLong, "connect", func(evs []event) bool { return count(evs, evConnect, 0) > before })
		rid := filter(evs, evConnect, 0)[before].rid
		run(t, client{write: w.writeMsg, read: w.readFrame}, rid)
	})
}
