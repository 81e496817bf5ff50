package mesh

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/internal/protoactor/remote"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
)

// Coalescing: records toward one peer that are queued at the same moment travel in
// one envelope.
//
// protoactor-go remote pays per message: an envelope object, a type-name and target
// lookup and a protobuf marshal on the sending side; an unmarshal (one allocation per
// bytes field), a registry lookup and a mailbox post on the receiving one. A record is
// small, so that cost is most of a record's. So a record toward a peer does not become
// a protoactor message of its own: it is encoded into the link's outbox, and the first
// record of an empty outbox posts a placeholder (the outbox itself) to protoactor's
// endpoint writer for the peer. The writer turns the placeholder into an Envelope only
// when it is about to send it (remote.RootSerializable), taking every record queued
// until then, in order. A lone record goes at once (no timer: the placeholder is in
// the writer's queue as soon as the record is); under load, records queue while the
// writer sends the previous batch, and the next envelope carries them all.
//
// The batch is addressed to the peer's record receiver, which hands each record to
// the actor it names (an Actor activation, or itself) in order, as a one-record
// envelope whose frames point into the batch: from there a record takes the path it
// always took (Accept, the record tap, the per-command counters, dead letters and
// Message Follow for an activation that is gone). Flow control counts records, not
// envelopes: each record is counted when it is queued; the batch gets one envelope
// number and is released as a whole by the peer's acknowledgement.

// Bounds of one coalesced envelope: gRPC refuses messages over 4 MiB, a huge batch
// would delay the first record in it, and each side still copies an envelope (into and
// out of gRPC's buffers). 64 KiB and 1 MiB measured the same on the benchmarks (over a
// hundred small records per envelope either way), 8 and 16 KiB slower; the smaller of
// the two keeps those buffers small.
const (
	maxBatchRecords = 1024
	maxBatchBytes   = 64 << 10
	// placeholderStale: a placeholder that protoactor has not turned into an envelope
	// after this long is taken as lost (an endpoint writer that stopped drops what is
	// in its queue), and the node's sweep posts another one. A late one that still
	// arrives sends what is queued then, or only an acknowledgement.
	placeholderStale = 500 * time.Millisecond
	// batchHeader is a record's header in a batch after its target name: the frame
	// count and three frame lengths.
	batchHeader = 1 + 3*4
)

// batchBuf is one envelope's worth of encoded records.
type batchBuf struct {
	w       *wireBatch // nil until the first record
	records int
	bytes   int64 // the records' frame bytes, as the window counts them
}

// wireBatch is one coalesced envelope, encoded in place: its buffer starts with room
// for the envelope's head (identities, number, acknowledgement and the batch field's
// key), and the records are appended after that room, so the head is written in front
// of them when the envelope is sealed and protoactor sends the encoding as it is
// (remote.EncodedMessage): the batch is not copied into an Envelope and marshaled
// again. Once gRPC has copied it (remote.SentNotifier) the buffer is reused.
type wireBatch struct {
	buf  []byte // the head room, then the records
	room int    // the head room's size
	enc  []byte // the sealed envelope's encoding: the end of the room and the records
}

// maxPooledBatch: a batch buffer larger than this (one huge record) is not kept.
const maxPooledBatch = 2 * maxBatchBytes

var batchPool = sync.Pool{New: func() any { return new(wireBatch) }}

// newWireBatch returns an empty batch with room for a head of room bytes and space
// for about size bytes of records.
func newWireBatch(room, size int) *wireBatch {
	w := batchPool.Get().(*wireBatch)
	if cap(w.buf) < room+size {
		w.buf = make([]byte, room, room+size)
	}
	w.buf, w.room, w.enc = w.buf[:room], room, nil
	return w
}

// records returns the batch field's content: the encoded records.
func (w *wireBatch) records() []byte { return w.buf[w.room:] }

// seal writes the envelope's head in front of the records.
func (w *wireBatch) seal(from, to NodeID, seq, ack uint64) {
	n := len(w.buf) - w.room
	size := meshpb.EnvelopeHeadSize(from.RID, from.Generation, to.RID, to.Generation, seq, ack, n)
	start := w.room - size
	head := meshpb.AppendEnvelopeHead(w.buf[start:start], from.RID, from.Generation, to.RID, to.Generation, seq, ack)
	meshpb.AppendBatchKey(head, n)
	w.enc = w.buf[start:]
}

