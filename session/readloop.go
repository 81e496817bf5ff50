package session

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/meshnode/meshnode/session/compress"
	"github.com/meshnode/meshnode/session/wire"
)

// readLoop is the framework-owned receive loop (seed §4): it waits for bytes without a
// permit, waits while the session is at one of its ingress bounds, takes a host-wide
// permit, and only then pulls one frame. While it does not pull, nothing more is read:
// the kernel buffers fill and the client stalls in TCP.
//
// When the session owner is idle, the read loop's goroutine runs the turn itself (see
// sessionDispatcher), which saves a goroutine hand-off per packet. A turn that outlasts
// rescueAfter gets a fresh read loop goroutine, so heartbeats are still answered and
// the next packets still pulled while a callback blocks; the old goroutine then ends
// with its turn.
func (c *conn) readLoop() {
	if handedOff := c.readFrames(); !handedOff {
		close(c.readerDone)
	}
}

// Reader turn state: one atomic word, reader epoch << 1 | in-turn bit. The epoch tells
// a rescued goroutine that another one owns the connection's reading now.
const turnBit = 1

// rescueAfter is how long a session turn may hold the read loop before another
// goroutine takes over reading.
const rescueAfter = 10 * time.Millisecond

// DefaultStallTimeout is how long a session's pulled packets may wait with none of them
// starting before they give their host permits back (see releaseStalled).
const DefaultStallTimeout = 10 * time.Millisecond

// pulledGrace bounds how long a close for a bad frame waits for the packets pulled
// before it to run, so that their replies go out before the close.
const pulledGrace = 2 * time.Second

// rescueReader runs on the rescue timer: if a turn is still holding the read loop, it
// moves reading to a new goroutine.
func (c *conn) rescueReader() {
	w := c.turn.Load()
	if w&turnBit == 0 {
		return
	}
	if c.turn.CompareAndSwap(w, (w>>1+1)<<1) {
		go c.readLoop()
	}
}

// deliver hands a chain of n pulled packets (linked through Packet.next, in arrival
// order), with their permits, to the session owner in one mailbox message. Unless
// mayInline is false, their turns may run on this goroutine, one after another: a
// lone request, or a pipelining client's batch. Handing a batch to a worker so that
// reading and processing overlap was measured slower (a fifth, on the pipelined
// benchmarks): each packet and the session's counters then cross to another core, and
// the read loop's next read finds what the kernel buffered meanwhile anyway. It
// reports false when a rescue reader took over while the turns ran on this goroutine.
func (c *conn) deliver(head *Packet, n int, mayInline bool) bool {
	c.busy.Add(int64(n))
	c.turns.Add(uint64(n))
	if c.pendingPermits.Add(int64(n)) == int64(n) && c.host.stallTimeout > 0 {
		c.armStall()
	}
	if !mayInline || c.host.opts.NoInlineTurns {
		c.host.system.Root.Send(c.pid, head)
		return true
	}
	c.inline.Store(inlineOpen)
	if hook := beforePost.Load(); hook != nil {
		(*hook)(c, head)
	}
	c.host.system.Root.Send(c.pid, head)
	if c.inline.CompareAndSwap(inlineOpen, inlineOff) {
		return true // the owner is running elsewhere: it takes these packets next
	}
	// The run is parked for this goroutine (sessionDispatcher), and the packets are in
	// the mailbox: only now may a rescue reader take over and pull the next ones.
	run := c.parked
	c.parked = nil
	c.inline.Store(inlineOff)
	w := c.turn.Load() | turnBit
	c.turn.Store(w)
	c.rescue.Reset(rescueAfter)
	run()
	if !c.turn.CompareAndSwap(w, w&^turnBit) {
		return false
	}
	c.rescue.Stop()
	return true
}

// beforePost, when set (by tests), runs in deliver right before the read loop posts
// its packets: a test starts a rescue reader there, as a late rescue timer would.
var beforePost atomic.Pointer[func(c *conn, head *Packet)]

