package meshnode_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
)

// Greet asks a greeter Actor for a greeting; Greeting is its answer.
type Greet struct{ Name string }
type Greeting struct{ Text string }

// greeter is a sample Actor kind: it answers Greet with a Greeting.
type greeter struct{}

func (greeter) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*Greet); ok {
		_ = ctx.Reply(Greeting{Text: "hello, " + m.Name + " (from " + ctx.Self().ID + ")"})
	}
}

// Start one node that serves STREAM clients on an OS-chosen port and hosts one Actor
// kind; a client connects with session/connector and makes requests.
func Example() {
	ctx := context.Background()

	cfg := meshnode.TestConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Streams = []string{"tcp://127.0.0.1:0"}
	cfg.Messages = []actor.MessageType{
		actor.MessageOf[Greet]("example.greet"),
		actor.MessageOf[Greeting]("example.greeting"),
	}
	cfg.Kinds = []actor.Kind{{Name: "greeter", New: func() actor.Actor { return greeter{} }}}
	// The session is given the node, so its handlers can reach the node's Actors.
	cfg.Session = func(n *meshnode.Node) session.SessionType {
		return session.NewMux("example").
			Request("echo", func(_ context.Context, p *session.Packet) error {
				return p.Reply(p.Codec, p.Payload)
			}).
			Request("greet", func(ctx context.Context, p *session.Packet) error {
				var name string
				if err := p.Decode(&name); err != nil {
					return err
				}
				v, err := n.Actors().Request(ctx, actor.Address{Kind: "greeter", ID: "g1"}, Greet{Name: name})
				if err != nil {
					return err
				}
				return p.ReplyValue(v.(*Greeting).Text)
			}).
			Type()
	}

	n, err := meshnode.Start(ctx, cfg)
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer n.Shutdown(ctx)

	c, err := connector.New(n.Endpoints()[0], connector.Options{})
	if err != nil {
		fmt.Println("connector:", err)
		return
	}
	defer c.Close()
	if err := c.Connect(ctx); err != nil {
		fmt.Println("connect:", err)
		return
	}

	var echoed, greeting string
	if err := c.Request(ctx, "echo", "ping", &echoed); err != nil {
		fmt.Println("echo:", err)
		return
	}
	if err := c.Request(ctx, "greet", "world", &greeting); err != nil {
		fmt.Println("greet:", err)
		return
	}
	fmt.Println(echoed)
	fmt.Println(greeting)
	// Output:
	// ping
	// hello, world (from g1)
}