// EncodedProto returns the sealed envelope's encoding (remote.EncodedMessage).
func (w *wireBatch) EncodedProto() ([]byte, string) { return w.enc, envelopeTypeName }

// Deserialize decodes the envelope (remote.RootSerialized; protoactor never calls
// it on the sending side, which is the only side a wireBatch exists on).
func (w *wireBatch) Deserialize() (remote.RootSerializable, error) {
	env := new(meshpb.Envelope)
	if err := env.UnmarshalAliasing(w.enc); err != nil {
		return nil, err
	}
	return env, nil
}

// Sent returns the buffer to the pool: gRPC copied the envelope (remote.SentNotifier).
func (w *wireBatch) Sent() {
	w.enc = nil
	if cap(w.buf) > maxPooledBatch {
		w.buf = nil
	}
	batchPool.Put(w)
}

var envelopeTypeName = string((*meshpb.Envelope)(nil).ProtoReflect().Descriptor().FullName())

// outbox is a link's records waiting for the next envelope, and the placeholder
// protoactor turns into that envelope. Its fields are guarded by link.mu.
type outbox struct {
	link     *peerLink
	pid      *actor.PID // the peer's record receiver
	cur      batchBuf   // filling
	sealed   []batchBuf // full, waiting in order before cur
	lastSize int        // the last batch's size: the next buffer's capacity
	headRoom int        // room for an envelope head in front of a batch (wireBatch)
	posted   bool       // a placeholder is in the endpoint writer's queue
	postedAt time.Time  // when it was posted
}

// encodeScratch holds a record's frames between encoding and queueing: the encoding
// needs no lock, and the window admits a record by its size.
type encodeScratch struct {
	buf    []byte
	frames [][]byte
}

var encodePool = sync.Pool{New: func() any {
	return &encodeScratch{buf: make([]byte, 0, 1024), frames: make([][]byte, 0, 3)}
}}

// enqueue encodes rec, counts it against the peer's window (waiting as admit says)
// and queues it for the next envelope toward the peer, for the actor named target
// there ("" for the record receiver).
func (l *peerLink) enqueue(ctx context.Context, target string, rec *wire.Record, maxWait time.Duration) error {
	sc := encodePool.Get().(*encodeScratch)
	defer func() {
		if cap(sc.buf) <= 64<<10 { // do not pin the buffer of one huge payload
			clear(sc.frames[:cap(sc.frames)])
			sc.buf, sc.frames = sc.buf[:0], sc.frames[:0]
			encodePool.Put(sc)
		}
	}()
	var err error
	sc.buf, sc.frames, err = wire.AppendFrames(sc.buf[:0], sc.frames[:0], rec)
	if err != nil {
		return err
	}
	size := framesSize(sc.frames)
	if err := l.admit(ctx, size, maxWait); err != nil {
		return err
	}
	o := &l.outbox
	o.append(target, sc.frames, size)
	if !o.posted {
		o.post()
	}
	l.mu.Unlock()
	return nil
}

// repostStale posts the placeholder again when the one posted has not been turned
// into an envelope for placeholderStale (see there); the node's sweep calls it.
func (l *peerLink) repostStale(now time.Time) {
	l.mu.Lock()
	o := &l.outbox
	if o.posted && now.Sub(o.postedAt) > placeholderStale && !l.dead {
		o.post()
	}
	l.mu.Unlock()
}

// outboxSweep reposts lost placeholders (repostStale) every half placeholderStale
// until the node stops: a check off the record path, which never reads the clock.
func (n *Node) outboxSweep() {
	defer n.wg.Done()
	t := time.NewTicker(placeholderStale / 2)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			for _, l := range *n.flow.links.Load() {
				l.repostStale(now)
			}
		}
	}
}

// append encodes one record into the filling batch (under link.mu).
func (o *outbox) append(target string, frames [][]byte, size int64) {
	need := binary.MaxVarintLen64 + len(target) + batchHeader + int(size)
	if o.cur.records > 0 && (o.cur.records >= maxBatchRecords || len(o.cur.w.records())+need > maxBatchBytes) {
		o.sealed = append(o.sealed, o.cur)
		o.cur = batchBuf{}
	}
	if o.cur.w == nil {
		o.cur.w = newWireBatch(o.headRoom, max(need, min(o.lastSize, maxBatchBytes)))
	}
	o.cur.w.buf = appendBatchRecord(o.cur.w.buf, target, frames)
	o.cur.records++
	o.cur.bytes += size
}

