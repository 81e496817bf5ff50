package meshtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
)

// Incr asks a counter Actor to count one more; Count is its answer.
type (
	Incr  struct{}
	Count struct{ N int }
)

// counter counts the Incr requests its activation got.
type counter struct{ n int }

func (c *counter) Receive(ctx *actor.Context) {
	if _, ok := ctx.Message().(*Incr); ok {
		c.n++
		_ = ctx.Reply(Count{N: c.n})
	}
}

// A test of an Actor kind on a fleet of three in-process nodes: request it from one
// node wherever it lives, read the records that crossed node boundaries, crash the node
// it lives on, and restart that node under a new generation.
//
// meshtest needs the test's testing.TB (it stops the fleet in t.Cleanup and fails the
// test when the fleet does not start), so this example is compiled but not run: the
// body belongs in a func TestXxx(t *testing.T).
func ExampleStart() {
	var t *testing.T // the test's own t

	c := meshtest.Start(t, 3, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.Kinds = []actor.Kind{{Name: "counter", New: func() actor.Actor { return &counter{} }}}
		cfg.Messages = []actor.MessageType{
			actor.MessageOf[Incr]("example.incr"),
			actor.MessageOf[Count]("example.count"),
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	to := actor.Address{Kind: "counter", ID: "c-1"}

	// Where does placement put c-1? Request it from another node, so the request
	// crosses a node boundary.
	where, err := c.Node(0).Actors().Lookup(ctx, to.Kind, to.ID)
	if err != nil {
		t.Fatal(err)
	}
	home := 0
	for i := 0; i < c.Len(); i++ {
		if c.Node(i).ID() == where.Node {
			home = i
		}
	}
	from := (home + 1) % c.Len()
	c.Tap().Reset()
	if _, err := c.Node(from).Actors().Request(ctx, to, Incr{}); err != nil {
		t.Fatal(err)
	}
	// The tap saw the request (record 24) and its reply (record 20), each on both
	// sides of the boundary.
	if cmds := c.Tap().Commands(); cmds[wire.CmdActorSend] == 0 || cmds[wire.CmdReply] == 0 {
		t.Fatalf("records seen: %v", cmds)
	}

	// Crash the Actor's node: the others detect it as failed, and the next request
	// activates c-1 anew on a node that is left (its count starts over).
	c.Kill(home)
	if err := c.WaitConverged(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	v, err := c.Node(from).Actors().Request(ctx, to, Incr{})
	if err != nil {
		t.Fatal(err)
	}
	if n := v.(*Count).N; n != 1 {
		t.Fatalf("count %d after the failover, want 1", n)
	}

	// Restart the node: same RID, a new and larger generation.
	before := c.Node(home).ID()
	after := c.Restart(home).ID()
	if after.RID != before.RID || after.Generation <= before.Generation {
		t.Fatalf("restart: %v after %v", after, before)
	}
	if err := c.WaitConverged(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
