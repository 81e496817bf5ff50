package topic_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/test/fleet"
	"github.com/meshnode/meshnode/topic"
)

// An in-process subscriber (SubscribeLocal: the plugin services' server dispatching a
// session worker's updates) is a subscriber of its node like a session: a publish made
// anywhere after SubscribeLocal returned reaches it, once per node whatever the number
// of local subscriptions, in order with the publisher's sequence; after Close nothing
// reaches it and the node's count falls back.
func TestTopics_LocalSubscribersAreSubscribersOfTheirNode(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	type got struct {
		mu  sync.Mutex
		seq []uint64
		pay []string
	}
	var a, b got
	recv := func(g *got) topic.Receiver {
		return func(d topic.Delivery) bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			if d.Topic == "svc-updates" && d.Message.Name == "topic.message" {
				g.seq = append(g.seq, d.Seq)
				g.pay = append(g.pay, string(d.Message.Payload))
			}
			return true
		}
	}
	la, err := f.Node(1).Topics().SubscribeLocal(ctx, "svc-updates", recv(&a))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := f.Node(1).Topics().SubscribeLocal(ctx, "svc-updates", recv(&b))
	if err != nil {
		t.Fatal(err)
	}
	if p := f.Node(0).Topics().Presence("svc-updates"); p.Subscribers != 2 {
		eventually(t, "node 0 counts node 1's two local subscribers", func() bool {
			return f.Node(0).Topics().Presence("svc-updates").Subscribers == 2
		})
	}
	pub := f.Connect(t, 0)
	before := f.Node(0).Topics().Stats().PublishRecords
	const messages = 10
	for n := 1; n <= messages; n++ {
		publish(t, pub, "svc-updates", map[string]int{"n": n})
	}
	for _, g := range []*got{&a, &b} {
		eventually(t, "every message reaches both local subscribers", func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.seq) == messages
		})
		g.mu.Lock()
		for i, s := range g.seq {
			if s != uint64(i+1) || g.pay[i] != `{"topic":"svc-updates","payload":{"n":`+strconv.Itoa(i+1)+`},"seq":`+strconv.Itoa(i+1)+`}` {
				t.Errorf("local delivery %d: seq %d payload %s", i, s, g.pay[i])
			}
		}
		g.mu.Unlock()
	}
	if got := f.Node(0).Topics().Stats().PublishRecords - before; got != messages {
		t.Fatalf("%d records for %d publishes to one node with two local subscribers, want %d", got, messages, messages)
	}
	la.Close()
	lb.Close()
	lb.Close() // closing again does nothing
	eventually(t, "node 0 sees node 1's subscribers gone", func() bool {
		return f.Node(0).Topics().Presence("svc-updates").Subscribers == 0
	})
	publish(t, pub, "svc-updates", map[string]int{"n": 99})
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seq) != messages {
		t.Fatalf("a closed local subscription got %d messages, want %d", len(a.seq), messages)
	}
	if _, err := f.Node(1).Topics().SubscribeLocal(ctx, "bad name", recv(&a)); err == nil {
		t.Fatal("a local subscription to a bad name was accepted")
	}
}