// turnStarted runs at the first instruction of a packet turn: the packet's permit, if
// it still holds one, goes back to the host (digest §9.3 step 5).
func (c *conn) turnStarted() {
	// One more started, one fewer pending: the pending count is at least one (deliver
	// counted this packet), so the subtraction never borrows from the started count.
	left := int64(uint32(c.turns.Add(1<<32 - 1)))
	for {
		n := c.pendingPermits.Load()
		if n <= 0 {
			break
		}
		if c.pendingPermits.CompareAndSwap(n, n-1) {
			c.host.permits.release()
			break
		}
	}
	// A reader held at the backlog bound resumes at half of it, so a pipelining
	// client's reader wakes once per few packets, not once per packet.
	if left <= int64(c.node.socket.MaxPendingPackets/2) {
		c.progress.Notify()
	}
}

// turnsFinished runs when the last turn of a chain of n packets (one mailbox message)
// returned. Only a close that waits for the pulled packets to run (closeAfterPulled)
// needs the count of turns not finished, and it waits for all of them anyway.
func (c *conn) turnsFinished(n int64) {
	if c.busy.Add(-n) == 0 {
		c.progress.Notify()
	}
}

// pending returns the packets pulled whose callback has not started.
func (c *conn) pending() int64 { return int64(uint32(c.turns.Load())) }

// started returns the packet turns started so far, modulo 2^32.
func (c *conn) started() uint64 { return c.turns.Load() >> 32 }

func (c *conn) armStall() {
	if !c.stallArmed.CompareAndSwap(false, true) {
		return
	}
	c.stallMark.Store(c.started())
	if c.stallTimer == nil {
		c.stallTimer = time.AfterFunc(c.host.stallTimeout, c.checkStall)
		return
	}
	c.stallTimer.Reset(c.host.stallTimeout)
}

// checkStall runs the stall timeout after a packet was queued behind a turn: if no turn started
// since, the session is stalled (its callback blocks, typically writing to a client that
// does not read) and its queued packets give their permits back.
func (c *conn) checkStall() {
	mark := c.stallMark.Load()
	c.stallArmed.Store(false)
	if c.pendingPermits.Load() <= 0 {
		return
	}
	if c.started() != mark {
		c.armStall()
		return
	}
	c.releaseStalled()
}

// releaseStalled returns the host permits of a stalled session's queued packets. The
// packets stay queued, in order, and run when the session moves again; the session's
// ingress bound (MaxPendingPackets) keeps their number small. A permit exists to pace
// the host's ingress, and a session that cannot move must not hold the permits that
// every other session waits for (digest §9.6: one busy connection does not block others).
func (c *conn) releaseStalled() {
	n := c.pendingPermits.Swap(0)
	if n <= 0 {
		return
	}
	for range n {
		c.host.permits.release()
	}
	c.host.metrics.stalledPermits.Add(n)
}

// Reasons a reader stops pulling.
const (
	pauseBacklog    = iota // MaxPendingPackets pulled packets wait for their callback
	pauseWriteQueue        // the outbound queue is over its soft limit
	pauseGate              // a layer above (bindings) holds the session: relays in flight, a full peer
	pauseReasons
)

var pauseReasonLabels = [pauseReasons]string{"backlog", "write_queue", "relay"}

// ingressBlocked returns nil when the session may pull its next packet, or a channel
// that is closed when the bound that holds it may have moved.
func (c *conn) ingressBlocked() (<-chan struct{}, int) {
	maxPending := int64(c.node.socket.MaxPendingPackets)
	if c.pending() >= maxPending {
		ch := c.progress.Wait()
		if c.pending() >= maxPending {
			return ch, pauseBacklog
		}
	}
	if soft := int64(c.node.socket.MaxPendingWrite); c.wqueued.Load() >= soft {
		ch := c.drained.Wait()
		if c.wqueued.Load() >= soft {
			return ch, pauseWriteQueue
		}
	}
	if g := c.gate.Load(); g != nil {
		if ch := (*g)(); ch != nil {
			return ch, pauseGate
		}
	}
	return nil, 0
}

