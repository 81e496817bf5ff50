package topic_test

import (
	"strconv"
	"testing"

	"github.com/meshnode/meshnode/test/fleet"
)

// Issue 26, items 1, 2, 3 and 6: subscribers on every node of three receive every
// publish, in order, with the publisher's sequence; a publish crosses to each node
// with subscribers exactly once (records per publish = nodes with subscribers other
// than the publisher's).
func TestTopics_FanOutToEveryNodeOncePerNode(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	const perNode, messages = 3, 20
	var subs []chan received
	for i := 0; i < 3; i++ {
		for k := 0; k < perNode; k++ {
			c := f.Connect(t, i)
			subs = append(subs, listen(c))
			subscribe(t, c, "news")
		}
	}
	pub := f.Connect(t, 0)
	before := f.Node(0).Topics().Stats()
	for n := 1; n <= messages; n++ {
		publish(t, pub, "news", map[string]int{"n": n})
	}
	for i, ch := range subs {
		for n := 1; n <= messages; n++ {
			r := next(t, ch, "subscriber message")
			if r.Seq != uint64(n) || r.MetaSeq != uint64(n) || r.Topic != "news" || string(r.Payload) != `{"n":`+strconv.Itoa(n)+`}` {
				t.Fatalf("subscriber %d, message %d: %+v", i, n, r)
			}
		}
	}
	after := f.Node(0).Topics().Stats()
	if got := after.PublishRecords - before.PublishRecords; got != 2*messages {
		t.Fatalf("%d topicPublish records for %d publishes to subscribers on 2 other nodes, want %d", got, messages, 2*messages)
	}
	for i := 1; i < 3; i++ {
		if d := f.Node(i).Topics().Stats().Deliveries; d != perNode*messages {
			t.Fatalf("node %d wrote %d deliveries, want %d", i, d, perNode*messages)
		}
	}
}
