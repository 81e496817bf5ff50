package mesh

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// memberlist's UpdateNode reads this node's own address fields without its lock while
// another UpdateNode writes them under it, so the node's two callers (the metadata
// loop and Leave) must never run it at once. Found by CI: the race detector caught
// ExampleStart's second node leaving while its metadata loop re-gossiped after the
// join. Here the loop is made to re-gossip continuously while the node leaves, and
// each re-gossip is slowed so that two at once would overlap.
func TestMeta_LeaveNeverRegossipsAlongsideTheMetadataLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var active, overlaps, calls atomic.Int32
	hook := func() {
		if active.Add(1) > 1 {
			overlaps.Add(1)
		}
		calls.Add(1)
		time.Sleep(2 * time.Millisecond)
		active.Add(-1)
	}
	for range 5 {
		n, err := Start(ctx, quiet(Config{updateHook: hook}))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		busy := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-n.stop:
					return
				default:
				}
				// The loop re-gossips when the version it wrote differs from the one it
				// wants: make it differ, then ask for a review.
				n.metaMu.Lock()
				n.metaV3 = !n.metaV3
				n.metaMu.Unlock()
				n.members.signalReview()
				if i == 20 {
					close(busy)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
		<-busy
		if err := n.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	if calls.Load() < 10 {
		t.Fatalf("%d re-gossips: the test did not exercise the loop", calls.Load())
	}
	if o := overlaps.Load(); o != 0 {
		t.Fatalf("%d re-gossips ran alongside another", o)
	}
}
