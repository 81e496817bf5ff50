package topic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
	"github.com/meshnode/meshnode/topic"
)

// score is what room.score publishes, in MessagePack.
type score struct {
	Player string   `json:"player" msgpack:"player"`
	Points int      `json:"points" msgpack:"points"`
	Tags   []string `json:"tags" msgpack:"tags"`
}

// announcer is an Actor that subscribes its bound session to "ann" (room.join), says
// how many sessions follow "ann" (room.count), and publishes to it (room.announce); it
// publishes a score to "scores" in MessagePack (room.score).
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
	case "room.score":
		// What the client sent in JSON, published in MessagePack.
		var sc score
		if err := p.Decode(&sc); err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		seq, err := ctx.Publish("scores", "ann.score", sc, actor.WithCodec(wire.CodecMsgPack))
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

// Issue 26, items 1 and 5: an Actor unsubscribes the session bound to it
// (ctx.UnsubscribeSession): the fleet's presence drops by exactly that session, and a
// later publish reaches the other subscriber of the session's node but not it. Proof
// that nothing was written to it, without waiting for a silence: the Actor subscribes
// it again and one more message is published; the order of one publisher holds for
// every subscriber, so had the middle message been written to it, it would come first.
func TestTopics_ActorUnsubscribesItsSession(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{Config: func(cfg *meshnode.Config) {
		cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "announcer", New: func() actor.Actor { return announcer{} }})
	}})
	// The leaver and the witness connect to node 1; their Actors live on node 2.
	leaver, witness := f.Connect(t, 1), f.Connect(t, 1)
	leaving, witnessing := listen(leaver, "ann.msg"), listen(witness, "ann.msg")
	mustRequest(t, leaver, "bind", map[string]string{"actor": f.IDOn(t, "announcer", 2, "leaver-"), "kind": "announcer"})
	mustRequest(t, witness, "bind", map[string]string{"actor": f.IDOn(t, "announcer", 2, "witness-"), "kind": "announcer"})
	mustRequest(t, leaver, "room.join", map[string]string{})
	mustRequest(t, witness, "room.join", map[string]string{})
	host := f.Connect(t, 0)
	mustRequest(t, host, "bind", map[string]string{"actor": "the-host", "kind": "announcer"})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	count := func() int {
		var out struct{ Subscribers int }
		if err := host.Request(ctx, "room.count", map[string]int{}, &out); err != nil {
			t.Fatalf("room.count: %v", err)
		}
		return out.Subscribers
	}
	// presence holds when every node sees n subscribers to "ann", all of them on node 1.
	presence := func(n int) bool {
		for i := 0; i < 3; i++ {
			p := f.Node(i).Topics().Presence("ann")
			if p.Subscribers != n || len(p.Nodes) != 1 || p.Nodes[0].RID != f.Node(1).ID().RID || p.Nodes[0].Subscribers != n {
				return false
			}
		}
		return true
	}
	announce := func(n int) {
		t.Helper()
		var out struct{ Seq uint64 }
		if err := host.Request(ctx, "room.announce", map[string]int{"n": n}, &out); err != nil || out.Seq != uint64(n) {
			t.Fatalf("announce %d: %+v %v", n, out, err)
		}
	}
	expect := func(ch chan received, n int, who string) {
		t.Helper()
		if r := next(t, ch, who); r.MetaSeq != uint64(n) || string(r.Payload) != `{"n":`+itoa(n)+`}` {
			t.Fatalf("%s: got %+v, want announcement %d", who, r, n)
		}
	}

	eventually(t, "every node and the Actor see the 2 subscribers", func() bool { return presence(2) && count() == 2 })
	announce(1)
	expect(leaving, 1, "the leaver, subscribed")
	expect(witnessing, 1, "the witness")

	var body map[string]any
	if err := leaver.Request(ctx, "room.leave", map[string]string{}, &body); err != nil || len(body) != 0 {
		t.Fatalf("room.leave: %v %v", body, err)
	}
	eventually(t, "every node and the Actor see exactly 1 subscriber", func() bool { return presence(1) && count() == 1 })
	announce(2)
	expect(witnessing, 2, "the witness, after the leaver unsubscribed")

	mustRequest(t, leaver, "room.join", map[string]string{})
	eventually(t, "the leaver subscribed again", func() bool { return presence(2) && count() == 2 })
	announce(3)
	expect(witnessing, 3, "the witness")
	expect(leaving, 3, "the leaver, subscribed again (announcement 2 reached it while it was unsubscribed)")
	if n := len(leaving); n != 0 {
		t.Fatalf("the leaver got %d more messages", n)
	}
}