// appendBatchRecord appends one record of a batch (the format is in meshpb.proto):
// its target name and 1 to 3 frames.
func appendBatchRecord(b []byte, target string, frames [][]byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(target)))
	b = append(b, target...)
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
	return b
}

// post hands the placeholder to protoactor (under link.mu).
func (o *outbox) post() {
	o.posted, o.postedAt = true, time.Now()
	o.link.n.system.Root.Send(o.pid, o)
}

// clear forgets every queued record (under link.mu; the link died).
func (o *outbox) clear() {
	o.cur, o.sealed = batchBuf{}, nil // their buffers go to the garbage collector
}

// Serialize is called by protoactor's endpoint writer when it is about to send the
// placeholder: the records queued until now become one envelope (a sealed
// wireBatch), or an acknowledgement only (an Envelope with no batch) when nothing is
// queued. Records beyond one envelope's bounds stay queued, and a new placeholder is
// posted for them.
func (o *outbox) Serialize() (remote.RootSerialized, error) {
	w, ack := o.take(true)
	if w == nil {
		l := o.link
		return &meshpb.Envelope{FromRid: l.n.id.RID, FromGeneration: l.n.id.Generation,
			ToRid: l.id.RID, ToGeneration: l.id.Generation, Ack: ack}, nil
	}
	return w, nil
}

// take seals the next envelope of the queue: a numbered batch, or nil when nothing is
// queued; ack is the acknowledgement it (or the envelope sent instead) carries.
// When sending, the wait of its first record (since the placeholder was posted for
// it) is recorded as the record send latency.
func (o *outbox) take(sending bool) (w *wireBatch, ack uint64) {
	l := o.link
	n := l.n
	l.mu.Lock()
	var b batchBuf
	if len(o.sealed) > 0 {
		b = o.sealed[0]
		o.sealed[0] = batchBuf{}
		o.sealed = o.sealed[1:]
	} else {
		b, o.cur = o.cur, batchBuf{}
	}
	var seq uint64
	var waited time.Duration
	if b.records > 0 {
		if sending {
			waited = time.Since(o.postedAt)
		}
		o.lastSize = len(b.w.records())
		l.nextSeq++
		seq = l.nextSeq
		l.inflight = append(l.inflight, inflightEntry{seq: seq, records: b.records, bytes: b.bytes})
		n.flow.envelopes.Add(1)
	}
	ack, recs := l.ackPoint()
	if len(o.sealed) > 0 || o.cur.records > 0 {
		o.post()
	} else {
		o.posted = false
	}
	l.mu.Unlock()
	if ack > 0 {
		l.acked(ack, recs)
	}
	if b.records == 0 {
		return nil, ack
	}
	if sending {
		n.metrics.sendLatency.Record(context.Background(), waited.Seconds())
	}
	b.w.seal(n.id, l.id, seq, ack)
	return b.w, ack
}

// undelivered handles a placeholder that protoactor could not send (no connection
// to the peer): its records are numbered as if sent, so that the peer's next
// acknowledgement releases them, and each is reported as a dead letter.
func (o *outbox) undelivered() {
	w, _ := o.take(false)
	if w != nil {
		l := o.link
		o.link.n.deadBatch(&meshpb.Envelope{FromRid: l.n.id.RID, FromGeneration: l.n.id.Generation,
			ToRid: l.id.RID, ToGeneration: l.id.Generation, Batch: w.records()})
	}
}

var errBadBatch = errors.New("mesh: malformed coalesced envelope")

// batchRecord is one record of a batch as decoded: subslices of the batch.
type batchRecord struct {
	target     []byte
	frames     [3][]byte
	nframe     int
	start, end int // the record's bytes in the batch
}

// walkBatch decodes a batch, calling fn for each record in order (fn may be nil: a
// validating pass). It returns the record and frame counts, or errBadBatch for a
// batch that is not exactly a sequence of well-formed records.
func walkBatch(b []byte, fn func(r *batchRecord)) (records, frames int, err error) {
	var r batchRecord
	whole := len(b)
	for len(b) > 0 {
		if b, err = nextBatchRecord(b, whole, &r); err != nil {
			return 0, 0, err
		}
		records++
		frames += r.nframe
		if fn != nil {
			fn(&r)
		}
	}
	if records == 0 {
		return 0, 0, errBadBatch
	}
	return records, frames, nil
}

