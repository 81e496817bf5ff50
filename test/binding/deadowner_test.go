package binding_test

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/test/fleet"
)

// Issue 30, item 1: when membership declares a node failed, every binding held by a
// session on it is retired on the Actor side as a disconnect would be (the Actor gets
// its SessionEnded), so a seal, a move or a drain never waits on the dead session
// owner, and a drain moves the Actor with its state.
func TestIssue30_BindingsOfADeadNodeAreRetiredAndADrainMovesTheActor(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	probe := f.IDOn(t, "probe", 1, "probe-")
	c := f.Dial(t, 2)
	mustBind(t, c, probe, "probe")
	c2 := f.Dial(t, 2)
	mustBind(t, c2, id, "room")
	for i := 1; i <= 3; i++ {
		if got := echo(t, c2); got.Served != int64(i) {
			t.Fatalf("echo %d: %+v", i, got)
		}
	}
	f.Kill(2) // the session owner dies with its sessions; no tombstone is ever sent
	_ = c.Close()
	_ = c2.Close()
	eventually(t, "the probe's binding from the dead node was retired", func() bool { return f.Ev.Count(probe, "ended") == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	moved, err := f.Actors(1).Drain(ctx, 8)
	if err != nil || moved != 2 {
		t.Fatalf("drain of the Actors' node: moved %d, %v", moved, err)
	}
	// The room moved with its state: a new session binds it on node 0 and it has
	// served 3.
	c3 := f.Connect(t, 0)
	mustBind(t, c3, id, "room")
	if got := echo(t, c3); got.Served != 4 || got.Node != f.Node(0).ID().RID {
		t.Fatalf("echo after the drain %+v, want served 4 on node 0", got)
	}
}

// Issue 30, item 1: a move whose seal is waiting for a session owner that died
// completes once membership declares the owner failed, instead of failing at the
// seal's deadline: the binding ends at the source and the Actor moves without it.
func TestIssue30_SealWaitingForADeadSessionOwnerCompletesWhenItIsDeclaredFailed(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "probe-")
	c := f.Dial(t, 2)
	mustBind(t, c, id, "probe")
	moved := moveBehindHeldTurn(t, f, c, id)
	dead := f.Node(2).ID()
	f.Kill(2) // no leave: node 1 learns of it only by failure detection
	_ = c.Close()
	if !f.Node(1).Membership().IsLive(dead) {
		t.Fatal("node 1 declared node 2 failed before the seal was sent: the test needs a slower failure detection")
	}
	f.Ev.Wake() // the seal goes to the dead session owner and waits
	if err := <-moved; err != nil {
		t.Fatalf("move while its session owner died: %v", err)
	}
	if n := f.Ev.Count(id, "ended"); n != 1 {
		t.Fatalf("the binding of the dead session ended %d times", n)
	}
}
