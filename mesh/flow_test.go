package mesh_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
)

// The records toward a peer that it has not acknowledged are bounded by the window:
// a sender that outruns it waits for acknowledgements instead of queueing without
// bound, every record still arrives, and once the peer caught up nothing stays
// unacknowledged.
func TestFlow_WindowBoundsUnacknowledgedRecordsWithoutLoss(t *testing.T) {
	const window, records = 16, 5000
	c := meshtest.Start(t, 2, meshtest.Options{PeerWindowRecords: window, NoTap: true})
	var got atomic.Int64
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, func(mesh.NodeID, *wire.Record) { got.Add(1) })
	to := c.Node(1).ID()
	maxUnacked := 0
	for i := range records {
		if err := c.Node(0).Records().Send(context.Background(), to, bindRecord(uint64(i+1), to)); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		maxUnacked = max(maxUnacked, c.Node(0).Records().FlowStats().Unacked)
	}
	if maxUnacked > window {
		t.Fatalf("%d records unacknowledged, window %d", maxUnacked, window)
	}
	if err := c.WaitUntil(wait, func() bool { return got.Load() == records }); err != nil {
		t.Fatalf("%d of %d records arrived", got.Load(), records)
	}
	if err := c.WaitUntil(wait, func() bool { return c.Node(0).Records().FlowStats().Unacked == 0 }); err != nil {
		t.Fatalf("%+v after the peer caught up", c.Node(0).Records().FlowStats())
	}
	if s := c.Node(0).Records().FlowStats(); s.Waits == 0 || s.Backpressured != 0 {
		t.Errorf("flow stats %+v: the sender should have waited, and never failed", s)
	}
}

// A peer that leaves takes its window with it: a sender waiting for room fails with
// fault.Unavailable (not a hang), and a new lifecycle starts with an empty window.
func TestFlow_DepartedPeerEndsItsWindow(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{NoTap: true})
	to := c.Node(1).ID()
	if err := c.Node(0).Records().Send(context.Background(), to, bindRecord(1, to)); err != nil {
		t.Fatal(err)
	}
	c.Kill(1)
	if err := c.WaitUntil(wait, func() bool { return !c.Node(0).Membership().IsLive(to) }); err != nil {
		t.Fatal(err)
	}
	if s := c.Node(0).Records().FlowStats(); s.Peers != 0 || s.Unacked != 0 {
		t.Fatalf("flow stats after the peer failed: %+v", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Node(0).Records().Send(ctx, to, bindRecord(2, to)); err == nil {
		t.Fatal("send to a failed peer succeeded")
	}
}