// Issue 26, item 1 and docs/topics.md: an Actor publishing with actor.WithCodec reaches
// every subscriber in that codec. The STREAM Send carries the codec's number (2,
// MessagePack; application/x-msgpack) and the value's MessagePack bytes, both to a
// subscriber on the Actor's node and to one on another node, where the publish arrived
// on a topicPublish record that names the payload's content type.
func TestTopics_ActorPublishesInAnotherCodec(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{Config: func(cfg *meshnode.Config) {
		cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "announcer", New: func() actor.Actor { return announcer{} }})
	}})
	type got struct {
		connector.Message
		topic, seq, publisher string
	}
	var subs []chan got
	for _, i := range []int{0, 2} { // node 0 hosts the publishing Actor; node 2 does not
		c := f.Connect(t, i)
		ch := make(chan got, 16)
		c.Handle("ann.score", func(m connector.Message) {
			g := got{Message: m}
			g.topic, _ = m.Metadata.Get(topic.MetaTopic)
			g.seq, _ = m.Metadata.Get(topic.MetaSequence)
			g.publisher, _ = m.Metadata.Get(topic.MetaPublisher)
			ch <- g
		})
		subscribe(t, c, "scores")
		subs = append(subs, ch)
	}
	host := f.Connect(t, 1)
	id := f.IDOn(t, "announcer", 0, "scorer-")
	mustRequest(t, host, "bind", map[string]string{"actor": id, "kind": "announcer"})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	scores := []score{{Player: "ada", Points: 7, Tags: []string{"first"}}, {Player: "bob", Points: 300000, Tags: []string{}}}
	for n, sc := range scores {
		var out struct{ Seq uint64 }
		if err := host.Request(ctx, "room.score", sc, &out); err != nil || out.Seq != uint64(n+1) {
			t.Fatalf("room.score %d: %+v %v", n+1, out, err)
		}
	}
	for k, ch := range subs {
		var pub string
		for n, sc := range scores {
			m := testkit.Await(t, ch, wait, "subscriber "+itoa(k)+"'s score "+itoa(n+1))
			want, err := codec.MsgPackCodec{}.Marshal(sc)
			if err != nil {
				t.Fatal(err)
			}
			if m.Codec != wire.CodecMsgPack || !bytes.Equal(m.Payload, want) {
				t.Fatalf("subscriber %d, score %d: codec %d payload %x, want codec %d (MessagePack) payload %x",
					k, n+1, m.Codec, m.Payload, wire.CodecMsgPack, want)
			}
			var back score
			if err := m.Decode(&back); err != nil || back.Player != sc.Player || back.Points != sc.Points || len(back.Tags) != len(sc.Tags) {
				t.Fatalf("subscriber %d, score %d: decoded %+v %v, want %+v", k, n+1, back, err, sc)
			}
			if m.topic != "scores" || m.seq != itoa(n+1) || m.publisher == "" || pub != "" && m.publisher != pub {
				t.Fatalf("subscriber %d, score %d: metadata topic %q seq %q publisher %q", k, n+1, m.topic, m.seq, m.publisher)
			}
			pub = m.publisher
		}
	}
}