// nextBatchRecord decodes the record at the start of b, the rest of a batch of whole
// bytes, into r, and returns what follows it.
func nextBatchRecord(b []byte, whole int, r *batchRecord) ([]byte, error) {
	r.start = whole - len(b)
	tl, n := binary.Uvarint(b)
	if n <= 0 || tl > uint64(len(b)-n) {
		return nil, errBadBatch
	}
	b = b[n:]
	r.target, b = b[:tl], b[tl:]
	if len(b) < batchHeader {
		return nil, errBadBatch
	}
	r.nframe = int(b[0])
	if r.nframe < 1 || r.nframe > 3 {
		return nil, errBadBatch
	}
	lens := b[1:batchHeader]
	b = b[batchHeader:]
	for i := range 3 {
		fl := binary.BigEndian.Uint32(lens[4*i:])
		if i >= r.nframe {
			if fl != 0 {
				return nil, errBadBatch
			}
			r.frames[i] = nil
			continue
		}
		if uint64(fl) > uint64(len(b)) {
			return nil, errBadBatch
		}
		r.frames[i], b = b[:fl:fl], b[fl:]
	}
	r.end = whole - len(b)
	return b, nil
}

// targetPID is a local actor that batch records were for, and its PID, which caches
// the process it resolves to.
type targetPID struct {
	name string
	pid  *actor.PID
}

// localPIDs remembers, by name, the PIDs of the local actors that coalesced records
// were for, in a small direct-mapped table: the runs for the Actors of many sessions
// interleave in a batch, and each found its PID without a registry look-up and four
// allocations (name, PID, its cached process) only while it was the last one. Bounded
// by its slots: a collision replaces the slot; a PID whose actor stopped resolves
// again by itself.
type localPIDs struct {
	seed  maphash.Seed
	slots [256]atomic.Pointer[targetPID]
}

// fanOut hands the records of a coalesced envelope to the actors they name, in order.
// Consecutive records for one actor (a busy Actor) go to it as one run: an envelope
// whose batch is those records' bytes, which the actor takes record by record
// (Records.EachInRun), so a burst costs it one mailbox message, not one per record.
// Records for the record receiver itself go into its mailbox (mb) one by one, or are
// handled here when their handler allows it and nothing waits there (receiveInline).
// A malformed batch is dropped whole, before any record is handed on.
func (n *Node) fanOut(env *meshpb.Envelope, mb actor.Mailbox) {
	from := NodeID{RID: env.FromRid, Generation: env.FromGeneration}
	own, ownFrames := 0, 0 // records (and their frames) for the record receiver
	if _, _, err := walkBatch(env.Batch, func(r *batchRecord) {
		if len(r.target) == 0 {
			own++
			ownFrames += r.nframe
		}
	}); err != nil {
		n.drop(DropDecodeError, from, "malformed coalesced envelope", err)
		return
	}
	// The record receiver's records share two allocations.
	subs := make([]meshpb.Envelope, own)
	slab := make([][]byte, ownFrames)
	var run *meshpb.Envelope // the run being gathered, for runTarget
	var runTarget []byte
	flush := func() {
		if run != nil {
			n.system.Root.Send(n.localPID(runTarget), run)
			run = nil
		}
	}
	_, _, _ = walkBatch(env.Batch, func(r *batchRecord) {
		if run != nil && string(r.target) == string(runTarget) {
			run.Batch = run.Batch[:len(run.Batch)+r.end-r.start]
			return
		}
		flush()
		if len(r.target) == 0 {
			sub := &subs[0]
			subs = subs[1:]
			sub.FromRid, sub.FromGeneration, sub.ToRid, sub.ToGeneration = env.FromRid, env.FromGeneration, env.ToRid, env.ToGeneration
			k := copy(slab, r.frames[:r.nframe])
			sub.Frames, slab = slab[:k:k], slab[k:]
			if n.receiveInline(sub) {
				return
			}
			n.ownPending.Add(1)
			mb.PostUserMessage(sub)
			return
		}
		run = &meshpb.Envelope{FromRid: env.FromRid, FromGeneration: env.FromGeneration,
			ToRid: env.ToRid, ToGeneration: env.ToGeneration, Batch: env.Batch[r.start:r.end:len(env.Batch)]}
		runTarget = r.target
	})
	flush()
}

