package session

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/meshnode/meshnode/internal/protoactor/actor"

	"github.com/meshnode/meshnode/internal/wake"
	"github.com/meshnode/meshnode/session/wire"
)

// closeCause says why a connection closes and what the client is told.
type closeCause struct {
	reason wire.CloseReason
	notify bool   // send session-closing after what is queued
	flush  bool   // write what is queued before closing, without session-closing
	diag   string // session-closing diagnostic
	err    error  // the transport error, if any
}

// conn is one accepted connection. Three parties share it:
//   - the read loop goroutine: waits for bytes, takes a permit, pulls one frame, hands it
//     to the session-owner actor (readloop.go);
//   - the write loop goroutine: flushes queued frames and, once the connection starts
//     closing, runs the teardown; it owns the socket (writequeue.go);
//   - the session-owner actor: runs the application callbacks serially (owner.go).
type conn struct {
	node      *StreamNode
	host      *Host
	nc        net.Conn
	ws        *wsTransport // ws:// and wss:// only: the close handshake needs it
	transport string
	opened    int64 // unix seconds it was accepted, for operators (Host.Sessions)
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

	// Read side (readloop.go).
	rb         frameBuffer   // owned by the current read loop goroutine
	turn       atomic.Uint64 // reader epoch << 1 | in-turn bit, see readLoop
	rescue     *time.Timer   // fires rescueReader when a turn holds the read loop too long
	inline     atomic.Int32  // inlineOff, inlineOpen (the read loop is posting), inlineParked
	parked     func()        // the mailbox run parked for the read loop (inlineParked)
	frameTimer *time.Timer   // partial-frame timeout; made on first use
	frameArmed atomic.Bool
	reuseSends bool                   // the session type reuses Send packets (SessionType.ReuseSendPackets)
	lastName   string                 // the name of the last reused Send, kept as one string (internName)
	spareLocal *Packet                // the reader's spare packets (reuse.go)
	spares     atomic.Pointer[Packet] // packets the turns gave back, for the reader

	// Per-session ingress bound: application packets pulled but whose callback has not
	// started, and how many of them still hold a host permit (a stalled session gives
	// its permits back, see releaseStalled).
	//
	// turns packs two counters into one word, so that a turn's start moves both with
	// one atomic operation: the packet turns started (high 32 bits, wrapping, for stall
	// detection) and the packets pending (low 32 bits: pulled, callback not started).
	turns          atomic.Uint64
	pendingPermits atomic.Int64
	stallTimer     *time.Timer
	stallArmed     atomic.Bool
	stallMark      atomic.Uint64
	busy           atomic.Int64 // packets posted whose chain of turns has not finished
	progress       wake.Signal  // a packet turn started or finished
	gate           atomic.Pointer[func() <-chan struct{}]

	rejectInbound   atomic.Bool // closing for replacement: no more application dispatch
	hookMu          sync.Mutex
	afterDisconnect []func(ctx context.Context, reason wire.CloseReason)
	droppedAtClose  atomic.Int64 // packets whose reply or push failed because the session was closing

	lastInbound atomic.Int64 // unix nanos of the last inbound frame, for the idle timer
	waiting     atomic.Bool  // the read loop waits on the server (a permit, a bound): the idle clock stops
	idleTimer   *time.Timer

	// Write side (writequeue.go).
	wmu     sync.Mutex
	wcond   *sync.Cond // on wmu: signalled when a drain ends
	wbuf    []byte     // frames queued by producers
	wactive bool       // a goroutine is draining wbuf to the socket
	wclosed bool
	wqueued atomic.Int64 // bytes queued or being written
	drained wake.Signal  // a write finished: queue space may be free
	wspare  []byte       // writer-owned spare buffer
	wbroken atomic.Bool  // a socket write failed
	nbw     *nbWrite     // writeNow's system call, made on its first use
}

// startConn builds the session for an accepted (and handshaken) connection. It returns
// nil when the host is closing; the connection is then closed.
func (n *StreamNode) startConn(nc net.Conn, ws *wsTransport, transport string, extDone chan struct{}) *conn {
	h := n.host
	c := &conn{
		node:       n,
		host:       h,
		nc:         nc,
		ws:         ws,
		transport:  transport,
		rid:        h.routingID(),
		closing:    make(chan struct{}),
		readerDone: make(chan struct{}),
		done:       make(chan struct{}),
		extDone:    extDone,
		opened:     time.Now().Unix(),
	}
	c.peer = &Peer{c: c}
	c.wcond = sync.NewCond(&c.wmu)
	c.ctx, c.cancel = context.WithCancel(h.baseCtx)
	if !h.track(c) {
		c.cancel()
		_ = nc.Close()
		return nil
	}
	c.rb = frameBuffer{src: nc, steady: n.socket.ReadBufferSize}
	c.reuseSends = n.sessType.reuseSends && !h.opts.NoPacketReuse
	c.rescue = time.AfterFunc(time.Hour, c.rescueReader)
	c.rescue.Stop()
	sess := n.sessType.newSession()
	props := actor.PropsFromProducer(func() actor.Actor { return &ownerActor{c: c, sess: sess} },
		actor.WithDispatcher(sessionDispatcher{c: c}))
	c.pid = h.system.Root.Spawn(props)
	h.metrics.opened(transport)
	if d := n.cfg.idleTimeout; d > 0 {
		c.lastInbound.Store(time.Now().UnixNano())
		// Made stopped, then armed: the assignment happens before the timer can fire
		// (its callback, and the teardown that may follow, read the field).
		c.idleTimer = time.AfterFunc(time.Hour, c.checkIdle)
		c.idleTimer.Stop()
		c.idleTimer.Reset(d)
	}
	go c.readLoop()
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
	if first {
		if cause.reason == wire.CloseTransportError && cause.err != nil {
			// The error callback is queued before the teardown can queue the disconnect
			// callback: once the owner ran that one it stops, and a transport error
			// posted after it would never be reported.
			c.host.system.Root.Send(c.pid, &transportFault{err: cause.err})
		}
		// The teardown waits for an in-flight write and the read loop; it is the one
		// goroutine a closing connection adds (an idle one has only its read loop).
		go c.teardown()
	}
	return first
}

// abort closes at once, without telling the client and without waiting for writes,
// and cancels the callback context so callbacks that honour it return.
func (c *conn) abort() {
	c.close(closeCause{reason: wire.CloseServerDrain})
	c.cancel()
	if c.ws != nil {
		_ = c.ws.conn.CloseNow()
	}
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

func (c *conn) checkIdle() {
	if c.isClosing() {
		return
	}
	d := c.node.cfg.idleTimeout
	if c.waiting.Load() {
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

// finished runs on the session owner after the disconnect callback.
func (c *conn) finished() {
	c.cancel()
	if n := c.droppedAtClose.Load(); n > 0 {
		// One line per session however many packets were still queued, and at most one
		// per interval for the host: a reconnecting client must not flood the log.
		c.host.ratelog.Log(c.host.log, slog.LevelWarn, "dropped_at_close", "stream session closed under packets it was serving: their replies or pushes were not sent",
			"node", c.node.cfg.name, "routing_id", uint32(c.rid), "packets", n, "reason", c.cause.reason.MetricLabel())
	}
	close(c.done)
	if c.extDone != nil {
		close(c.extDone)
	}
	c.host.untrack(c)
}
