package session

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/websocket"

	"github.com/meshnode/meshnode/session/compress"
	"github.com/meshnode/meshnode/session/wire"
)

// closeCause says why a connection closes and whether the client is told.
type closeCause struct {
	reason wire.CloseReason
	notify bool   // send session-closing before closing
	diag   string // session-closing diagnostic
	err    error  // the transport error, if any
}

// conn is one accepted connection. Three parties share it:
//   - the read loop goroutine: waits for bytes, takes a permit, pulls one frame, hands it
//     to the session-owner actor;
//   - the write loop goroutine: flushes queued frames and, once the connection starts
//     closing, runs the teardown (it is the owner of the socket);
//   - the session-owner actor: runs the application callbacks serially.
type conn struct {
	node      *StreamNode
	host      *Host
	nc        net.Conn
	transport string
	rid       RoutingID
	peer      *Peer
	pid       *actor.PID
	ctx       context.Context // callback context; cancelled after the disconnect callback
	cancel    context.CancelFunc

	closing    chan struct{} // closed when the connection starts closing: admission stops
	closeOnce  sync.Once
	cause      closeCause // written once inside closeOnce, read after closing is closed
	readerDone chan struct{}
	done       chan struct{} // closed after the disconnect callback returned
	extDone    chan struct{} // optional: closed with done (the WebSocket handler waits on it)

	br     *bufio.Reader // the receive buffer; owned by the current read loop goroutine
	turn   atomic.Uint64 // reader epoch << 1 | in-turn bit, see readLoop
	rescue *time.Timer   // fires rescueReader when a turn holds the read loop too long
	inline atomic.Bool   // the read loop is posting a packet: the turn may run inline

	rejectInbound   atomic.Bool // closing for replacement: no more application dispatch
	hookMu          sync.Mutex
	afterDisconnect []func(ctx context.Context, reason wire.CloseReason)

	lastInbound   atomic.Int64 // unix nanos of the last inbound frame, for the idle timer
	waitingPermit atomic.Bool  // the read loop waits for a permit: the idle clock stops
	idleTimer     *time.Timer

	wmu      sync.Mutex
	wcond    *sync.Cond // on wmu: signalled when a drain ends
	wbuf     []byte     // frames queued by producers
	wactive  bool       // a goroutine is draining wbuf to the socket
	wclosed  bool
	wnotify  chan struct{} // cap 1: wbuf went from empty to non-empty
	wdrained chan struct{} // cap 1: the writer flushed, space may be free
	wspare   []byte        // writer-owned spare buffer
	wbroken  atomic.Bool   // a socket write failed
}

// startConn builds the session for an accepted (and handshaken) connection. It returns
// nil when the host is closing; the connection is then closed.
func (n *StreamNode) startConn(nc net.Conn, transport string, extDone chan struct{}) *conn {
	h := n.host
	c := &conn{
		node:       n,
		host:       h,
		nc:         nc,
		transport:  transport,
		rid:        h.routingID(),
		closing:    make(chan struct{}),
		readerDone: make(chan struct{}),
		done:       make(chan struct{}),
		extDone:    extDone,
		wnotify:    make(chan struct{}, 1),
		wdrained:   make(chan struct{}, 1),
	}
	c.peer = &Peer{c: c}
	c.wcond = sync.NewCond(&c.wmu)
	c.ctx, c.cancel = context.WithCancel(h.baseCtx)
	if !h.track(c) {
		c.cancel()
		_ = nc.Close()
		return nil
	}
	c.br = bufio.NewReaderSize(nc, n.socket.ReadBufferSize)
	c.rescue = time.AfterFunc(time.Hour, c.rescueReader)
	c.rescue.Stop()
	sess := n.sessType.newSession()
	props := actor.PropsFromProducer(func() actor.Actor { return &ownerActor{c: c, sess: sess} },
		actor.WithDispatcher(sessionDispatcher{c: c}))
	c.pid = h.system.Root.Spawn(props)
	h.metrics.opened(transport)
	if d := n.cfg.idleTimeout; d > 0 {
		c.lastInbound.Store(time.Now().UnixNano())
		c.idleTimer = time.AfterFunc(d, c.checkIdle)
	}
	go c.readLoop()
	go c.writeLoop()
	return c
}

func (c *conn) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// close starts closing the connection for cause; only the first call counts.
func (c *conn) close(cause closeCause) bool {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.cause = cause
		if cause.notify {
			c.wmu.Lock()
			if !c.wclosed {
				c.wbuf = appendSessionClosing(c.wbuf, cause.reason, cause.diag)
			}
			c.wmu.Unlock()
		}
		close(c.closing)
	})
	return first
}

