package mesh_test

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
)

// Each member's admin address travels in its gossiped metadata; a node without one
// gossips none.
func TestMembership_AdminAddrIsGossiped(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		if i == 0 {
			cfg.AdminAddr = "127.0.0.1:19464"
		}
	}})
	for i := range 2 {
		m0, ok0 := c.Node(i).Membership().Member(c.Node(0).ID().RID)
		m1, ok1 := c.Node(i).Membership().Member(c.Node(1).ID().RID)
		if !ok0 || !ok1 || m0.AdminAddr != "127.0.0.1:19464" || m1.AdminAddr != "" {
			t.Errorf("node %d sees %+v and %+v", i, m0, m1)
		}
	}
}

// Records.Counts reads the record counters as plain numbers: records by command and
// direction, drops by reason.
func TestRecords_CountsByCommandAndDropsByReason(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{})
	handled := make(chan struct{}, 1)
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, func(mesh.NodeID, *wire.Record) { handled <- struct{}{} })
	if got := c.Node(0).Records().Counts(); len(got.ByCommand) != 0 || len(got.Drops) != 0 {
		t.Fatalf("before any record: %+v", got)
	}
	// To node 1, which handles it; to node 0 from node 1, which has no handler.
	if err := c.Node(0).Records().Send(context.Background(), c.Node(1).ID(), bindRecord(1, c.Node(1).ID())); err != nil {
		t.Fatal(err)
	}
	<-handled
	if err := c.Node(1).Records().Send(context.Background(), c.Node(0).ID(), bindRecord(2, c.Node(0).ID())); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitUntil(wait, func() bool { return c.Node(0).Records().Counts().Drops[mesh.DropNoHandler] == 1 }); err != nil {
		t.Fatalf("no_handler drop not counted: %v", err)
	}
	cmd := wire.CmdBoundSessionBind.String()
	if got := c.Node(0).Records().Counts().ByCommand[cmd]; got != (mesh.DirectionCounts{In: 1, Out: 1}) {
		t.Errorf("node 0 %s: %+v, want 1 in, 1 out", cmd, got)
	}
	if got := c.Node(1).Records().Counts(); got.ByCommand[cmd] != (mesh.DirectionCounts{In: 1, Out: 1}) || len(got.Drops) != 0 {
		t.Errorf("node 1: %+v", got)
	}
}