// waitIngress waits while the session is at one of its ingress bounds. It reports false
// when the connection closed meanwhile. While it waits the idle clock stands still: the
// client waits on the server, it is not idle.
func (c *conn) waitIngress() bool {
	ch, why := c.ingressBlocked()
	if ch == nil {
		return true
	}
	c.waiting.Store(true)
	c.host.metrics.paused(why, 1)
	defer func() {
		c.host.metrics.paused(why, -1)
		c.lastInbound.Store(time.Now().UnixNano())
		c.waiting.Store(false)
	}()
	for ch != nil {
		select {
		case <-ch:
		case <-c.closing:
			return false
		}
		var now int
		if ch, now = c.ingressBlocked(); ch != nil && now != why {
			// Held by another bound now: the gauge follows.
			c.host.metrics.paused(why, -1)
			c.host.metrics.paused(now, 1)
			why = now
		}
	}
	return true
}

// acquirePermit waits for a host-wide permit. While it waits, the idle clock stands
// still: the client is waiting on us, not idle.
func (c *conn) acquirePermit() bool {
	if c.host.permits.tryAcquire() {
		return true // no wait: the idle clock was just set by the frame
	}
	if c.node.cfg.idleTimeout <= 0 {
		return c.host.permits.acquire(c.ctx, c.closing)
	}
	c.waiting.Store(true)
	ok := c.host.permits.acquire(c.ctx, c.closing)
	c.lastInbound.Store(time.Now().UnixNano())
	c.waiting.Store(false)
	return ok
}

// readFrames reads until the connection closes (false) or another goroutine took over
// reading (true).
func (c *conn) readFrames() (handedOff bool) {
	rb := &c.rb
	maxMsg := c.node.maxMsg
	for {
		// Waiting for the first byte of a frame is idleness, bounded by the idle timeout;
		// once a frame has begun it must be complete within the frame timeout.
		if rb.buffered() == 0 && c.reuseSends {
			c.releaseSpares() // a session that waits keeps no spare packets
		}
		if err := rb.fill(1); err != nil {
			c.readFailed(err)
			return false
		}
		timed := false
		if rb.buffered() < wire.PrefixSize {
			c.armFrameTimer()
			timed = true
		}
		if err := rb.fill(wire.PrefixSize); err != nil {
			c.readFailed(err)
			return false
		}
		hl, pl := wire.ParsePrefix(rb.peek(wire.PrefixSize))
		total := hl + pl
		if maxMsg > 0 && total > maxMsg {
			c.stopFrameTimer()
			c.messageTooLarge(total, maxMsg)
			return false
		}
		// The whole frame is taken into user space before a permit is asked for, so a
		// permit is never held while a slow client trickles bytes (one busy connection
		// must not block the others). The buffer grows with what arrives.
		frameLen := wire.PrefixSize + total
		if rb.buffered() < frameLen {
			if !timed {
				c.armFrameTimer()
				timed = true
			}
			if err := rb.fill(frameLen); err != nil {
				c.readFailed(err)
				return false
			}
		}
		if timed && !c.stopFrameTimer() {
			return false // the frame timeout fired: the connection is closing
		}
		if c.node.cfg.idleTimeout > 0 {
			// Bytes arrived: the client is not idle, however long the permit takes.
			c.lastInbound.Store(time.Now().UnixNano())
		}
		if isApplication(rb.peek(frameLen), hl) && !c.waitIngress() {
			return false
		}
		if c.isClosing() || !c.acquirePermit() {
			return false
		}
		c.host.metrics.framesIn(1, frameLen)
		pkt, err := c.pull(hl, total)
		if err != nil {
			c.protocolError(err)
			return false
		}
		if pkt == nil {
			continue // handled here: a control frame, a stray reply, a bad container
		}
		head, n, err := c.pullBuffered(pkt)
		if !c.deliver(head, n, err == nil) {
			return true
		}
		if err != nil {
			c.protocolError(err)
			return false
		}
	}
}

// maxIngressBatch bounds the packets one mailbox message carries: the count bound of a
// receive per wake-up (zlink digest §9.3: 64 per rotation). The bytes are bounded by
// the receive buffer, since a batch takes only frames already in it.
const maxIngressBatch = 64

