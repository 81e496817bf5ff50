package binding_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
)

// room is the Actor sessions bind to. It sees the binding (SessionBound, SessionEnded)
// and the packets its session relays (*actor.SessionPacket); it answers a relayed
// Request with ctx.Reply and reaches the session with ctx.Push.
type room struct{}

func (room) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.SessionBound:
		_ = ctx.Push("room.welcome", "welcome to "+ctx.Self().ID)
	case *actor.SessionPacket:
		if m.Name == "room.shout" && m.Request {
			var text string
			if err := m.Decode(&text); err != nil {
				_ = ctx.ReplyError(fault.Errorf(fault.InvalidOperation, "room.shout needs a string"))
				return
			}
			_ = ctx.Reply(strings.ToUpper(text))
		}
	}
}

// A session handler binds its session to an Actor with Binder.Bind; from then on the
// session relays packets to the Actor (Binder.Relay), wherever in the mesh it lives, and
// the Actor's replies and pushes come back to the client.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cfg := meshnode.TestConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Streams = []string{"tcp://127.0.0.1:0"}
	cfg.Kinds = []actor.Kind{{Name: "room", New: func() actor.Actor { return room{} }}}
	cfg.Session = func(n *meshnode.Node) session.SessionType {
		return session.NewMux("rooms").
			// Request "join" {ID}: bind this session to room ID.
			Request("join", func(ctx context.Context, p *session.Packet) error {
				var id string
				if err := p.Decode(&id); err != nil {
					return err
				}
				bd, err := n.Binder().Bind(ctx, p.Peer, actor.Address{Kind: "room", ID: id})
				if err != nil {
					return err
				}
				return p.ReplyValue("joined " + bd.Actor.ID)
			}).
			// Every "room." packet goes to the bound room, which answers it.
			Prefix("room.", func(ctx context.Context, p *session.Packet) error {
				return n.Binder().Relay(ctx, p, "") // "": the session's only binding
			}).
			Type()
	}
	n, err := meshnode.Start(ctx, cfg)
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer n.Shutdown(context.Background())

	c, err := connector.New(n.Endpoints()[0], connector.Options{})
	if err != nil {
		fmt.Println("connector:", err)
		return
	}
	defer c.Close()
	pushes := make(chan string, 1)
	c.Handle("room.welcome", func(m connector.Message) {
		var s string
		_ = m.Decode(&s)
		pushes <- s
	})
	if err := c.Connect(ctx); err != nil {
		fmt.Println("connect:", err)
		return
	}

	var joined, shouted string
	if err := c.Request(ctx, "join", "lobby", &joined); err != nil {
		fmt.Println("join:", err)
		return
	}
	fmt.Println(joined)
	select {
	case s := <-pushes:
		fmt.Println("pushed:", s)
	case <-ctx.Done():
		fmt.Println("no push")
		return
	}
	if err := c.Request(ctx, "room.shout", "hello", &shouted); err != nil {
		fmt.Println("shout:", err)
		return
	}
	fmt.Println("relayed reply:", shouted)
	// Output:
	// joined lobby
	// pushed: welcome to lobby
	// relayed reply: HELLO
}
