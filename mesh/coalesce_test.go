package mesh_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
)

// coalescing turns coalescing on whatever MESHNODE_TEST_FAST_PATHS says: these tests
// are about it.
func coalescing(_ int, cfg *meshnode.Config) { cfg.NoRecordCoalescing = false }

// inOrder collects the correlations of the bind records a node handles and checks
// they arrive in the order they were sent.
type inOrder struct {
	mu     sync.Mutex
	last   uint64
	n      int
	misord []uint64
}

func (o *inOrder) handle(_ mesh.NodeID, rec *wire.Record) {
	corr := rec.Body.(*wire.BoundSessionBind).Correlation
	o.mu.Lock()
	defer o.mu.Unlock()
	if corr <= o.last {
		o.misord = append(o.misord, corr)
	}
	o.last = corr
	o.n++
}

func (o *inOrder) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// Records sent toward one peer faster than protoactor's writer sends them are
// coalesced: fewer envelopes than records cross, every record arrives once and in
// order, and the record tap and the per-command counters still see each record.
func TestCoalesce_RecordsQueuedTogetherTravelInOneEnvelopeInOrder(t *testing.T) {
	const records = 5000
	rs := &readers{}
	c := meshtest.Start(t, 2, meshtest.Options{MeterProvider: rs.provider, Config: coalescing})
	got := &inOrder{}
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, got.handle)
	to := c.Node(1).ID()
	c.Tap().Reset()
	before := c.Node(0).Records().FlowStats().Envelopes
	for i := range records {
		if err := c.Node(0).Records().Send(context.Background(), to, bindRecord(uint64(i+1), to)); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if err := c.WaitUntil(wait, func() bool { return got.count() == records }); err != nil {
		t.Fatalf("%d of %d records arrived", got.count(), records)
	}
	if len(got.misord) > 0 {
		t.Fatalf("records out of order: %v", got.misord[:min(10, len(got.misord))])
	}
	envelopes := c.Node(0).Records().FlowStats().Envelopes - before
	t.Logf("%d records in %d envelopes", records, envelopes)
	if envelopes >= records {
		t.Errorf("%d envelopes for %d records: nothing was coalesced", envelopes, records)
	}
	var in, out int
	for _, r := range c.Tap().Records() {
		if r.Command != wire.CmdBoundSessionBind {
			continue
		}
		if r.Direction == mesh.Inbound {
			in++
		} else {
			out++
		}
	}
	if in != records || out != records {
		t.Errorf("tap saw %d records out and %d in, want %d each", out, in, records)
	}
	if n := rs.counter(t, 1, "meshnode.mesh.records", map[string]string{"command": "boundSessionBind", "direction": "in"}); n != records {
		t.Errorf("records counted in: %d, want %d", n, records)
	}
	if n := rs.counter(t, 0, "meshnode.mesh.envelopes", nil); n < envelopes {
		t.Errorf("meshnode.mesh.envelopes = %d, want at least %d", n, envelopes)
	}
}

// A lone record goes at once in an envelope of its own: nothing waits for a timer or
// for a later record (each record here is awaited before the next is sent).
func TestCoalesce_LoneRecordGoesAtOnce(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{NoTap: true, Config: coalescing})
	got := &inOrder{}
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, got.handle)
	to := c.Node(1).ID()
	before := c.Node(0).Records().FlowStats().Envelopes
	const records = 20
	for i := range records {
		if err := c.Node(0).Records().Send(context.Background(), to, bindRecord(uint64(i+1), to)); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitUntil(wait, func() bool { return got.count() == i+1 }); err != nil {
			t.Fatalf("record %d did not arrive on its own", i+1)
		}
	}
	if n := c.Node(0).Records().FlowStats().Envelopes - before; n != records {
		t.Errorf("%d envelopes for %d lone records, want one each", n, records)
	}
}

