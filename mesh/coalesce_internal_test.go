package mesh

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh/wire"
)

// A placeholder that protoactor lost (an endpoint writer that stopped drops its queue)
// does not strand the records behind it: the node's sweep posts another, and the
// records queued after the lost one arrive, in order.
func TestCoalesce_LostPlaceholderIsPostedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := startPair(t, ctx, Config{})
	var got atomic.Uint64
	b.Records().Handle(wire.CmdBoundSessionBind, func(_ NodeID, rec *wire.Record) {
		got.Store(rec.Body.(*wire.BoundSessionBind).Correlation)
	})
	to := b.ID()
	l := a.flow.link(to)
	if l == nil {
		t.Fatal("no link to a live member")
	}
	// Play a lost placeholder: the outbox believes one is in the writer's queue.
	l.mu.Lock()
	l.outbox.posted, l.outbox.postedAt = true, time.Now()
	l.mu.Unlock()
	rec := func(corr uint64) *wire.Record {
		return &wire.Record{Body: &wire.BoundSessionBind{
			Correlation: corr,
			Actor: wire.ActorRouteFence{Actor: wire.ActorRef{ID: "a", Generation: 1}, TargetNodeRID: to.RID,
				TargetNodeGeneration: to.Generation, ExpectedAuthorityOwnerGeneration: 1, ExpectedOwnerLeaseGeneration: 1},
			SessionRID: "s",
			Binding:    wire.BindingTransition{State: wire.BindingActive, Generation: 1},
		}}
	}
	start := time.Now()
	for i := uint64(1); i <= 3; i++ {
		if err := a.Records().Send(ctx, to, rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	for got.Load() != 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("records behind a lost placeholder never arrived (last %d)", got.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if waited := time.Since(start); waited < placeholderStale {
		t.Fatalf("records arrived after %v, before the sweep could repost: the placeholder was not lost", waited)
	}
}
