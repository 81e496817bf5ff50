package mesh

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh/wire"
)

// A record for an inline handler that finds nothing waiting for the record receiver
// is handled on the goroutine that received it (not in the receiver actor's turn), and
// the receiver's count of waiting records comes back to zero after records went both
// ways, so the fast path stays on.
func TestHandleInline_RunsOnTheReaderAndThePendingCountReturnsToZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := startPair(t, ctx, Config{})
	var onReceiver, inline, viaReceiver atomic.Int64
	b.Records().HandleInline(wire.CmdReply, func(NodeID, *wire.Record) {
		buf := make([]byte, 16<<10)
		if strings.Contains(string(buf[:runtime.Stack(buf, false)]), "recordsActor") {
			onReceiver.Add(1)
		} else {
			inline.Add(1)
		}
	})
	b.Records().Handle(wire.CmdBoundSessionBind, func(NodeID, *wire.Record) { viaReceiver.Add(1) })
	to := b.ID()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(time.Millisecond):
			}
		}
	}
	const rounds = 20
	for i := uint64(1); i <= rounds; i++ {
		bind := &wire.Record{Body: &wire.BoundSessionBind{Correlation: i,
			Actor:      wire.ActorRouteFence{Actor: wire.ActorRef{ID: "a", Generation: 1}, TargetNodeRID: to.RID, TargetNodeGeneration: to.Generation, ExpectedAuthorityOwnerGeneration: 1, ExpectedOwnerLeaseGeneration: 1},
			SessionRID: "s", Binding: wire.BindingTransition{State: wire.BindingActive, Generation: 1}}}
		if err := a.Records().Send(ctx, to, bind); err != nil {
			t.Fatal(err)
		}
		waitFor("the bind to be handled", func() bool { return viaReceiver.Load() == int64(i) && b.ownPending.Load() == 0 })
		if err := a.Records().Send(ctx, to, &wire.Record{Body: &wire.Reply{Correlation: i, Result: wire.ResultOK}}); err != nil {
			t.Fatal(err)
		}
		waitFor("the reply to be handled", func() bool { return inline.Load()+onReceiver.Load() == int64(i) })
	}
	if onReceiver.Load() != 0 || inline.Load() != rounds {
		t.Fatalf("of %d replies sent with nothing waiting at the receiver, %d ran inline and %d on the receiver", rounds, inline.Load(), onReceiver.Load())
	}
	if n := b.ownPending.Load(); n != 0 {
		t.Fatalf("receiver pending count %d after every record was handled, want 0", n)
	}
}