// With coalescing off (the switch the suites use to run without the fast path) every
// record is an envelope of its own.
func TestCoalesce_OffSendsOneEnvelopePerRecord(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{NoTap: true, Config: func(_ int, cfg *meshnode.Config) { cfg.NoRecordCoalescing = true }})
	got := &inOrder{}
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, got.handle)
	to := c.Node(1).ID()
	before := c.Node(0).Records().FlowStats().Envelopes
	const records = 500
	for i := range records {
		if err := c.Node(0).Records().Send(context.Background(), to, bindRecord(uint64(i+1), to)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitUntil(wait, func() bool { return got.count() == records }); err != nil {
		t.Fatalf("%d of %d records arrived", got.count(), records)
	}
	if len(got.misord) > 0 {
		t.Fatalf("records out of order: %v", got.misord[:min(10, len(got.misord))])
	}
	if n := c.Node(0).Records().FlowStats().Envelopes - before; n != records {
		t.Errorf("%d envelopes for %d records with coalescing off", n, records)
	}
}

// batchOf encodes records for the node's record receiver in the documented batch
// format (meshpb.Envelope.batch): uvarint target length, target, u8 frame count,
// three u32 frame lengths, the frames.
func batchOf(t *testing.T, recs ...*wire.Record) []byte {
	var b []byte
	for _, rec := range recs {
		frames, err := wire.Encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		b = binary.AppendUvarint(b, 0)
		b = append(b, byte(len(frames)))
		for i := range 3 {
			var n uint32
			if i < len(frames) {
				n = uint32(len(frames[i]))
			}
			b = binary.BigEndian.AppendUint32(b, n)
		}
		for _, f := range frames {
			b = append(b, f...)
		}
	}
	return b
}

// A malformed coalesced envelope from a peer is dropped whole and counted as a
// decode error: none of its records is handed on, and the peer's next envelope is
// delivered.
func TestCoalesce_MalformedBatchDroppedWholeAndCounted(t *testing.T) {
	rs := &readers{}
	c := meshtest.Start(t, 2, meshtest.Options{MeterProvider: rs.provider})
	got := &inOrder{}
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, got.handle)
	from, to := c.Node(0).ID(), c.Node(1).ID()
	good := batchOf(t, bindRecord(1, to), bindRecord(2, to))
	envelope := func(batch []byte) *meshpb.Envelope {
		return &meshpb.Envelope{FromRid: from.RID, FromGeneration: from.Generation, ToRid: to.RID, ToGeneration: to.Generation, Batch: batch}
	}
	for _, bad := range [][]byte{
		good[:len(good)-1],                                                 // the last frame cut short
		append(append([]byte{}, good...), 0),                               // a trailing partial record
		{0x00, 0x04, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 'Z'},              // four frames
		{0x00, 0x01, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 'Z'},              // a length for an absent frame
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // target length overflows
	} {
		meshtest.SendEnvelope(c.Node(0).Mesh(), c.Node(1).Mesh().RemoteAddr(), meshtest.RecordsActor, envelope(bad))
	}
	meshtest.SendEnvelope(c.Node(0).Mesh(), c.Node(1).Mesh().RemoteAddr(), meshtest.RecordsActor, envelope(good))
	if err := c.WaitUntil(wait, func() bool { return got.count() == 2 }); err != nil {
		t.Fatalf("%d records of the good batch arrived, want 2", got.count())
	}
	if got.count() != 2 || len(got.misord) > 0 {
		t.Fatalf("handled %d records (out of order: %v): a malformed batch leaked records", got.count(), got.misord)
	}
	if n := rs.counter(t, 1, "zlink.mesh_node.messages.dropped", map[string]string{"reason": mesh.DropDecodeError}); n != 5 {
		t.Errorf("decode_error drops: %d, want 5", n)
	}
}