// pullBuffered appends to the chain that starts with head the application frames that
// are already complete in the receive buffer, so that a pipelining client's packets
// reach the session owner in one mailbox message instead of one each. Their permits
// are taken together, one per frame, before any of them is pulled. It stops at the
// first frame that would need a read, a wait (a session bound, a permit somebody else
// is queued for) or handling of its own (a control frame, an oversize or malformed one:
// the read loop takes those), and returns the chain, its length, and the decode error
// of a frame it pulled, if any (the permits of that frame and of those it did not pull
// are back; the packets before it are still delivered).
func (c *conn) pullBuffered(head *Packet) (*Packet, int, error) {
	if c.host.opts.NoBatchedIngress {
		return head, 1, nil
	}
	room := int64(c.node.socket.MaxPendingPackets) - c.pending() - 1
	want := c.bufferedApplicationFrames(min(room, maxIngressBatch-1))
	if want == 0 || c.isClosing() {
		return head, 1, nil
	}
	got := c.host.permits.tryAcquireUpTo(want)
	tail, n, bytes := head, 1, 0
	for i := int64(0); i < got; i++ {
		hl, pl := wire.ParsePrefix(c.rb.peek(wire.PrefixSize))
		bytes += wire.PrefixSize + hl + pl
		pkt, err := c.pull(hl, hl+pl)
		if err != nil {
			for range got - i - 1 {
				c.host.permits.release()
			}
			c.host.metrics.framesIn(int(i+1), bytes)
			return head, n, err
		}
		if pkt != nil {
			tail.next = pkt
			tail = pkt
			n++
		}
	}
	c.host.metrics.framesIn(int(got), bytes)
	return head, n, nil
}

// bufferedApplicationFrames counts, up to limit, the Sends and Requests that lie
// complete at the front of the receive buffer, within MaxMessageSize, that the
// session's bounds let it pull: the outbound queue and the gate are asked for each
// frame, as the read loop asks them before each frame it pulls alone.
func (c *conn) bufferedApplicationFrames(limit int64) int64 {
	buf := c.rb.peek(c.rb.buffered())
	maxMsg := c.node.maxMsg
	var n int64
	for n < limit && len(buf) >= wire.PrefixSize {
		hl, pl := wire.ParsePrefix(buf)
		total := hl + pl
		frameLen := wire.PrefixSize + total
		if maxMsg > 0 && total > maxMsg || len(buf) < frameLen || !isApplication(buf[:frameLen], hl) || !c.mayPullMore() {
			break
		}
		buf = buf[frameLen:]
		n++
	}
	return n
}

// mayPullMore reports whether the session's outbound queue and the layers above it
// let it pull more: the checks of ingressBlocked after the backlog, without waiting.
func (c *conn) mayPullMore() bool {
	if c.wqueued.Load() >= int64(c.node.socket.MaxPendingWrite) {
		return false
	}
	if g := c.gate.Load(); g != nil && (*g)() != nil {
		return false
	}
	return true
}

// isApplication reports whether a buffered frame is a Send or a Request (the kind byte
// follows the marker); anything else is handled inline and is not held by the
// session's ingress bounds.
func isApplication(frame []byte, hl int) bool {
	if hl < 2 {
		return false
	}
	k := wire.Kind(frame[wire.PrefixSize+1])
	return k == wire.KindSend || k == wire.KindRequest
}

func (c *conn) armFrameTimer() {
	d := c.node.socket.FrameTimeout
	if d <= 0 {
		return
	}
	c.frameArmed.Store(true)
	if c.frameTimer == nil {
		c.frameTimer = time.AfterFunc(d, c.frameExpired)
		return
	}
	c.frameTimer.Reset(d)
}

// stopFrameTimer disarms the frame timer; false when it fired first.
func (c *conn) stopFrameTimer() bool {
	if c.node.socket.FrameTimeout <= 0 {
		return true
	}
	if !c.frameArmed.CompareAndSwap(true, false) {
		return false
	}
	c.frameTimer.Stop()
	return true
}

// frameExpired closes a connection whose frame began and did not complete within the
// frame timeout (a client trickling bytes holds a socket and a buffer, like a slow HTTP
// header that net/http's ReadHeaderTimeout cuts).
func (c *conn) frameExpired() {
	if !c.frameArmed.CompareAndSwap(true, false) {
		return
	}
	c.host.metrics.frameTimeout(c.transport)
	c.host.ratelog.Log(c.host.log, slog.LevelWarn, "frame_timeout", "stream frame not completed in time, closing",
		"node", c.node.cfg.name, "routing_id", uint32(c.rid), "transport", c.transport, "timeout", c.node.socket.FrameTimeout)
	c.close(closeCause{reason: wire.CloseIdleTimeout, notify: true, diag: "frame not completed within the frame timeout"})
}