// abort closes at once, without telling the client and without waiting for writes,
// and cancels the callback context so callbacks that honour it return.
func (c *conn) abort() {
	c.close(closeCause{reason: wire.CloseServerDrain})
	c.cancel()
	_ = c.nc.Close()
}

func appendSessionClosing(dst []byte, reason wire.CloseReason, diag string) []byte {
	diag = truncateUTF8(diag, wire.MaxDiagnosticLen)
	var scratch [wire.MaxDiagnosticLen + 4]byte
	payload, err := wire.AppendSessionClosing(scratch[:0], wire.SessionClosing{Reason: reason, Diagnostic: diag})
	if err != nil {
		return dst
	}
	h := wire.Header{Kind: wire.KindControl, Codec: wire.CodecRaw, Name: wire.NameSessionClosing}
	out, err := wire.AppendFrame(dst, &h, payload)
	if err != nil {
		return dst
	}
	return out
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// acquirePermit waits for a host-wide permit. While it waits, the idle clock stands
// still: the client is waiting on us, not idle.
func (c *conn) acquirePermit() bool {
	if c.node.cfg.idleTimeout <= 0 {
		return c.host.permits.acquire(c.ctx, c.closing)
	}
	c.waitingPermit.Store(true)
	ok := c.host.permits.acquire(c.ctx, c.closing)
	c.lastInbound.Store(time.Now().UnixNano())
	c.waitingPermit.Store(false)
	return ok
}

func (c *conn) checkIdle() {
	if c.isClosing() {
		return
	}
	d := c.node.cfg.idleTimeout
	if c.waitingPermit.Load() {
		c.idleTimer.Reset(d)
		return
	}
	idle := time.Since(time.Unix(0, c.lastInbound.Load()))
	if idle >= d {
		c.close(closeCause{reason: wire.CloseIdleTimeout, notify: true, diag: "idle timeout"})
		return
	}
	c.idleTimer.Reset(d - idle)
}

// readLoop is the framework-owned receive loop (seed §4): it waits for bytes without a
// permit, takes a host-wide permit, and only then pulls one frame. While no permit is
// free nothing more is read, so the kernel buffers fill and the client stalls in TCP.
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

// deliver hands a packet, with its permit, to the session owner. When nothing more is
// buffered (the request/response case) the turn may run on this goroutine; when more
// frames are already waiting (pipelining) the turn goes to a worker so reading and
// processing overlap. It reports false when a rescue reader took over while the turn
// ran on this goroutine.
func (c *conn) deliver(pkt *Packet) bool {
	c.host.permits.queued.Add(1)
	if c.br.Buffered() > 0 {
		c.host.system.Root.Send(c.pid, pkt)
		return true
	}
	w := c.turn.Load() | turnBit
	c.turn.Store(w)
	c.rescue.Reset(rescueAfter)
	c.inline.Store(true)
	c.host.system.Root.Send(c.pid, pkt)
	c.inline.Store(false)
	if !c.turn.CompareAndSwap(w, w&^turnBit) {
		return false
	}
	c.rescue.Stop()
	return true
}

// readFrames reads until the connection closes (false) or another goroutine took over
// reading (true).
func (c *conn) readFrames() (handedOff bool) {
	br := c.br
	maxMsg := c.node.maxMsg
	for {
		pre, err := br.Peek(wire.PrefixSize)
		if err != nil {
			c.readFailed(err)
			return false
		}
		hl, pl := wire.ParsePrefix(pre)
		total := hl + pl
		if maxMsg > 0 && total > maxMsg {
			c.host.metrics.messageTooLarge(c.transport)
			c.host.log.Warn("EMSGSIZE: inbound message over MaxMessageSize, closing",
				"node", c.node.cfg.name, "routing_id", uint32(c.rid), "size", total, "max", maxMsg)
			// Seed §9: no error frame; the client observes only the close.
			c.close(closeCause{reason: wire.CloseProtocolError, err: ErrMessageTooLarge})
			return false
		}
		frameLen := wire.PrefixSize + total
		// Take the whole frame into user space before asking for a permit, so a permit
		// is never held while a slow client trickles bytes (one busy connection must
		// not block the others). A frame that fits the receive buffer waits there; a
		// larger one (bounded by MaxMessageSize) is read into its own allocation.
		var body []byte
		fits := frameLen <= br.Size()
		if fits {
			if _, err := br.Peek(frameLen); err != nil {
				c.readFailed(err)
				return false
			}
		} else {
			body = make([]byte, total)
			_, _ = br.Discard(wire.PrefixSize)
			if _, err := io.ReadFull(br, body); err != nil {
				c.readFailed(err)
				return false
			}
		}
		if c.node.cfg.idleTimeout > 0 {
			// Bytes arrived: the client is not idle, however long the permit takes.
			c.lastInbound.Store(time.Now().UnixNano())
		}
		if c.isClosing() || !c.acquirePermit() {
			return false
		}
		if fits {
			body = make([]byte, total)
			b, _ := br.Peek(frameLen)
			copy(body, b[wire.PrefixSize:])
			_, _ = br.Discard(frameLen)
		}
		c.host.metrics.packetIn(frameLen)
		switch c.admit(hl, body) {
		case admitClosed:
			return false
		case admitHandedOff:
			return true
		}
	}
}

type admitResult uint8

const (
	admitNext      admitResult = iota // go on reading
	admitClosed                       // the connection is closing
	admitHandedOff                    // a rescue reader owns reading now
)

// readFailed classifies a read error. Errors after the connection started closing are
// the read being cancelled by the teardown and mean nothing.
func (c *conn) readFailed(err error) {
	if c.isClosing() {
		return
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		websocket.CloseStatus(err) == websocket.StatusNormalClosure || websocket.CloseStatus(err) == websocket.StatusGoingAway {
		c.close(closeCause{reason: wire.CloseClientClose})
		return
	}
	c.transportError(err)
}

// transportError reports a transport error of this session to its error callback and
// closes it (seed §7).
func (c *conn) transportError(err error) {
	if c.close(closeCause{reason: wire.CloseTransportError, err: err}) {
		c.host.system.Root.Send(c.pid, &transportFault{err: err})
	}
}

// admit decodes the pulled frame and passes it, with its permit, to the session owner.
func (c *conn) admit(hl int, body []byte) admitResult {
	h, err := wire.DecodeHeader(body[:hl])
	if err != nil {
		c.host.permits.release()
		c.protocolError(err)
		return admitClosed
	}
	payload := body[hl:]
	switch h.Kind {
	case wire.KindControl:
		c.handleControl(&h)
		c.host.permits.release()
		return admitNext
	case wire.KindResponse, wire.KindError:
		// The server sends no requests, so a client reply has nothing to complete.
		c.host.permits.release()
		c.host.metrics.dropped(c.transport, "unexpected_reply")
		return admitNext
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
			return admitNext
		}
		payload = plain
		h.Compressed = false
	}
	pkt := &Packet{
		Kind:          h.Kind,
		Name:          h.Name,
		Metadata:      h.Metadata,
		RequestSeq:    h.RequestSeq,
		CorrelationID: h.CorrelationID,
		FlowID:        h.FlowID,
		FlowOrigin:    h.FlowOrigin,
		Codec:         h.Codec,
		Payload:       payload,
		Peer:          c.peer,
	}
	if !c.deliver(pkt) {
		return admitHandedOff
	}
	return admitNext
}

// maxUncappedDecompressed bounds a decompressed payload when MaxMessageSize is 0, so a
// small container cannot claim an unbounded allocation.
const maxUncappedDecompressed = 64 << 20

func (c *conn) protocolError(err error) {
	c.host.metrics.protocolError(c.transport)
	c.host.log.Debug("stream protocol error, closing", "node", c.node.cfg.name, "routing_id", uint32(c.rid), "err", err)
	c.close(closeCause{reason: wire.CloseProtocolError, notify: true, diag: err.Error(), err: err})
}

// decompressFailed handles a payload whose container does not decode: a Request gets a
// protocol_error reply, a Send is dropped; the connection stays (digest §9.3: malformed
// request -> ProtocolError, one-way -> record only).
func (c *conn) decompressFailed(h *wire.Header, err error) {
	c.host.metrics.dropped(c.transport, "decompression_failed")
	c.host.log.Debug("stream payload decompression failed", "node", c.node.cfg.name, "routing_id", uint32(c.rid), "err", err)
	if h.Kind == wire.KindRequest {
		_ = c.enqueueError(c.ctx, h.RequestSeq, h.CorrelationID, "protocol_error", "payload decompression failed")
	}
}

func (c *conn) handleControl(h *wire.Header) {
	switch h.Name {
	case wire.NameHeartbeatPing:
		pong := wire.Header{Kind: wire.KindControl, Codec: wire.CodecRaw, Name: wire.NameHeartbeatPong}
		_ = c.enqueue(c.ctx, &pong, nil, false)
	case wire.NameHeartbeatPong:
		// Liveness only; the read itself refreshed the idle clock.
	default:
		c.host.metrics.dropped(c.transport, "unknown_control")
	}
}

// enqueue queues one frame. When direct is true and no write is in progress, the caller
// writes the queue itself instead of waking the writer goroutine: a reply made in the
// session's turn then costs no goroutine hand-off. Pushes from other goroutines pass
// direct=false so a slow client never blocks, say, a broadcast loop. enqueue waits
// while more than MaxPendingWrite bytes are queued (send-side backpressure) until ctx
// ends.
func (c *conn) enqueue(ctx context.Context, h *wire.Header, payload []byte, direct bool) error {
	limit := c.node.socket.MaxPendingWrite
	for {
		if c.isClosing() {
			return ErrSessionClosed
		}
		c.wmu.Lock()
		if c.wclosed {
			c.wmu.Unlock()
			return ErrSessionClosed
		}
		if n := len(c.wbuf); n == 0 || n < limit {
			out, err := wire.AppendFrame(c.wbuf, h, payload)
			if err != nil {
				c.wmu.Unlock()
				return err
			}
			c.wbuf = out
			c.host.metrics.packetOut(len(out) - n)
			if c.wactive {
				// The active writer loops until the queue is empty: it takes this too.
				c.wmu.Unlock()
				return nil
			}
			if direct {
				c.wactive = true
				c.wmu.Unlock()
				c.drain()
				return nil
			}
			c.wmu.Unlock()
			select {
			case c.wnotify <- struct{}{}:
			default:
			}
			return nil
		}
		c.wmu.Unlock()
		select {
		case <-c.wdrained:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closing:
			return ErrSessionClosed
		}
	}
}

func (c *conn) enqueueError(ctx context.Context, seq uint64, corr, code, message string) error {
	h := wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON, RequestSeq: seq, CorrelationID: corr}
	return c.enqueue(ctx, &h, c.host.errorPayload(code, message), false)
}

