package topic_test

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/test/fleet"
)

// Issue 26, item 8: unsubscribe and session close stop delivery, and the registry
// follows: the node that no longer has subscribers gets no more records. So does the
// sample's room.unfollow. Every topic Request of the sample answers exactly {} (item 6;
// subscribe and publish check it in their helpers).
func TestTopics_UnsubscribeAndCloseStopDelivery(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	leaver := f.Connect(t, 1)
	leaving := listen(leaver)
	subscribe(t, leaver, "news")
	closer := f.Dial(t, 2)
	subscribe(t, closer, "news")
	stayer := f.Connect(t, 2)
	staying := listen(stayer)
	subscribe(t, stayer, "news")
	pub := f.Connect(t, 0)
	publish(t, pub, "news", 1)
	next(t, leaving, "before unsubscribing")
	next(t, staying, "before the close")

	answersEmpty(t, leaver, "unsubscribe", map[string]string{"topic": "news"})
	_ = closer.Close()
	eventually(t, "node 0 knows one subscriber is left", func() bool {
		p := f.Node(0).Topics().Presence("news")
		return p.Subscribers == 1 && len(p.Nodes) == 1 && p.Nodes[0].RID == f.Node(2).ID().RID
	})
	before := f.Node(0).Topics().Stats().PublishRecords
	publish(t, pub, "news", 2)
	if r := next(t, staying, "after"); string(r.Payload) != "2" || r.Seq != 2 {
		t.Fatalf("the staying subscriber got %+v", r)
	}
	if got := f.Node(0).Topics().Stats().PublishRecords - before; got != 1 {
		t.Fatalf("%d records for a publish to subscribers on one other node, want 1", got)
	}
	// The leaver got nothing meanwhile, shown without listening for a silence: it
	// subscribes again, and the next message it gets must be the next publish (one
	// publisher's order holds, so message 2 written to it would come first).
	subscribe(t, leaver, "news")
	eventually(t, "node 0 knows the leaver subscribed again", func() bool {
		return f.Node(0).Topics().Presence("news").Subscribers == 2
	})
	publish(t, pub, "news", 3)
	if r := next(t, leaving, "the leaver, subscribed again"); string(r.Payload) != "3" || r.Seq != 3 {
		t.Fatalf("the leaver's next message after it subscribed again is %+v, want message 3 (message 2 reached it after it unsubscribed)", r)
	}

	// room.unfollow: two sessions of node 2 follow a room of node 1 that a session of
	// node 0 makes say things; after one unfollows, the other still gets what the room
	// says and it does not. Shown without listening for a silence: it follows again and
	// the room says one more thing, which must be the next room.said it gets (one
	// publisher's order holds for every follower, so a message written to it while it
	// did not follow would come first).
	room := f.IDOn(t, "room", 1, "room-")
	unfollower, follower := f.Connect(t, 2), f.Connect(t, 2)
	unfollowing, following := listen(unfollower, "room.said"), listen(follower, "room.said")
	answersEmpty(t, unfollower, "room.follow", map[string]string{"actor": room})
	answersEmpty(t, follower, "room.follow", map[string]string{"actor": room})
	speaker := f.Connect(t, 0)
	mustRequest(t, speaker, "bind", map[string]string{"actor": room})
	say := func(i int) {
		t.Helper()
		if err := speaker.Send(context.Background(), "room.say", map[string]int{"i": i}); err != nil {
			t.Fatalf("room.say %d: %v", i, err)
		}
	}
	said := func(ch chan received, i int, who string) {
		t.Helper()
		if r := next(t, ch, who); r.Topic != "room:"+room || r.MetaSeq != uint64(i) || string(r.Payload) != `{"i":`+itoa(i)+`}` {
			t.Fatalf("%s: got %+v, want room.said %d", who, r, i)
		}
	}
	say(1)
	said(unfollowing, 1, "the unfollower, following")
	said(following, 1, "the follower")
	answersEmpty(t, unfollower, "room.unfollow", map[string]string{"actor": room})
	if p := f.Node(2).Topics().Presence("room:" + room); p.Subscribers != 1 {
		t.Fatalf("node 2 counts %d followers after one of 2 unfollowed, want 1", p.Subscribers)
	}
	say(2)
	said(following, 2, "the follower, after the other unfollowed")
	answersEmpty(t, unfollower, "room.follow", map[string]string{"actor": room})
	say(3)
	said(following, 3, "the follower")
	said(unfollowing, 3, "the unfollower, following again (room.said 2 reached it after room.unfollow)")
}

// Issue 26, item 8: a node killed with subscribers on it is dropped from the registry
// (presence, records per publish) and the others keep receiving.
func TestTopics_NodeKilledWithSubscribersIsDroppedFromTheRegistry(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	for i := 1; i < 3; i++ {
		subscribe(t, f.Connect(t, i), "news")
	}
	survivor := f.Connect(t, 1)
	got := listen(survivor)
	subscribe(t, survivor, "news")
	eventually(t, "node 0 sees 3 subscribers", func() bool { return f.Node(0).Topics().Presence("news").Subscribers == 3 })
	f.Kill(2)
	eventually(t, "node 0 dropped the dead node's subscriber", func() bool {
		p := f.Node(0).Topics().Presence("news")
		return p.Subscribers == 2 && len(p.Nodes) == 1
	})
	pub := f.Connect(t, 0)
	before := f.Node(0).Topics().Stats()
	for n := 1; n <= 5; n++ {
		publish(t, pub, "news", n)
		if r := next(t, got, "a survivor's message"); r.Seq != uint64(n) {
			t.Fatalf("message %d: %+v", n, r)
		}
	}
	after := f.Node(0).Topics().Stats()
	if d := after.PublishRecords - before.PublishRecords; d != 5 {
		t.Fatalf("%d records for 5 publishes to one live node with subscribers", d)
	}
	if after.SendFailures != before.SendFailures {
		t.Fatalf("sends toward the dead node: %+v", after)
	}
}