// isRun reports whether env is a run of records for one actor (see fanOut).
func isRun(env *meshpb.Envelope) bool { return len(env.Batch) > 0 && len(env.Frames) == 0 }

// runStats counts the records of a run, their frame bytes (as the flow-control window
// and mailbox bounds count them) and how many are Actor sends (record 24).
func runStats(env *meshpb.Envelope) (records int, bytes int64, sends int) {
	_, _, _ = walkBatch(env.Batch, func(r *batchRecord) {
		records++
		for _, f := range r.frames[:r.nframe] {
			bytes += int64(len(f))
		}
		if f0 := r.frames[0]; len(f0) > 3 && wire.Command(f0[3]) == wire.CmdActorSend {
			sends++
		}
	})
	return records, bytes, sends
}

// eachInRun calls fn with each record of the run env in order, as a one-record
// envelope that fn may use only until it returns (one envelope is reused for all).
func eachInRun(env *meshpb.Envelope, fn func(rec *meshpb.Envelope)) {
	var c RunCursor
	c.Reset(env)
	for rec, ok := c.Next(); ok; rec, ok = c.Next() {
		fn(rec)
	}
}

// RunCursor hands out the records of a run (see IsRun) one at a time, in order, as a
// one-record envelope it reuses: what Next returns is valid until the next call or
// Reset. A cursor kept between runs (pooled) makes taking a run's records cost no
// allocation. The zero value is ready for Reset.
type RunCursor struct {
	rest   []byte
	whole  int
	sub    meshpb.Envelope
	frames [3][]byte
}

// Reset starts reading the run env.
func (c *RunCursor) Reset(env *meshpb.Envelope) {
	c.rest, c.whole = env.Batch, len(env.Batch)
	c.sub.FromRid, c.sub.FromGeneration, c.sub.ToRid, c.sub.ToGeneration = env.FromRid, env.FromGeneration, env.ToRid, env.ToGeneration
	c.sub.Frames = nil
}

// Next returns the run's next record, or false after the last (or at bytes that are
// not a record, which the node never hands on: it checks a batch whole first).
func (c *RunCursor) Next() (*meshpb.Envelope, bool) {
	if len(c.rest) == 0 {
		return nil, false
	}
	var r batchRecord
	rest, err := nextBatchRecord(c.rest, c.whole, &r)
	if err != nil {
		c.rest = nil
		return nil, false
	}
	c.rest = rest
	c.frames = r.frames
	c.sub.Frames = c.frames[:r.nframe:r.nframe]
	return &c.sub, true
}

// Clear forgets the run, so a pooled cursor keeps no batch alive.
func (c *RunCursor) Clear() {
	c.rest, c.sub.Frames, c.frames = nil, nil, [3][]byte{}
	c.sub.FromRid, c.sub.ToRid = "", ""
}

// localPID returns the PID of the local actor named name (see localPIDs).
func (n *Node) localPID(name []byte) *actor.PID {
	slot := &n.localPIDs.slots[maphash.Bytes(n.localPIDs.seed, name)%uint64(len(n.localPIDs.slots))]
	if t := slot.Load(); t != nil && t.name == string(name) {
		return t.pid
	}
	t := &targetPID{name: string(name)}
	t.pid = actor.NewPID(n.system.Address(), t.name)
	slot.Store(t)
	return t.pid
}

// deadBatch reports each record of a coalesced envelope that never reached its
// peer's record receiver as a dead letter for the actor it names.
func (n *Node) deadBatch(env *meshpb.Envelope) {
	_, _, err := walkBatch(env.Batch, func(r *batchRecord) {
		name := string(r.target)
		if name == "" {
			name = recordsActorName
		}
		n.deadEnvelope(&meshpb.Envelope{FromRid: env.FromRid, FromGeneration: env.FromGeneration,
			ToRid: env.ToRid, ToGeneration: env.ToGeneration, Frames: append([][]byte(nil), r.frames[:r.nframe]...)}, name)
	})
	if err != nil {
		n.drop(DropDecodeError, NodeID{RID: env.FromRid, Generation: env.FromGeneration}, "malformed coalesced envelope", err)
	}
}
