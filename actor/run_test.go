package actor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// fragile panics on "boom" and counts every other message it gets.
type fragile struct{ others *atomic.Int64 }

func (f *fragile) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*actor.Message); ok {
		if m.Name == "boom" {
			panic("boom")
		}
		f.others.Add(1)
	}
}

// Records from another node that reach an Actor together (coalesced, they are one
// mailbox message) are still taken one at a time: once a turn stopped the Actor (the
// panic policy here) the records behind it are treated like messages still in its
// mailbox, so none of them reaches it and a Request among them is answered at once
// instead of running into its deadline.
func TestRun_RecordsBehindATurnThatStoppedTheActorAreAnswered(t *testing.T) {
	var others atomic.Int64
	c := meshtest.Start(t, 2, meshtest.Options{Config: func(_ int, cfg *meshnode.Config) {
		cfg.NoRecordCoalescing = false // this test is about records that travel together
		cfg.MaxPanics = 1
		cfg.Kinds = []actor.Kind{{Name: "fragile", New: func() actor.Actor { return &fragile{others: &others} }}}
	}})
	ctx := context.Background()
	to, err := c.Node(1).Actors().LookupOn(ctx, "fragile", "f", c.Node(1).ID().RID)
	if err != nil {
		t.Fatal(err)
	}
	sender := c.Node(0).Actors()
	before := c.Node(0).Records().FlowStats().Envelopes
	const booms = 200
	for i := range booms {
		if err := sender.Send(ctx, to, actor.Message{Name: "boom"}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = sender.Request(rctx, to, actor.Message{Name: "ask"})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request behind the stopping turn: %v, want a prompt refusal", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusal took %v: it waited for a deadline instead of being answered", d)
	}
	if n := others.Load(); n != 0 {
		t.Errorf("the stopped Actor still received %d messages", n)
	}
	if n := c.Node(0).Records().FlowStats().Envelopes - before; n >= booms+1 {
		t.Errorf("%d envelopes for %d records: nothing travelled together, so this test proved nothing", n, booms+1)
	}
}