// writeLoop writes what pushes queued and owns the teardown.
func (c *conn) writeLoop() {
	for {
		select {
		case <-c.wnotify:
			c.wmu.Lock()
			if c.wactive || c.wclosed || len(c.wbuf) == 0 {
				c.wmu.Unlock()
				continue
			}
			c.wactive = true
			c.wmu.Unlock()
			c.drain()
		case <-c.closing:
			c.teardown()
			return
		}
	}
}

// drain writes the queue until it is empty, coalescing whatever producers queued
// meanwhile into one write (one WebSocket message of whole frames). The caller set
// wactive; only one goroutine drains at a time, and it owns wspare while it does.
func (c *conn) drain() {
	for {
		c.wmu.Lock()
		buf := c.wbuf
		if len(buf) == 0 || c.wclosed {
			c.wactive = false
			c.wcond.Broadcast()
			c.wmu.Unlock()
			select {
			case c.wdrained <- struct{}{}:
			default:
			}
			return
		}
		c.wbuf = c.wspare[:0]
		c.wmu.Unlock()
		if !c.wbroken.Load() {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.node.socket.SendTimeout))
			if _, err := c.nc.Write(buf); err != nil {
				c.wbroken.Store(true)
				if !c.isClosing() {
					c.transportError(err)
				}
			}
		}
		if cap(buf) > 1<<20 {
			buf = nil // do not pin a burst-sized buffer for the life of the connection
		}
		c.wspare = buf[:0]
	}
}

