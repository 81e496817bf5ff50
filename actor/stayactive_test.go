package actor_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// Stay asks a stayer Actor to hold itself active (or let go).
type Stay struct{ On bool }

type stayer struct{}

func (stayer) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*Stay); ok {
		ctx.StayActive(m.On)
		_ = ctx.Reply(Stay{On: m.On})
	}
}

// An Actor that holds itself active (Context.StayActive: a session worker serving
// presentations without a binding) is not collected however long it is silent; once it
// lets go it is collected like any idle Actor.
func TestStayActive_HeldActorIsNotCollected(t *testing.T) {
	const idle = 100 * time.Millisecond
	c := meshtest.Start(t, 1, meshtest.Options{Config: func(_ int, cfg *meshnode.Config) {
		cfg.ActorIdleTimeout = idle
		cfg.Kinds = []actor.Kind{{Name: "stayer", New: func() actor.Actor { return stayer{} }}}
		cfg.Messages = []actor.MessageType{actor.MessageOf[Stay]("test.stay")}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	h := c.Node(0).Actors()
	active := func(id string) bool {
		for _, a := range h.Active() {
			if a.ID == id {
				return true
			}
		}
		return false
	}
	for _, id := range []string{"held", "free"} {
		if _, err := h.Request(ctx, actor.Address{Kind: "stayer", ID: id}, Stay{On: id == "held"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitUntil(wait, func() bool { return !active("free") }); err != nil {
		t.Fatal("the Actor that did not hold itself was not collected")
	}
	// The sweeper has run many times since the held Actor's last message.
	deadline := time.Now().Add(10 * idle)
	for time.Now().Before(deadline) {
		if !active("held") {
			t.Fatal("an Actor that holds itself active was collected")
		}
		time.Sleep(idle / 2)
	}
	if _, err := h.Request(ctx, actor.Address{Kind: "stayer", ID: "held"}, Stay{On: false}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitUntil(wait, func() bool { return !active("held") }); err != nil {
		t.Fatal("an Actor that let go was not collected")
	}
}
