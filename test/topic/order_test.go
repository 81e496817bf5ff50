package topic_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/test/fleet"
)

// Issue 26, item 3: the messages of one publisher to a topic reach every subscriber in
// publish order, across relocations of the publishing Actor (order is per ActorId):
// a room followed from every node says N things while it moves 1 -> 2 -> 0; every
// follower gets room.said 1..N, each once, with sequences 1..N from one publisher.
func TestTopics_OrderPerPublisherAcrossRelocations(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	var followers []chan received
	for i := 0; i < 3; i++ {
		c := f.Connect(t, i)
		followers = append(followers, listen(c, "room.said"))
		mustRequest(t, c, "room.follow", map[string]string{"actor": id})
	}
	// One more follower paces the moves: they start once a third, then two thirds, of
	// what the room says has reached it.
	pacer := f.Connect(t, 1)
	progress := listen(pacer, "room.said")
	mustRequest(t, pacer, "room.follow", map[string]string{"actor": id})
	speaker := f.Connect(t, 0)
	mustRequest(t, speaker, "bind", map[string]string{"actor": id})

	const says = 300
	var wg sync.WaitGroup
	sendErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= says; i++ {
			if err := speaker.Send(context.Background(), "room.say", map[string]int{"i": i}); err != nil {
				sendErr <- err
				return
			}
			time.Sleep(time.Millisecond) // pacing, so that the moves fall among the says
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	seen := 0
	for k, to := range []int{2, 0} {
		for seen < says*(k+1)/3 {
			next(t, progress, "the pacer's message")
			seen++
		}
		if _, err := f.Actors(to).Relocate(ctx, id, f.Node(to).ID().RID); err != nil {
			t.Fatalf("relocate to node %d: %v", to, err)
		}
	}
	wg.Wait()
	select {
	case err := <-sendErr:
		t.Fatal(err)
	default:
	}
	for k, ch := range followers {
		var pub string
		for i := 1; i <= says; i++ {
			r := next(t, ch, "follower message")
			if r.MetaSeq != uint64(i) || string(r.Payload) != `{"i":`+itoa(i)+`}` {
				t.Fatalf("follower %d, message %d: seq %d payload %s: lost, duplicated or reordered", k, i, r.MetaSeq, r.Payload)
			}
			if pub == "" {
				pub = r.Publisher
			} else if r.Publisher != pub {
				t.Fatalf("follower %d: the publisher changed from %q to %q across the moves", k, pub, r.Publisher)
			}
		}
	}
	// The room published on each of the three nodes.
	for i := 0; i < 3; i++ {
		if st := f.Node(i).Topics().Stats(); st.Publishes == 0 {
			t.Errorf("node %d published nothing: the moves did not fall among the says (%+v)", i, st)
		}
	}
}
