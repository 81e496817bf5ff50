package mesh_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
)

func replyRecord(corr uint64) *wire.Record {
	return &wire.Record{Body: &wire.Reply{Correlation: corr, Result: wire.ResultOK}}
}

// handledOrder records the correlations of the records a node handles, in the order
// their handlers finished.
type handledOrder struct {
	mu    sync.Mutex
	order []uint64
}

func (o *handledOrder) add(corr uint64) {
	o.mu.Lock()
	o.order = append(o.order, corr)
	o.mu.Unlock()
}

func (o *handledOrder) snapshot() []uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]uint64(nil), o.order...)
}

// A record whose handler was registered with HandleInline never overtakes a record
// of the same peer that waits for the record receiver: while the receiver's handler of
// the first record is held, the inline records sent after it wait too, and every
// record is handled in the order sent. (The first handler waits for an inline record
// to be handled, up to a bound: an implementation that ran one early would finish it
// first.)
func TestHandleInline_NeverOvertakesARecordWaitingForTheReceiver(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{Config: coalescing})
	got := &handledOrder{}
	inlineRan := make(chan struct{}, 64)
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, func(_ mesh.NodeID, rec *wire.Record) {
		corr := rec.Body.(*wire.BoundSessionBind).Correlation
		if corr == 1 {
			select {
			case <-inlineRan:
			case <-time.After(300 * time.Millisecond):
			}
		}
		got.add(corr)
	})
	c.Node(1).Records().HandleInline(wire.CmdReply, func(_ mesh.NodeID, rec *wire.Record) {
		got.add(rec.Body.(*wire.Reply).Correlation)
		inlineRan <- struct{}{}
	})
	to := c.Node(1).ID()
	const records = 40 // odd correlations through the receiver, even ones inline
	for corr := uint64(1); corr <= records; corr++ {
		rec := bindRecord(corr, to)
		if corr%2 == 0 {
			rec = replyRecord(corr)
		}
		if err := c.Node(0).Records().Send(context.Background(), to, rec); err != nil {
			t.Fatalf("record %d: %v", corr, err)
		}
	}
	if err := c.WaitUntil(wait, func() bool { return len(got.snapshot()) == records }); err != nil {
		t.Fatalf("%d of %d records handled", len(got.snapshot()), records)
	}
	for i, corr := range got.snapshot() {
		if corr != uint64(i+1) {
			t.Fatalf("handled in the order %v, want 1..%d", got.snapshot(), records)
		}
	}
}

// An inline handler that panics on one record costs that record only, handled once:
// the node goes on handling what its peer sends, inline and through the receiver.
func TestHandleInline_PanickingHandlerDropsOnlyItsRecord(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{Config: coalescing})
	got := &handledOrder{}
	var panicked atomic.Int64
	c.Node(1).Records().HandleInline(wire.CmdReply, func(_ mesh.NodeID, rec *wire.Record) {
		corr := rec.Body.(*wire.Reply).Correlation
		if corr == 2 {
			panicked.Add(1)
			panic("handler bug")
		}
		got.add(corr)
	})
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, func(_ mesh.NodeID, rec *wire.Record) {
		got.add(rec.Body.(*wire.BoundSessionBind).Correlation)
	})
	to := c.Node(1).ID()
	for _, rec := range []*wire.Record{replyRecord(1), replyRecord(2), replyRecord(3), bindRecord(4, to), replyRecord(5)} {
		if err := c.Node(0).Records().Send(context.Background(), to, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitUntil(wait, func() bool { return len(got.snapshot()) == 4 }); err != nil {
		t.Fatalf("handled %v, want 1, 3, 4, 5", got.snapshot())
	}
	if o := got.snapshot(); o[0] != 1 || o[1] != 3 || o[2] != 4 || o[3] != 5 {
		t.Fatalf("handled %v, want 1, 3, 4, 5", o)
	}
	if n := panicked.Load(); n != 1 {
		t.Fatalf("the record whose handler panicked was handled %d times, want once", n)
	}
}
