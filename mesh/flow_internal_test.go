package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh/meshpb"
)

// The acknowledgement a receiver owes goes out as soon as a quarter of the window has
// arrived, counted in records as the sender counts them: a coalesced envelope carrying
// that many records is acknowledged at once, not when the ack timer fires (counted in
// envelopes, a one-way flood of coalesced records waited on its window every 8,192
// records).
func TestFlow_ACoalescedEnvelopeOfAQuarterWindowIsAcknowledgedAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const window = 16
	a, b := startPair(t, ctx, Config{PeerWindowRecords: window})
	l := b.flow.link(a.ID())
	if l == nil {
		t.Fatal("no link to a live member")
	}
	from, to := a.ID(), b.ID()
	envelope := func(seq uint64, records int) *meshpb.Envelope {
		var batch []byte
		for range records {
			batch = appendBatchRecord(batch, "some-actor", [][]byte{[]byte("record")})
		}
		return &meshpb.Envelope{FromRid: from.RID, FromGeneration: from.Generation, ToRid: to.RID, ToGeneration: to.Generation,
			Seq: seq, Batch: batch}
	}
	l.arrived(envelope(1, window/4))
	if got := l.ackedSeq.Load(); got != 1 {
		t.Fatalf("after one envelope of %d records (a quarter of the window) the acknowledgement sent is %d, want 1 at once", window/4, got)
	}
}
