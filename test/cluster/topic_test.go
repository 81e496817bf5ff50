package cluster

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/connector"
)

// Issue 26, item 8 with real processes: sessions of three meshnode processes subscribe
// to a topic with the sample's Requests; a session of one publishes; every subscriber
// gets topic.message {topic,payload,seq} in order; unsubscribed and closed sessions
// stop getting them; a killed process's subscribers leave the registry and the others
// keep receiving.
func TestThreeProcessesTopics(t *testing.T) {
	procs := startFleet(t, 3, "test")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	type msg struct {
		Topic   string          `json:"topic"`
		Payload json.RawMessage `json:"payload"`
		Seq     uint64          `json:"seq"`
	}
	var subs []chan msg
	var clients []*connector.Connector
	for _, p := range procs {
		c := dial(t, p.Endpoints["tcp"])
		ch := make(chan msg, 64)
		c.Handle("topic.message", func(m connector.Message) {
			var v msg
			_ = json.Unmarshal(m.Payload, &v)
			ch <- v
		})
		var out map[string]any
		if err := c.Request(ctx, "subscribe", map[string]string{"topic": "lobby"}, &out); err != nil {
			t.Fatalf("subscribe on %s: %v", p.ID, err)
		}
		subs = append(subs, ch)
		clients = append(clients, c)
	}
	pub := dial(t, procs[0].Endpoints["tcp"])
	publish := func(n int) {
		t.Helper()
		var out map[string]any
		if err := pub.Request(ctx, "publish", map[string]any{"topic": "lobby", "payload": map[string]int{"n": n}}, &out); err != nil {
			t.Fatalf("publish %d: %v", n, err)
		}
	}
	expect := func(ch chan msg, n int, who string) {
		t.Helper()
		select {
		case m := <-ch:
			if m.Topic != "lobby" || m.Seq != uint64(n) || string(m.Payload) != `{"n":`+strconv.Itoa(n)+`}` {
				t.Fatalf("%s got %+v, want message %d", who, m, n)
			}
		case <-time.After(wait):
			t.Fatalf("%s got no message %d", who, n)
		}
	}
	for n := 1; n <= 5; n++ {
		publish(n)
	}
	for i, ch := range subs {
		for n := 1; n <= 5; n++ {
			expect(ch, n, procs[i].ID)
		}
	}
	var out map[string]any
	if err := clients[1].Request(ctx, "unsubscribe", map[string]string{"topic": "lobby"}, &out); err != nil {
		t.Fatal(err)
	}
	procs[2].Kill()
	publish(6)
	expect(subs[0], 6, "node-0 after the changes")
	// The unsubscribed session got nothing, shown without listening for a silence: it
	// subscribes again, and its next message must be the next publish (one publisher's
	// order holds, so message 6 written to it would come first). Message 7 goes out
	// until node-0 has heard of the subscription again (spread by the mesh), each
	// reaching node-0's own subscriber in order.
	if err := clients[1].Request(ctx, "subscribe", map[string]string{"topic": "lobby"}, &out); err != nil {
		t.Fatal(err)
	}
	for n := 7; ; n++ {
		publish(n)
		expect(subs[0], n, "node-0 while node-1 subscribes again")
		select {
		case m := <-subs[1]:
			if m.Seq < 7 {
				t.Fatalf("the session that unsubscribed got message %d after it had (its next after subscribing again: %+v)", m.Seq, m)
			}
			return
		case <-ctx.Done():
			t.Fatal("the session that subscribed again never heard a publish")
		default:
		}
		if n > 7+500 {
			t.Fatal("500 publishes and the session that subscribed again heard none")
		}
	}
}
