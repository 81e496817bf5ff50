package topic_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/test/fleet"
)

// announcer is an Actor that subscribes its bound session to "ann" (room.join), says
// how many sessions follow "ann" (room.count), and publishes to it (room.announce).
type announcer struct{}

func (announcer) Receive(ctx *actor.Context) {
	p, ok := ctx.Message().(*actor.SessionPacket)
	if !ok || !p.Request {
		return
	}
	switch p.Name {
	case "room.join":
		if err := ctx.SubscribeSession("ann"); err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		_ = ctx.Reply(map[string]string{})
	case "room.leave":
		_ = ctx.UnsubscribeSession("ann")
		_ = ctx.Reply(map[string]string{})
	case "room.count":
		_ = ctx.Reply(map[string]int{"subscribers": ctx.Subscribers("ann")})
	case "room.announce":
		seq, err := ctx.Publish("ann", "ann.msg", json.RawMessage(p.Payload))
		if err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		_ = ctx.Reply(map[string]uint64{"seq": seq})
	case "room.bad":
		_, err := ctx.Publish("bad name", "ann.msg", 1)
		_ = ctx.ReplyError(err)
	}
}

// Issue 26, items 1 and 5: an Actor subscribes the session bound to it (on another node
// than the Actor), publishes to a topic, and reads how many sessions of the fleet
// subscribe to it.
func TestTopics_ActorSubscribesItsSessionPublishesAndCounts(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{Config: func(cfg *meshnode.Config) {
		cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "announcer", New: func() actor.Actor { return announcer{} }})
	}})
	var sessions []chan received
	for i := 0; i < 3; i++ {
		c := f.Connect(t, i)
		sessions = append(sessions, listen(c, "ann.msg"))
		id := f.IDOn(t, "announcer", (i+1)%3, "ann-")
		mustRequest(t, c, "bind", map[string]string{"actor": id, "kind": "announcer"})
		mustRequest(t, c, "room.join", map[string]string{})
	}
	host := f.Connect(t, 0)
	mustRequest(t, host, "bind", map[string]string{"actor": "the-host", "kind": "announcer"})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	eventually(t, "the Actor counts 3 subscribers", func() bool {
		var out struct{ Subscribers int }
		return host.Request(ctx, "room.count", map[string]int{}, &out) == nil && out.Subscribers == 3
	})
	for n := 1; n <= 3; n++ {
		var out struct{ Seq uint64 }
		if err := host.Request(ctx, "room.announce", map[string]int{"n": n}, &out); err != nil || out.Seq != uint64(n) {
			t.Fatalf("announce %d: %+v %v", n, out, err)
		}
	}
	for k, ch := range sessions {
		for n := 1; n <= 3; n++ {
			r := next(t, ch, "an announcement")
			if r.MetaSeq != uint64(n) || string(r.Payload) != `{"n":`+itoa(n)+`}` || r.Publisher == "" {
				t.Fatalf("session %d, announcement %d: %+v", k, n, r)
			}
		}
	}
	if err := request(t, host, "room.bad", map[string]int{}); remoteCode(err) != "invalid_operation" {
		t.Fatalf("an Actor's publish to a bad name: %v", err)
	}
}
