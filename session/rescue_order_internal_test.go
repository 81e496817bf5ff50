package session

import (
	"bufio"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/wire"
)

// seqRecorder records the request sequences its callbacks see, in order.
type seqRecorder struct {
	mu   sync.Mutex
	seqs []uint64
	more chan struct{} // gets a value at each callback
}

func (r *seqRecorder) OnPacket(_ context.Context, p *Packet) error {
	r.mu.Lock()
	r.seqs = append(r.seqs, p.RequestSeq)
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
	return p.Reply(p.Codec, p.Payload)
}

func (r *seqRecorder) seen() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.seqs...)
}

// A rescue reader that starts while the read loop is about to post a packet (a rescue
// timer of the previous turn that fired late, under load) does not let the next packet
// overtake it: the read loop marks its turn, which is what a rescue takes over, only
// once its packets are in the mailbox. (Found by the chaos suite: two replies of one
// session came back swapped.)
func TestDeliver_ALateRescueNeverLetsTheNextPacketOvertake(t *testing.T) {
	rec := &seqRecorder{more: make(chan struct{}, 1)}
	h := NewHost(HostOptions{NoBatchedIngress: true})
	h.AddStreamNode("gw").Bind("tcp://127.0.0.1:0").
		Session(NewSessionType(func() *seqRecorder { return rec }))
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })

	var once sync.Once
	hook := func(c *conn, head *Packet) {
		if head.RequestSeq != 1 {
			return
		}
		once.Do(func() {
			c.rescueReader()
			// With a rescue reader started here, packet 2 is pulled and run at once;
			// wait (bounded: it must not happen) for its callback.
			select {
			case <-rec.more:
			case <-time.After(300 * time.Millisecond):
			}
		})
	}
	beforePost.Store(&hook)
	t.Cleanup(func() { beforePost.Store(nil) })

	nc, err := net.Dial("tcp", h.Node("gw").BindAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	var frames []byte
	for seq := uint64(1); seq <= 2; seq++ {
		frames, err = wire.AppendFrame(frames, &wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: seq, Name: "echo"}, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	for _, want := range []uint64{1, 2} {
		f, err := testkit.ReadFrameFrom(br)
		if err != nil {
			t.Fatalf("reply %d: %v", want, err)
		}
		if f.Header.RequestSeq != want {
			t.Fatalf("reply to %d came first, want %d (callbacks ran %v)", f.Header.RequestSeq, want, rec.seen())
		}
	}
}