// messageTooLarge handles a prefix that announces more than MaxMessageSize: EMSGSIZE is
// logged and counted, the packets pulled before it run (so their replies go out), and
// the connection closes without any frame of its own (seed §9: the client observes only
// the close).
func (c *conn) messageTooLarge(size, limit int) {
	c.host.metrics.messageTooLarge(c.transport)
	c.host.ratelog.Log(c.host.log, slog.LevelWarn, "emsgsize", "EMSGSIZE: inbound message over MaxMessageSize, closing",
		"node", c.node.cfg.name, "routing_id", uint32(c.rid), "size", size, "max", limit)
	c.closeAfterPulled(closeCause{reason: wire.CloseProtocolError, flush: true, err: ErrMessageTooLarge})
}

// closeAfterPulled closes the connection for a fault of the byte stream (a frame that
// is too large or does not decode) once the packets pulled before it have run, so that
// their replies go out before the close instead of being lost (bounded by
// pulledGrace: a callback that blocks does not hold the close).
func (c *conn) closeAfterPulled(cause closeCause) {
	deadline := time.NewTimer(pulledGrace)
	defer deadline.Stop()
	for c.busy.Load() > 0 {
		ch := c.progress.Wait()
		if c.busy.Load() == 0 {
			break
		}
		select {
		case <-ch:
		case <-c.closing:
			return
		case <-deadline.C:
			c.close(cause)
			return
		}
	}
	c.close(cause)
}

// readFailed classifies a read error. Errors after the connection started closing are
// the read being cancelled by the teardown and mean nothing.
func (c *conn) readFailed(err error) {
	if c.isClosing() {
		return
	}
	if isClientClose(err) {
		c.close(closeCause{reason: wire.CloseClientClose})
		return
	}
	c.transportError(err)
}

// isClientClose reports whether a read error is the client ending the connection: EOF,
// or a WebSocket close frame with 1000 (normal), 1001 (going away) or no status at all
// (1005, what browsers and the zlink TypeScript connector send).
func isClientClose(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway, websocket.StatusNoStatusRcvd:
		return true
	}
	return false
}

// transportError reports a transport error of this session to its error callback and
// closes it (seed §7).
func (c *conn) transportError(err error) {
	c.close(closeCause{reason: wire.CloseTransportError, err: err}) // posts the callback (close)
}

// A frame of up to inlineBody bytes (header and payload) shares one allocation with its
// Packet (136 bytes), in the smallest Go size class that holds both: 192 to 256 bytes,
// in steps of 16. Most game and chat packets fit. At the ingress rate the bytes
// allocated set how often the GC runs: a pipelining client's small Sends ran a sixth
// faster in 192 bytes each than in one 256-byte size for all.
const inlineBody = 120

type (
	packetWithBody56 struct {
		p    Packet
		body [56]byte
	}
	packetWithBody72 struct {
		p    Packet
		body [72]byte
	}
	packetWithBody88 struct {
		p    Packet
		body [88]byte
	}
	packetWithBody104 struct {
		p    Packet
		body [104]byte
	}
	packetWithBody120 struct {
		p    Packet
		body [inlineBody]byte
	}
)

// newPacket returns an empty Packet and a buffer of n bytes for its frame, owned by
// that packet alone (header strings point into it: wire.DecodeHeaderInPlace). A small
// frame lives in the same allocation as its Packet: one allocation per packet, not
// three (Packet, body, header strings).
func newPacket(n int) (*Packet, []byte) {
	switch {
	case n <= 56:
		pb := &packetWithBody56{}
		return &pb.p, pb.body[:n:n]
	case n <= 72:
		pb := &packetWithBody72{}
		return &pb.p, pb.body[:n:n]
	case n <= 88:
		pb := &packetWithBody88{}
		return &pb.p, pb.body[:n:n]
	case n <= 104:
		pb := &packetWithBody104{}
		return &pb.p, pb.body[:n:n]
	case n <= inlineBody:
		pb := &packetWithBody120{}
		return &pb.p, pb.body[:n:n]
	}
	return &Packet{}, make([]byte, n)
}

