package mesh

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/protoactor/actor"

	"github.com/meshnode/meshnode/internal/wake"
	"github.com/meshnode/meshnode/mesh/meshpb"
)

// Flow control between node lifecycles.
//
// protoactor-go remote has no backpressure: a Send never blocks, and the queue toward a
// slow or unreachable peer (its endpoint writer's mailbox) grows without limit. So this
// node counts what it sent to each peer and the peer has not acknowledged yet, and
// keeps that under a count and a size: the records in protoactor's queue, in gRPC, on
// the network and in the peer's reader. A sender that finds its peer's window full
// waits (bounded by its context) or fails with ErrBackpressure; sessions that relay to
// the peer stop pulling packets meanwhile (PeerBlocked).
//
// Each envelope toward a peer carries a number (seq); the peer acknowledges the highest
// number that reached it (ack), inside its own envelopes toward this node or in an
// envelope with no frames when it has nothing to send. An envelope reaches a node when
// it is put into the mailbox of the actor it is addressed to (the node's record
// receiver or an Actor activation), so the window covers transit, not the receiver's
// processing: a slow Actor cannot stall every session that talks to its node (its
// mailbox has its own bound). Acknowledging the highest number also releases envelopes
// the receiver dropped or that were lost, so a window never leaks.

// ErrBackpressure: the peer's window is full (its unacknowledged records reached the
// count or size bound) and the record was not sent before the caller's deadline, or at
// once for a caller that does not wait.
var ErrBackpressure = fault.New(fault.Unavailable, "mesh: peer queue full")

// Defaults of the flow control.
const (
	// DefaultPeerWindowRecords bounds the unacknowledged records toward one peer.
	DefaultPeerWindowRecords = 8192
	// DefaultPeerWindowBytes bounds the unacknowledged record bytes toward one peer.
	DefaultPeerWindowBytes = 16 << 20
	// DefaultSendWait bounds how long a send waits for window space when its context
	// has no deadline.
	DefaultSendWait = 5 * time.Second
	// ackDelay is how long a receiver may sit on an acknowledgement it owes when it
	// has nothing to send back to carry it.
	ackDelay = 5 * time.Millisecond
)

// inflightEntry is one unacknowledged envelope: one record, or a coalesced batch.
type inflightEntry struct {
	seq     uint64
	records int
	bytes   int64
}

// peerLink is the flow control with one peer lifecycle, both directions.
type peerLink struct {
	n  *Node
	id NodeID

	// Toward the peer.
	mu       sync.Mutex
	nextSeq  uint64
	inflight []inflightEntry // FIFO from head
	head     int
	records  int   // unacknowledged: queued for coalescing and sent
	bytes    int64 // their bytes
	dead     bool
	full     atomic.Bool // mirror of "no room for one more record", read lock-free
	space    wake.Signal // notified when acknowledgements free room or the link dies
	outbox   outbox      // records waiting for the next coalesced envelope (coalesce.go)

	// From the peer.
	recvSeq   atomic.Uint64 // highest envelope number that reached this node
	recvBytes atomic.Int64  // bytes received since the last acknowledgement
	recvRecs  atomic.Int64  // records received, ever (see ackPoint)
	ackedRecs atomic.Int64  // the part of recvRecs the last acknowledgement covered
	ackedSeq  atomic.Uint64 // highest number acknowledged to the peer
	ackArmed  atomic.Bool
	ackTimer  *time.Timer
}

// flow is the node's set of links, one per live peer lifecycle.
type flow struct {
	n          *Node
	maxRecords int
	maxBytes   int64

	mu    sync.Mutex
	links atomic.Pointer[map[NodeID]*peerLink] // copy on write: read per record

	waits, refused atomic.Int64 // sends that waited for room; sends that failed for lack of it
	envelopes      atomic.Int64 // envelopes that carried records to peers
}

