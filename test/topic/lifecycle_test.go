package topic_test

import (
	"testing"
	"time"

	"github.com/meshnode/meshnode/test/fleet"
)

// quiet is how long a test listens for a message that must not come: publishes take a
// few milliseconds to reach every node here.
const quiet = 300 * time.Millisecond

// Issue 26, item 8: unsubscribe and session close stop delivery, and the registry
// follows: the node that no longer has subscribers gets no more records.
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

	mustRequest(t, leaver, "unsubscribe", map[string]string{"topic": "news"})
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
	none(t, leaving, quiet, "after unsubscribing")
	if got := f.Node(0).Topics().Stats().PublishRecords - before; got != 1 {
		t.Fatalf("%d records for a publish to subscribers on one other node, want 1", got)
	}
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