// pull takes the complete frame of total bytes (after the prefix) at the front of the
// receive buffer, for which a host permit is held, and decodes it. It returns the
// packet to hand to the session owner, or nil when the frame was handled here (a
// control frame, a stray reply, a payload whose container does not decode), or the
// error of a frame that does not decode. In the last two cases the permit is back.
func (c *conn) pull(hl, total int) (*Packet, error) {
	frame := c.rb.peek(wire.PrefixSize + total)[wire.PrefixSize:]
	var pkt *Packet
	var body []byte
	if c.pullsReusable(frame, hl) {
		pkt, body = c.reusablePacket(total)
	} else {
		pkt, body = newPacket(total)
	}
	copy(body, frame)
	c.rb.consume(wire.PrefixSize + total)
	// body is this packet's own copy of the frame, reused only with the packet: the
	// header's strings can point into it.
	var h wire.Header
	if err := wire.DecodeHeaderInPlaceTo(&h, body[:hl]); err != nil {
		c.host.permits.release()
		return nil, err
	}
	payload := body[hl:]
	switch h.Kind {
	case wire.KindControl:
		c.handleControl(&h)
		c.host.permits.release()
		return nil, nil
	case wire.KindResponse, wire.KindError:
		// The server sends no requests, so a client reply has nothing to complete.
		c.host.permits.release()
		c.host.metrics.dropped(c.transport, "unexpected_reply")
		return nil, nil
	}
	if h.Compressed {
		limit := c.node.maxMsg
		if limit <= 0 {
			limit = maxUncappedDecompressed
		}
		plain, err := compress.DecodeLZ4(payload, limit)
		if err != nil {
			c.host.permits.release()
			c.decompressFailed(&h, err)
			return nil, nil
		}
		payload = plain
		h.Compressed = false
	}
	pkt.Kind, pkt.Name, pkt.Metadata, pkt.RequestSeq = h.Kind, h.Name, h.Metadata, h.RequestSeq
	pkt.CorrelationID, pkt.FlowID, pkt.FlowOrigin = h.CorrelationID, h.FlowID, h.FlowOrigin
	pkt.Codec, pkt.Payload, pkt.Peer = h.Codec, payload, c.peer
	if pkt.reusable {
		pkt.Name = c.internName(h.Name)
	}
	return pkt, nil
}

// maxUncappedDecompressed bounds a decompressed payload when MaxMessageSize is 0, so a
// small container cannot claim an unbounded allocation.
const maxUncappedDecompressed = 64 << 20

func (c *conn) protocolError(err error) {
	c.host.metrics.protocolError(c.transport)
	c.host.log.Debug("stream protocol error, closing", "node", c.node.cfg.name, "routing_id", uint32(c.rid), "err", err)
	c.closeAfterPulled(closeCause{reason: wire.CloseProtocolError, notify: true, diag: err.Error(), err: err})
}

// decompressFailed handles a payload whose container does not decode: a Request gets a
// protocol_error reply, a Send is dropped; the connection stays (digest §9.3: malformed
// request -> ProtocolError, one-way -> record only).
func (c *conn) decompressFailed(h *wire.Header, err error) {
	c.host.metrics.dropped(c.transport, "decompression_failed")
	c.host.log.Debug("stream payload decompression failed", "node", c.node.cfg.name, "routing_id", uint32(c.rid), "err", err)
	if h.Kind == wire.KindRequest {
		_ = c.enqueueError(h.RequestSeq, h.CorrelationID, "protocol_error", "payload decompression failed")
	}
}

func (c *conn) handleControl(h *wire.Header) {
	switch h.Name {
	case wire.NameHeartbeatPing:
		pong := wire.Header{Kind: wire.KindControl, Codec: wire.CodecRaw, Name: wire.NameHeartbeatPong}
		_ = c.enqueue(c.ctx, &pong, nil, writeNoWait)
	case wire.NameHeartbeatPong:
		// Liveness only; the read itself refreshed the idle clock.
	default:
		c.host.metrics.dropped(c.transport, "unknown_control")
	}
}