func newFlow(n *Node, maxRecords int, maxBytes int64) *flow {
	if maxRecords <= 0 {
		maxRecords = DefaultPeerWindowRecords
	}
	if maxBytes <= 0 {
		maxBytes = DefaultPeerWindowBytes
	}
	f := &flow{n: n, maxRecords: maxRecords, maxBytes: maxBytes}
	empty := map[NodeID]*peerLink{}
	f.links.Store(&empty)
	return f
}

func (f *flow) get(id NodeID) *peerLink { return (*f.links.Load())[id] }

// link returns the link to the live member id, making it on first use; nil when id is
// not a live member.
func (f *flow) link(id NodeID) *peerLink {
	if l := f.get(id); l != nil {
		return l
	}
	mem, live := f.n.members.live(id)
	if !live {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := *f.links.Load()
	if l := cur[id]; l != nil {
		return l
	}
	l := &peerLink{n: f.n, id: id}
	l.outbox.link, l.outbox.pid = l, f.n.recordsPID(mem.RemoteAddr)
	l.outbox.headRoom = len(f.n.id.RID) + len(id.RID) + meshpb.MaxEnvelopeHead
	next := make(map[NodeID]*peerLink, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[id] = l
	f.links.Store(&next)
	return l
}

// drop ends the link to a departed peer: its waiting senders fail, nothing more is
// acknowledged to it.
func (f *flow) drop(id NodeID) {
	f.mu.Lock()
	cur := *f.links.Load()
	l := cur[id]
	if l != nil {
		next := make(map[NodeID]*peerLink, len(cur))
		for k, v := range cur {
			if k != id {
				next[k] = v
			}
		}
		f.links.Store(&next)
	}
	f.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	l.dead = true
	l.inflight, l.head, l.records, l.bytes = nil, 0, 0, 0
	l.outbox.clear()
	l.mu.Unlock()
	l.full.Store(false)
	if l.ackTimer != nil {
		l.ackTimer.Stop()
	}
	l.space.Notify()
}

// stop ends every link (the node is stopping).
func (f *flow) stop() {
	for id := range *f.links.Load() {
		f.drop(id)
	}
}

// send numbers env, counts it against the peer's window and hands it to protoactor
// (the path of a record that is not coalesced). It waits for room as admit says.
func (l *peerLink) send(ctx context.Context, pid *actor.PID, env *meshpb.Envelope, maxWait time.Duration) error {
	size := envelopeSize(env)
	if err := l.admit(ctx, size, maxWait); err != nil {
		return err
	}
	l.nextSeq++
	env.Seq = l.nextSeq
	ack, recs := l.ackPoint()
	env.Ack = ack
	l.inflight = append(l.inflight, inflightEntry{seq: env.Seq, records: 1, bytes: size})
	// Sent under the lock: envelope numbers leave in order.
	l.n.system.Root.Send(pid, env)
	l.mu.Unlock()
	l.n.flow.envelopes.Add(1)
	if env.Ack > 0 {
		l.acked(env.Ack, recs)
	}
	return nil
}

// admit counts one record of size bytes against the peer's window and returns with
// l.mu held; on error l.mu is not held. While the window is full it waits for room:
// not at all when maxWait is negative (a full window fails at once with
// ErrBackpressure), as long as ctx lasts when maxWait is 0, at most maxWait (and ctx)
// otherwise; the wait also ends when the peer departs (fault.Unavailable) or the node
// stops.
func (l *peerLink) admit(ctx context.Context, size int64, maxWait time.Duration) error {
	f := l.n.flow
	var expired <-chan time.Time // made only when a send has to wait
	waited := false
	for {
		l.mu.Lock()
		if l.dead {
			l.mu.Unlock()
			return fault.Errorf(fault.Unavailable, "mesh: %s departed", l.id)
		}
		if l.records == 0 || (l.records < f.maxRecords && l.bytes+size <= f.maxBytes) {
			l.records++
			l.bytes += size
			l.full.Store(l.records >= f.maxRecords || l.bytes >= f.maxBytes)
			return nil
		}
		ch := l.space.Wait()
		l.mu.Unlock()
		if maxWait < 0 {
			f.refused.Add(1)
			return fmt.Errorf("%w: %s", ErrBackpressure, l.id)
		}
		if !waited {
			waited = true
			f.waits.Add(1)
			if maxWait > 0 {
				t := time.NewTimer(maxWait)
				defer t.Stop()
				expired = t.C
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			f.refused.Add(1)
			return fmt.Errorf("%w: %s: %w", ErrBackpressure, l.id, ctx.Err())
		case <-expired:
			f.refused.Add(1)
			return fmt.Errorf("%w: %s: %w", ErrBackpressure, l.id, context.DeadlineExceeded)
		case <-l.n.stop:
			return ErrStopped
		}
	}
}

// onAck releases the envelopes up to seq.
func (l *peerLink) onAck(seq uint64) {
	if seq == 0 {
		return
	}
	f := l.n.flow
	l.mu.Lock()
	freed := false
	for l.head < len(l.inflight) && l.inflight[l.head].seq <= seq {
		e := l.inflight[l.head]
		l.head++
		l.records -= e.records
		l.bytes -= e.bytes
		freed = true
	}
	if l.head == len(l.inflight) {
		l.inflight, l.head = l.inflight[:0], 0
	} else if l.head > 1024 && l.head > len(l.inflight)/2 {
		l.inflight = append(l.inflight[:0], l.inflight[l.head:]...)
		l.head = 0
	}
	if freed {
		l.full.Store(l.records >= f.maxRecords || l.bytes >= f.maxBytes)
	}
	l.mu.Unlock()
	if freed {
		l.space.Notify()
	}
}

// arrived records an envelope from the peer: its acknowledgement, and the
// acknowledgement this node now owes.
func (l *peerLink) arrived(env *meshpb.Envelope) {
	l.onAck(env.Ack)
	if env.Seq == 0 {
		return
	}
	for {
		cur := l.recvSeq.Load()
		if env.Seq <= cur || l.recvSeq.CompareAndSwap(cur, env.Seq) {
			break
		}
	}
	// The acknowledgement is owed at once past a quarter of the window, in records
	// as the sender counts them, not envelopes: a coalesced envelope carries up to
	// maxBatchRecords. Counted in envelopes, a one-way flood of coalesced records was
	// acknowledged only by the ackDelay timer, so the sender waited on its window
	// every 8,192 records (cross-node Actor sends: about 1,200 ns a record, 1,000 now).
	f := l.n.flow
	owed := l.recvRecs.Add(envelopeRecords(env)) - l.ackedRecs.Load()
	bytes := l.recvBytes.Add(envelopeSize(env))
	if owed >= int64(f.maxRecords/4) || bytes >= f.maxBytes/4 {
		l.flushAck()
		return
	}
	if l.ackArmed.CompareAndSwap(false, true) {
		l.mu.Lock()
		if l.ackTimer == nil {
			l.ackTimer = time.AfterFunc(ackDelay, l.flushAckTimer)
		} else {
			l.ackTimer.Reset(ackDelay)
		}
		l.mu.Unlock()
	}
}

func (l *peerLink) flushAckTimer() {
	l.ackArmed.Store(false)
	l.flushAck()
}

// flushAck sends the acknowledgement owed, in an envelope of its own.
func (l *peerLink) flushAck() {
	seq, recs := l.ackPoint()
	if seq <= l.ackedSeq.Load() {
		return
	}
	mem, live := l.n.members.live(l.id)
	if !live || l.n.stopping.Load() {
		return
	}
	l.acked(seq, recs)
	self := l.n.id
	l.n.system.Root.Send(l.n.recordsPID(mem.RemoteAddr), &meshpb.Envelope{
		FromRid: self.RID, FromGeneration: self.Generation, ToRid: l.id.RID, ToGeneration: l.id.Generation, Ack: seq,
	})
}

// ackPoint returns the acknowledgement to send now, and the count of records received
// that it covers at least. The count is read first: arrived moves recvSeq before it
// counts an envelope's records, so every record counted belongs to an envelope the
// acknowledgement covers. (Records of an envelope that arrives in between are covered
// but still counted as owed: at worst an acknowledgement goes out early.)
func (l *peerLink) ackPoint() (seq uint64, recs int64) {
	recs = l.recvRecs.Load()
	return l.recvSeq.Load(), recs
}

// acked notes that the peer was told seq, covering recs of the records received (both
// only move forward).
func (l *peerLink) acked(seq uint64, recs int64) {
	for {
		cur := l.ackedRecs.Load()
		if recs <= cur || l.ackedRecs.CompareAndSwap(cur, recs) {
			break
		}
	}
	for {
		cur := l.ackedSeq.Load()
		if seq <= cur {
			return
		}
		if l.ackedSeq.CompareAndSwap(cur, seq) {
			l.recvBytes.Store(0)
			return
		}
	}
}

// envelopeRecords returns how many records env carries, as its sender counted them
// against the window: one for an envelope of frames, each record of a coalesced one
// (a malformed batch counts one; the receiver drops it).
func envelopeRecords(env *meshpb.Envelope) int64 {
	if len(env.Batch) == 0 {
		return 1
	}
	n, _, err := walkBatch(env.Batch, nil)
	if err != nil {
		return 1
	}
	return int64(n)
}

func envelopeSize(env *meshpb.Envelope) int64 {
	return framesSize(env.Frames) + int64(len(env.Batch))
}

func framesSize(frames [][]byte) int64 {
	var n int64
	for _, f := range frames {
		n += int64(len(f))
	}
	return n
}

// arrived: see Records.Arrived.
func (n *Node) arrived(env *meshpb.Envelope) bool {
	from := NodeID{RID: env.FromRid, Generation: env.FromGeneration}
	// An envelope without a sequence number or an acknowledgement (a record of a
	// coalesced envelope on its way to its actor, whose envelope was counted when it
	// arrived) leaves the flow control as it is: no link lookup.
	if (env.Seq != 0 || env.Ack != 0) && from != n.id && (env.ToRid == n.id.RID && env.ToGeneration == n.id.Generation) {
		if l := n.flow.link(from); l != nil {
			l.arrived(env)
		}
	}
	return len(env.Frames) > 0 || len(env.Batch) > 0
}

// peerBlocked: see Records.PeerBlocked.
func (n *Node) peerBlocked(to NodeID) <-chan struct{} {
	l := n.flow.get(to)
	if l == nil || !l.full.Load() {
		return nil
	}
	ch := l.space.Wait()
	if !l.full.Load() {
		return nil
	}
	return ch
}

// FlowStats is the flow control toward every peer, summed.
type FlowStats struct {
	Peers         int   // links
	FullPeers     int   // links whose window is full now
	Unacked       int   // records sent and not yet acknowledged
	UnackedBytes  int64 // their bytes
	Waits         int64 // sends that waited for room
	Backpressured int64 // sends that failed for lack of room
	// Envelopes that carried records to peers: one per record without coalescing, one
	// per batch of records queued at the same moment with it.
	Envelopes int64
}

// flowStats: see Records.FlowStats.
func (n *Node) flowStats() FlowStats {
	var s FlowStats
	for _, l := range *n.flow.links.Load() {
		s.Peers++
		if l.full.Load() {
			s.FullPeers++
		}
		l.mu.Lock()
		s.Unacked += l.records
		s.UnackedBytes += l.bytes
		l.mu.Unlock()
	}
	s.Waits = n.flow.waits.Load()
	s.Backpressured = n.flow.refused.Load()
	s.Envelopes = n.flow.envelopes.Load()
	return s
}
