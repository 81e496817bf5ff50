package actor_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
)

// The messages of the example. Registered with actor.MessageOf, they cross nodes
// encoded (msgpack by default); an Actor always receives a *T.
type (
	Square       struct{ N int }
	Squared      struct{ N int }
	SumOfSquares struct{ Of []int }
	Total        struct{ N int }
)

// squarer answers Square with Squared: a request answered with ctx.Reply.
type squarer struct{}

func (squarer) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*Square); ok {
		_ = ctx.Reply(Squared{N: m.N * m.N})
	}
}

// summer answers SumOfSquares by asking a squarer for each square: one Actor calling
// another with ctx.Request. The Context is also the activation's context.Context.
type summer struct{}

func (summer) Receive(ctx *actor.Context) {
	m, ok := ctx.Message().(*SumOfSquares)
	if !ok {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	total := 0
	for _, n := range m.Of {
		v, err := ctx.Request(rctx, actor.Address{Kind: "squarer", ID: "sq-1"}, Square{N: n})
		if err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		total += v.(*Squared).N
	}
	_ = ctx.Reply(Total{N: total})
}

// Two Actor kinds on one node, driven from outside any Actor through the node's
// actor.Host. An Address names an Actor by kind and ActorId; the directory activates it
// on demand wherever placement puts it in the mesh.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cfg := meshnode.TestConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Messages = []actor.MessageType{
		actor.MessageOf[Square]("example.square"),
		actor.MessageOf[Squared]("example.squared"),
		actor.MessageOf[SumOfSquares]("example.sum-of-squares"),
		actor.MessageOf[Total]("example.total"),
	}
	cfg.Kinds = []actor.Kind{
		{Name: "squarer", New: func() actor.Actor { return squarer{} }},
		{Name: "summer", New: func() actor.Actor { return summer{} }},
	}
	n, err := meshnode.Start(ctx, cfg)
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer n.Shutdown(context.Background())
	actors := n.Actors()

	v, err := actors.Request(ctx, actor.Address{Kind: "squarer", ID: "sq-1"}, Square{N: 7})
	if err != nil {
		fmt.Println("square:", err)
		return
	}
	fmt.Println("7² =", v.(*Squared).N)

	v, err = actors.Request(ctx, actor.Address{Kind: "summer", ID: "sum-1"}, SumOfSquares{Of: []int{1, 2, 3}})
	if err != nil {
		fmt.Println("sum:", err)
		return
	}
	fmt.Println("1² + 2² + 3² =", v.(*Total).N)

	for _, a := range actors.Active() {
		fmt.Println("active:", a.Kind, a.ID)
	}
	// Output:
	// 7² = 49
	// 1² + 2² + 3² = 14
	// active: squarer sq-1
	// active: summer sum-1
}