// Records from many senders toward one peer at once are each delivered once.
func TestCoalesce_ConcurrentSendersEachRecordOnce(t *testing.T) {
	const senders, each = 8, 500
	c := meshtest.Start(t, 2, meshtest.Options{NoTap: true})
	var seen sync.Map
	var dup, n atomic.Int64
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, func(_ mesh.NodeID, rec *wire.Record) {
		if _, loaded := seen.LoadOrStore(rec.Body.(*wire.BoundSessionBind).Correlation, true); loaded {
			dup.Add(1)
		}
		n.Add(1)
	})
	to := c.Node(1).ID()
	sendConcurrently(t, c, senders, each, func(k int) *wire.Record { return bindRecord(uint64(k+1), to) }, &n)
	if dup.Load() != 0 {
		t.Fatalf("%d records delivered twice", dup.Load())
	}
}

// Batch buffers are reused once gRPC has copied them, and the receiver's records point
// into its copy of the envelope: a buffer reused too early, or a record read after its
// bytes changed, would show as a payload that is not the one sent. Records of every
// size (a few bytes to over a batch's bound) from concurrent senders each arrive once,
// with the packet name and payload they were sent with.
func TestCoalesce_ReusedBuffersNeverCorruptARecord(t *testing.T) {
	const senders, each = 4, 1500
	c := meshtest.Start(t, 2, meshtest.Options{NoTap: true, Config: coalescing})
	to := c.Node(1).ID()
	payloadOf := func(k int) []byte {
		p := make([]byte, 1+k*37%3000)
		if k%500 == 0 {
			p = make([]byte, 70_000) // over one envelope's 64 KiB on its own
		}
		for i := range p {
			p[i] = byte(k + i*7)
		}
		return p
	}
	var n, bad atomic.Int64
	var seen sync.Map
	held := make(chan *wire.Record, senders*each) // records kept past their handler
	c.Node(1).Records().Handle(wire.CmdBoundSessionSend, func(_ mesh.NodeID, rec *wire.Record) {
		held <- rec
		n.Add(1)
	})
	sendConcurrently(t, c, senders, each, func(k int) *wire.Record {
		return &wire.Record{
			Body: &wire.BoundSessionSend{Actor: wire.ActorRouteFence{
				Actor: wire.ActorRef{ID: "a", Generation: 1}, TargetNodeRID: to.RID, TargetNodeGeneration: to.Generation,
				ExpectedAuthorityOwnerGeneration: 1, ExpectedOwnerLeaseGeneration: 1,
			}, ExpectedBindingGeneration: 1},
			Payload: &wire.Payload{PacketName: "p" + strconv.Itoa(k), ContentType: "application/octet-stream", Data: payloadOf(k)},
		}
	}, &n)
	// Checked only now, after every batch was sent and every buffer reused many times.
	close(held)
	for rec := range held {
		k, err := strconv.Atoi(strings.TrimPrefix(rec.Payload.PacketName, "p"))
		if err != nil || !bytes.Equal(rec.Payload.Data, payloadOf(k)) {
			bad.Add(1)
			continue
		}
		if _, dup := seen.LoadOrStore(k, true); dup {
			t.Errorf("record %d delivered twice", k)
		}
	}
	if bad.Load() != 0 {
		t.Fatalf("%d records arrived with another name or payload than sent", bad.Load())
	}
}

// sendConcurrently sends senders × each records from node 0 to node 1, senders at
// once, record(k) for k in [0, senders × each), and waits until the handler counted
// (in arrived) every one of them.
func sendConcurrently(t *testing.T, c *meshtest.Cluster, senders, each int, record func(k int) *wire.Record, arrived *atomic.Int64) {
	t.Helper()
	to := c.Node(1).ID()
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if err := c.Node(0).Records().Send(context.Background(), to, record(s*each+i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := c.WaitUntil(wait, func() bool { return arrived.Load() == int64(senders*each) }); err != nil {
		t.Fatalf("%d of %d records arrived", arrived.Load(), senders*each)
	}
}