// teardown runs once, on the write loop, after the connection started closing (seed
// §4.1): admission has stopped; queued frames (and session-closing) are written; the
// in-flight read is cancelled and observed finished; only then is the socket released
// and the session owner told to run the disconnect callback, its last.
func (c *conn) teardown() {
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	// The rescue timer stays armed: if a callback holds the read loop, the rescue
	// reader is what observes the closed socket and lets the teardown finish.
	c.wmu.Lock()
	for c.wactive {
		// An in-flight write completes (or fails on its deadline) before the socket goes.
		c.wcond.Wait()
	}
	buf := c.wbuf
	c.wbuf = nil
	c.wclosed = true
	c.wmu.Unlock()
	if len(buf) > 0 && c.cause.notify && !c.wbroken.Load() {
		_ = c.nc.SetWriteDeadline(time.Now().Add(min(c.node.socket.SendTimeout, 2*time.Second)))
		if _, err := c.nc.Write(buf); err != nil {
			c.wbroken.Store(true)
		}
	}
	_ = c.nc.SetReadDeadline(time.Now())
	<-c.readerDone
	if err := c.nc.Close(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.host.log.Debug("stream socket close", "node", c.node.cfg.name, "routing_id", uint32(c.rid), "err", err)
	}
	c.host.metrics.closed(c.transport, c.cause.reason)
	c.host.system.Root.Send(c.pid, &disconnected{reason: c.cause.reason})
}

// finished runs on the session owner after the disconnect callback.
func (c *conn) finished() {
	c.cancel()
	close(c.done)
	if c.extDone != nil {
		close(c.extDone)
	}
	c.host.untrack(c)
}
