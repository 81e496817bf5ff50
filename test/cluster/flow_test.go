package cluster

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/test/proc"
)

// A peer that stops reading (SIGSTOP) stops acknowledging: once the window toward it
// is full, a send waits for room until its deadline and then fails with the typed
// mesh.ErrBackpressure, a send that cannot wait fails at once, and nothing queues
// beyond the window. When the peer continues, sends go through again.
func TestPeerWindow_FullPeerFailsSendsWithErrBackpressure(t *testing.T) {
	const window = 16
	b := proc.Start(t, proc.Config{ID: "b", Timing: "lan", Streams: []string{"tcp://127.0.0.1:0"}})
	n, err := mesh.Start(context.Background(), mesh.Config{RID: "probe", Join: []string{b.Mesh}, Preset: mesh.PresetLAN, PeerWindowRecords: window})
	if err != nil {
		t.Fatal(err)
	}
	defer meshtest.KillMesh(n)
	var to mesh.NodeID
	proc.Eventually(t, "the probe node sees b", func() bool {
		m, ok := n.Membership().Member("b")
		to = m.ID
		return ok && n.Membership().IsLive(m.ID)
	})
	rec := func(i int) *wire.Record {
		return &wire.Record{Body: &wire.BoundSessionBind{
			Correlation: uint64(i) + 1,
			Actor: wire.ActorRouteFence{Actor: wire.ActorRef{ID: "nobody", Generation: 1}, TargetNodeRID: to.RID,
				TargetNodeGeneration: to.Generation, ExpectedAuthorityOwnerGeneration: 1, ExpectedOwnerLeaseGeneration: 1},
			SessionRID: "s", Binding: wire.BindingTransition{State: wire.BindingActive, Generation: 1},
		}}
	}
	b.Signal(syscall.SIGSTOP)
	var failed error
	sent := 0
	for i := 0; i < 10*window && failed == nil; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		failed = n.Records().Send(ctx, to, rec(i))
		cancel()
		if failed == nil {
			sent++
		} else if d := time.Since(start); d < 250*time.Millisecond {
			t.Errorf("the send failed after %v, before its deadline", d)
		}
	}
	if !errors.Is(failed, mesh.ErrBackpressure) {
		t.Fatalf("sends to a stopped peer: %d went, then %v; want mesh.ErrBackpressure", sent, failed)
	}
	if sent > window {
		t.Errorf("%d records went to a peer that acknowledged nothing, window %d", sent, window)
	}
	if err := n.Records().TrySend(to, rec(1000)); !errors.Is(err, mesh.ErrBackpressure) {
		t.Errorf("TrySend to the full peer: %v, want mesh.ErrBackpressure at once", err)
	}
	if s := n.Records().FlowStats(); s.FullPeers != 1 || s.Unacked > window {
		t.Errorf("flow stats while the peer is stopped: %+v", s)
	}
	b.Signal(syscall.SIGCONT)
	proc.Eventually(t, "the peer acknowledged", func() bool { return n.Records().FlowStats().Unacked == 0 })
	if err := n.Records().Send(context.Background(), to, rec(2000)); err != nil {
		t.Fatalf("send after the peer continued: %v", err)
	}
}
