package connector

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/compress"
	"github.com/meshnode/meshnode/session/wire"
)

// Heartbeat frames never change, so they are encoded once (digest §2.14).
var (
	pingFrame = controlFrame(wire.NameHeartbeatPing)
	pongFrame = controlFrame(wire.NameHeartbeatPong)
)

// controlFrame encodes a Control frame with codec Raw, flags 0 and an empty payload.
func controlFrame(name string) []byte {
	b := make([]byte, 0, wire.PrefixSize+5+len(name))
	b = wire.AppendPrefix(b, 5+len(name), 0)
	b = append(b, wire.Marker, byte(wire.KindControl), byte(wire.CodecRaw), 0, byte(len(name)))
	return append(b, name...)
}

// readBufferSize sizes the buffered reader: many small frames per read syscall.
const readBufferSize = 32 << 10

// maxKeptFrameBuffer bounds the frame buffer a connection keeps between frames; a
// larger frame gets a buffer of its own that is dropped after use.
const maxKeptFrameBuffer = 256 << 10

// maxPendingWrite bounds the bytes queued behind an active write. Producers past it wait
// (bounded by their context) until the writer takes the queue: backpressure instead of
// unbounded buffering when the peer reads slower than we produce.
//
// It is small on purpose. A write goroutine that found the socket full waits for the
// Go netpoller to say it is writable again, and a processor that is busy running a
// sender in a loop does not look at the netpoller: the writer stays parked until the
// sender itself waits, at this bound. At 4 MiB that took milliseconds of Sends, while
// the server drained the socket and sat idle (a sixth of its time); pipelined Sends
// ran 236-283 ns each, and 185-209 ns with 256 KiB (the same with 64 or 128 KiB).
// 256 KiB still lets every write carry a large batch.
const maxPendingWrite = 256 << 10

// maxIdleWriteBuffer: the two write buffers are reused whatever their size (at most
// about maxPendingWrite), so a stream of Sends, which goes idle and busy again many
// times a second, does not allocate; larger ones are dropped once the writer stayed
// idle for writeTrimDelay (after a direct write at once), rather than pinned for the
// life of the connection.
const (
	maxIdleWriteBuffer = 64 << 10
	writeTrimDelay     = time.Second
)

// readerGrace is how long the reader token may stay free after a request read its
// own reply before the read goroutine takes it back (see conn). While it is free nobody
// reads, so a push, ping or EOF that arrives after the last request of a burst waits up
// to about twice this (during the burst, the next request reads it). While requests
// keep leading, the read goroutine wakes once per readerGrace to check, which with many
// busy connections is measurable: 500µs cost 10% of the 100-connection echo
// throughput, 2ms nothing measurable, and back-to-back requests re-take the token
// within microseconds either way.
const readerGrace = 2 * time.Millisecond

// closeFlushTimeout bounds how long Close waits for queued frames to be written.
const closeFlushTimeout = time.Second

// conn is one live session: a transport, its pending requests and its goroutines. It
// never outlives a drop; a reconnect makes a new conn.
//
// Reading. One goroutine at a time holds the reader token and with it the transport's
// read side (br, rs, rdl). Usually that is the background read goroutine. But waking a
// caller from the read goroutine costs a goroutine hand-off per request, which on a
// loopback round trip is several microseconds, more than the rest of the connector's
// work. So on transports that survive a read deadline (tcp, tls) a request that finds
// the token free takes it and reads until its own reply arrives (it "leads"): it
// handles every frame it meets exactly as the read goroutine would (replies of other
// callers, pushes, pings, session-closing) and honours its deadline and cancellation
// with read deadlines. The background reader hands the token back after a reply when
// no other request is pending, so back-to-back requests keep leading; it takes the
// token again when followers need a reader, or when it stayed free for readerGrace.
// WebSocket transports close the connection when a read deadline passes, so there the
// read goroutine always reads.
//
// Writing. Frames go through one queue (wbuf) so that concurrent producers coalesce: a
// request that finds no write in progress becomes the writer and writes its frame at
// once, then what queued behind it meanwhile in one more write, and hands anything
// later to the write goroutine; producers that find a write in progress append and
// return. Sends always hand the write to the write goroutine: a sender in a loop then
// never waits for a syscall (one per frame costs more than everything else a Send
// does), and its frames leave in large batches. The queue is bounded (maxPendingWrite)
// by making producers wait.
type conn struct {
	c       *Connector
	t       *transport
	disp    *dispatcher
	canLead bool // read deadlines are harmless on this transport: requests may lead

	// Read side: only the reader token holder touches these.
	br   *bufio.Reader
	rs   frameState
	fbuf []byte    // body buffer kept between frames
	rdl  time.Time // read deadline last set by a holder; zero: none. A hint, see lead.

	// Write side, guarded by wmu.
	wmu     sync.Mutex
	wbuf    []byte        // frames queued for the active writer
	wspare  []byte        // the other buffer; owned by the active writer
	wactive bool          // someone is writing; wbuf is non-empty only while true
	wbig    bool          // the last writer left buffers over maxIdleWriteBuffer
	wroom   chan struct{} // made by a producer waiting for room; closed when wbuf is taken
	widle   chan struct{} // made by flush; closed when the writer goes idle
	wkick   chan struct{} // cap 1: wakes the write goroutine

	mu      sync.Mutex
	pending map[uint64]*call // nil once dropped
	rowner  readerOwner      // who holds the reader token
	rgen    uint64           // counts the times a request took the token
	rneed   bool             // the token is free but a reader is needed now
	rparked bool             // the background reader waits for a kick, not a timer
	rkick   chan struct{}    // cap 1: wakes the background reader

	closed atomic.Bool   // set first thing on drop; writes check it
	frames atomic.Uint64 // inbound frames, for the heartbeat's silence check
	stop   chan struct{} // closed on drop: ends the heartbeat, read and write goroutines

	once sync.Once
	ce   *CloseError // set inside once; read after drop returned
}

// readerOwner says who holds the reader token.
type readerOwner uint8

const (
	readerNone       readerOwner = iota // free: nobody reads until a request or the background reader takes it
	readerBackground                    // the read goroutine
	readerLeader                        // a request reading its own reply
)

// frameState is the position in the inbound stream between two reads, so that a read
// cut short by a deadline resumes exactly where it stopped, whoever reads next.
type frameState struct {
	inFrame bool   // the prefix was consumed and buf is being filled
	hl      int    // header length of the frame in buf
	got     int    // bytes of buf filled so far
	buf     []byte // header + payload
}

func newConn(c *Connector, t *transport) *conn {
	return &conn{
		c:       c,
		t:       t,
		disp:    c.disp,
		canLead: t.ws == nil && !c.opts.NoCallerReads,
		br:      bufio.NewReaderSize(t, readBufferSize),
		pending: make(map[uint64]*call),
		rowner:  readerBackground, // the read goroutine starts reading at once
		rkick:   make(chan struct{}, 1),
		wkick:   make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
}

// drop ends the connection exactly once: the connector learns the reason first (so
// CloseReason and State are current when callers wake up), then the transport closes
// and every pending request fails with the reason. A concurrent second call waits for
// the first to finish, so afterwards cn.ce is always set. Frames still queued for the
// writer are lost: a Send is at most once.
func (cn *conn) drop(reason wire.CloseReason, diag string, cause error) {
	cn.once.Do(func() {
		cn.closed.Store(true)
		ce := &CloseError{Reason: reason, Diagnostic: diag, Cause: cause}
		cn.ce = ce
		cn.mu.Lock()
		pend := cn.pending
		cn.pending = nil
		cn.mu.Unlock()
		close(cn.stop)
		cn.c.dropped(cn, ce)
		cn.t.shutdown(reason == wire.CloseClientClose)
		for _, cl := range pend {
			cl.finish(ce)
		}
	})
}

// fail reports a stream-breaking error and ends the connection with TransportError.
func (cn *conn) fail(err error) {
	cn.emitError(err)
	cn.drop(wire.CloseTransportError, "", err)
}

// readFailed ends the connection after a failed read.
func (cn *conn) readFailed(err error) {
	if errors.Is(err, ErrFrameDecode) || errors.Is(err, ErrFrameTooLarge) {
		cn.fail(err)
	} else {
		cn.drop(wire.CloseTransportError, "", fmt.Errorf("read: %w", err))
	}
}

func (cn *conn) emitError(err error) {
	cn.c.opts.Logger.Debug("stream connector error", "endpoint", cn.c.ep.raw, "error", err)
	if cn.c.opts.OnError != nil {
		cn.disp.push(event{kind: eventError, err: err})
	}
}

// register makes cl the pending request for seq, unless the connection is gone.
func (cn *conn) register(seq uint64, cl *call) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.pending == nil {
		return false
	}
	cn.pending[seq] = cl
	return true
}

// take removes and returns the pending request for seq; whoever takes a call owns
// finishing it.
func (cn *conn) take(seq uint64) *call {
	cn.mu.Lock()
	cl := cn.pending[seq]
	if cl != nil {
		delete(cn.pending, seq)
	}
	cn.mu.Unlock()
	return cl
}

// abandon removes cl if it is still pending (timeout or cancel) and reports whether it
// did; false means a reply or a drop already took it and will finish it.
func (cn *conn) abandon(seq uint64, cl *call) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.pending[seq] != cl {
		return false
	}
	delete(cn.pending, seq)
	return true
}

// ---- writing ----

// enqueue queues frame (copied) for writing, in call order. With async false the caller
// writes it itself when no write is in progress, plus, in one more write, what others
// queued meanwhile; anything queued after that is left to the write goroutine, so a
// request never keeps writing other callers' frames. With async true the write
// goroutine does all of it. Control frames skip the pending bound (they are tiny, and
// whoever reads must never wait for room). Otherwise, while maxPendingWrite bytes or
// more are queued, enqueue waits until the writer takes the queue, ctx ends (its error
// is returned, nothing was queued) or the connection drops.
//
// A nil result means the frame was queued or written. A frame that was only queued is
// lost if the connection drops before the writer gets to it; requests then fail with
// the drop, Sends are at most once.
func (cn *conn) enqueue(ctx context.Context, frame []byte, async, control bool) error {
	if err := cn.lockRoom(ctx, control); err != nil {
		return err
	}
	cn.wbuf = append(cn.wbuf, frame...)
	return cn.queued(async)
}

// lockRoom waits, as enqueue does, until the write queue has room for one more frame
// (a control frame does not wait). It returns with wmu held, for the caller to append
// the frame to wbuf and call queued; on an error wmu is not held.
func (cn *conn) lockRoom(ctx context.Context, control bool) error {
	cn.wmu.Lock()
	for !control && len(cn.wbuf) >= maxPendingWrite && !cn.closed.Load() {
		room := cn.wroom
		if room == nil {
			room = make(chan struct{})
			cn.wroom = room
		}
		cn.wmu.Unlock()
		select {
		case <-room:
		case <-cn.stop:
		case <-ctx.Done():
			return ctx.Err()
		}
		cn.wmu.Lock()
	}
	if cn.closed.Load() {
		cn.wmu.Unlock()
		cn.drop(wire.CloseTransportError, "", errConnClosed) // waits for the running drop
		return cn.ce
	}
	return nil
}

// queued finishes an enqueue: the frame was appended to wbuf, and wmu (held) is
// released.
func (cn *conn) queued(async bool) error {
	if cn.wactive {
		// The active writer, or the write goroutine it hands over to, writes until the
		// queue is empty: it takes this frame too.
		cn.wmu.Unlock()
		return nil
	}
	cn.wactive = true
	cn.wmu.Unlock()
	if async {
		select {
		case cn.wkick <- struct{}{}:
		default: // a kick hands over wactive, which was ours: none can be pending
		}
		return nil
	}
	// Our frame is the first of the queue, so a failure of the first write is ours.
	if err := cn.drain(directWriteRounds); err != nil {
		return cn.ce
	}
	return nil
}

// directWriteRounds bounds the writes a direct writer makes: its own frame (with
// whatever others queued before the write started), then one more for what queued
// during that write.
const directWriteRounds = 2

// drain writes the queue, one write per round (one WebSocket message of whole frames),
// until it is empty or, when rounds > 0, after that many rounds; a non-empty queue is
// then handed to the write goroutine. The caller set wactive; only one goroutine drains
// at a time, and it owns wspare while it does. A direct writer (rounds > 0) also drops
// buffers over maxIdleWriteBuffer when the queue is empty. It returns the error of the
// first write, if that failed; any failed write drops the connection.
func (cn *conn) drain(rounds int) error {
	var first error
	for round := 0; ; round++ {
		cn.wmu.Lock()
		buf := cn.wbuf
		if len(buf) > 0 && rounds > 0 && round == rounds && !cn.closed.Load() {
			cn.wmu.Unlock()
			select { // wactive stays set: the write goroutine takes over
			case cn.wkick <- struct{}{}:
			default:
			}
			return first
		}
		if len(buf) == 0 || cn.closed.Load() {
			cn.wbuf = buf[:0]
			if rounds > 0 {
				cn.trimLocked()
			}
			cn.wbig = cap(cn.wbuf) > maxIdleWriteBuffer || cap(cn.wspare) > maxIdleWriteBuffer
			cn.wactive = false
			if cn.widle != nil {
				close(cn.widle)
				cn.widle = nil
			}
			cn.wmu.Unlock()
			return first
		}
		cn.wbuf = cn.wspare[:0]
		if cn.wroom != nil {
			close(cn.wroom) // the queue is empty again: waiting producers may append
			cn.wroom = nil
		}
		cn.wmu.Unlock()
		if _, err := cn.t.Write(buf); err != nil {
			cn.drop(wire.CloseTransportError, "", fmt.Errorf("write: %w", err))
			if round == 0 {
				first = err
			}
		}
		cn.wspare = buf[:0]
	}
}

// trimLocked drops write buffers over maxIdleWriteBuffer; wmu is held and no write is
// in progress.
func (cn *conn) trimLocked() {
	if cap(cn.wbuf) > maxIdleWriteBuffer {
		cn.wbuf = nil
	}
	if cap(cn.wspare) > maxIdleWriteBuffer {
		cn.wspare = nil
	}
}

// writeLoop writes what asynchronous producers queued, and trims the write buffers
// once it stayed idle for writeTrimDelay after a burst.
func (cn *conn) writeLoop() {
	defer cn.c.wg.Done()
	trim := time.NewTimer(writeTrimDelay)
	trim.Stop()
	defer trim.Stop()
	for {
		select {
		case <-cn.wkick:
			_ = cn.drain(0) // a failure dropped the connection
			cn.wmu.Lock()
			big := cn.wbig
			cn.wmu.Unlock()
			if big {
				trim.Reset(writeTrimDelay)
			}
		case <-trim.C:
			cn.wmu.Lock()
			if !cn.wactive {
				cn.trimLocked()
				cn.wbig = false
			}
			cn.wmu.Unlock()
		case <-cn.stop:
			return
		}
	}
}

// flush waits until the frames queued so far are written or d passed (then the write in
// progress is cut short by a write deadline, which breaks the connection: it is only
// for Close). It runs before the transport is shut down, so that a Send that returned
// before Close still reaches the peer.
func (cn *conn) flush(d time.Duration) {
	cn.wmu.Lock()
	if !cn.wactive {
		cn.wmu.Unlock()
		return
	}
	if cn.widle == nil {
		cn.widle = make(chan struct{})
	}
	idle := cn.widle
	cn.wmu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
	case <-cn.stop: // dropped meanwhile: nothing more will be written
	case <-t.C:
		// The write in progress fails at once now, which drops the connection.
		_ = cn.t.SetWriteDeadline(time.Unix(1, 0))
		select {
		case <-idle:
		case <-cn.stop:
		}
	}
}

// errConnClosed is the cause recorded when a write finds the connection already
// dropping; drop keeps the first cause, so this is never seen in practice.
var errConnClosed = errors.New("connection closed")

// ---- reading ----

// readLoop is the background reader: it reads while it holds the reader token and,
// on a transport where requests may lead, gives the token back after a reply once no
// request is pending, then waits until the token is needed or stayed free for
// readerGrace.
func (cn *conn) readLoop() {
	defer cn.c.wg.Done()
	var grace *time.Timer
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for cn.readBackground() {
		if !cn.waitForToken(&grace) {
			return
		}
	}
}

// readBackground reads frames while the read goroutine holds the token. It returns true
// when it gave the token back, false when the connection ended.
func (cn *conn) readBackground() bool {
	for {
		h, payload, err := cn.readFrame()
		if err != nil {
			if isTimeout(err) && !cn.closed.Load() {
				// A deadline a request left behind: this reader has none.
				_ = cn.t.SetReadDeadline(time.Time{})
				cn.rdl = time.Time{}
				continue
			}
			cn.readFailed(err)
			return false
		}
		cn.frames.Add(1)
		if !cn.handle(&h, payload) {
			return false
		}
		if cn.canLead && (h.Kind == wire.KindResponse || h.Kind == wire.KindError) && cn.br.Buffered() == 0 {
			cn.mu.Lock()
			yield := len(cn.pending) == 0 // a dropped conn has none either: the wait sees stop
			if yield {
				cn.rowner = readerNone
			}
			cn.mu.Unlock()
			if yield {
				return true
			}
		}
	}
}

// waitForToken waits while the token is free or held by a request, and takes it when
// a reader is needed at once (rneed), or when it stayed free, untaken by any request,
// for a whole readerGrace. It returns false when the connection ended.
func (cn *conn) waitForToken(grace **time.Timer) bool {
	var seen uint64
	timed := false // seen was recorded a whole grace period ago
	for {
		cn.mu.Lock()
		if cn.pending == nil {
			cn.mu.Unlock()
			return false
		}
		if cn.rowner == readerNone && (cn.rneed || timed && cn.rgen == seen) {
			cn.rowner, cn.rneed = readerBackground, false
			cn.mu.Unlock()
			return true
		}
		// One request holding the token for a whole grace period is waiting for a slow
		// reply: sleep until it releases the token instead of polling.
		park := timed && cn.rgen == seen && cn.rowner == readerLeader
		cn.rparked = park
		seen = cn.rgen
		cn.mu.Unlock()

		var expired <-chan time.Time
		if !park {
			if *grace == nil {
				*grace = time.NewTimer(cn.c.grace)
			} else {
				(*grace).Reset(cn.c.grace)
			}
			expired = (*grace).C
		}
		select {
		case <-cn.stop:
			return false
		case <-cn.rkick:
			timed = false // restart the grace period (or take the token if rneed)
		case <-expired:
			timed = true
		}
	}
}

// tryLead gives the reader token to a request that just wrote its frame, if it is free
// and the transport allows it, and returns the generation that identifies this lead.
// If the token is free but the request cannot lead, the read goroutine is woken.
func (cn *conn) tryLead() (gen uint64, ok bool) {
	cn.mu.Lock()
	if cn.rowner != readerNone || cn.pending == nil {
		cn.mu.Unlock()
		return 0, false
	}
	if !cn.canLead {
		cn.rneed = true
		cn.mu.Unlock()
		cn.kickReader()
		return 0, false
	}
	cn.rowner, cn.rneed = readerLeader, false // this request reads for everyone now
	cn.rgen++
	gen = cn.rgen
	cn.mu.Unlock()
	cn.c.leads.Add(1)
	return gen, true
}

// releaseLead gives the token back after a lead. The read goroutine is woken if other
// requests wait for replies or input is already buffered (someone must read now), or
// if it parked while this request led.
func (cn *conn) releaseLead() {
	buffered := cn.br.Buffered() > 0 || cn.rs.inFrame
	cn.mu.Lock()
	cn.rowner = readerNone
	kick := cn.rparked
	if len(cn.pending) > 0 || buffered {
		cn.rneed, kick = true, true
	}
	cn.rparked = cn.rparked && !kick
	cn.mu.Unlock()
	if kick {
		cn.kickReader()
	}
}

func (cn *conn) kickReader() {
	select {
	case cn.rkick <- struct{}{}:
	default:
	}
}

// interruptLead cuts the read of the request that leads as generation gen short (its
// context ended), unless that lead is over. cn.mu orders it with the leader's own
// deadline changes, see lead.
func (cn *conn) interruptLead(gen uint64) {
	cn.mu.Lock()
	if cn.rowner == readerLeader && cn.rgen == gen {
		_ = cn.t.SetReadDeadline(time.Unix(1, 0))
	}
	cn.mu.Unlock()
}

// setLeadDeadline sets the read deadline of a leader (zero: none) under cn.mu, so that a
// concurrent interruptLead either comes after it and wins, or came before it, when the
// caller sees its context ended by checking after this returns.
func (cn *conn) setLeadDeadline(t time.Time) {
	cn.mu.Lock()
	_ = cn.t.SetReadDeadline(t)
	cn.mu.Unlock()
	cn.rdl = t
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// readFrame reads one whole frame. The payload aliases a buffer reused by the next
// call. The receive bound is checked on the prefix, before the body is read. After an
// error (a deadline) the partial frame is kept and the next call continues it.
func (cn *conn) readFrame() (wire.Header, []byte, error) {
	rs := &cn.rs
	if !rs.inFrame {
		// Peek, not Read: a deadline here leaves the stream untouched.
		p, err := cn.br.Peek(wire.PrefixSize)
		if err != nil {
			if err == io.EOF && len(p) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return wire.Header{}, nil, err
		}
		hl, pl := wire.ParsePrefix(p)
		if pl > cn.c.opts.MaxReceivePayload {
			return wire.Header{}, nil, fmt.Errorf("%w: payload of %d bytes, limit %d", ErrFrameTooLarge, pl, cn.c.opts.MaxReceivePayload)
		}
		_, _ = cn.br.Discard(wire.PrefixSize)
		n := hl + pl
		buf := cn.fbuf
		if cap(buf) < n {
			buf = make([]byte, n, max(n, 4<<10))
			if n <= maxKeptFrameBuffer {
				cn.fbuf = buf
			}
		}
		rs.inFrame, rs.hl, rs.got, rs.buf = true, hl, 0, buf[:n]
	}
	for rs.got < len(rs.buf) {
		if rs.got > 0 {
			if hook := midFrameRead.Load(); hook != nil {
				(*hook)()
			}
		}
		m, err := cn.br.Read(rs.buf[rs.got:])
		rs.got += m
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return wire.Header{}, nil, err
		}
	}
	rs.inFrame = false
	body, hl := rs.buf, rs.hl
	rs.buf = nil
	h, ok := decodeReplyHeader(body[:hl])
	if !ok {
		var err error
		if h, err = wire.DecodeHeader(body[:hl]); err != nil {
			return wire.Header{}, nil, fmt.Errorf("%w: %w", ErrFrameDecode, err)
		}
	}
	return h, body[hl:], nil
}

// midFrameRead, when set (by tests), runs in readFrame before a read that continues a
// frame of which it has part: the reader may block there for the rest, which a test
// that interrupts a read mid-frame waits for.
var midFrameRead atomic.Pointer[func()]

// handle acts on one frame and reports whether the connection lives on.
func (cn *conn) handle(h *wire.Header, payload []byte) bool {
	switch h.Kind {
	case wire.KindResponse, wire.KindError:
		return cn.handleReply(h, payload)
	case wire.KindSend:
		return cn.handlePush(h, payload)
	case wire.KindControl:
		return cn.handleControl(h, payload)
	}
	// A server Request has no meaning for a connector (the TS connector ignores it too).
	cn.c.opts.Logger.Debug("stream connector ignored a server request", "name", h.Name, "seq", h.RequestSeq)
	return true
}

func (cn *conn) handleControl(h *wire.Header, payload []byte) bool {
	switch h.Name {
	case wire.NameHeartbeatPing:
		// Answered even with heartbeats off (digest §4.4). Queued for the write
		// goroutine: whoever reads never blocks on a write.
		return cn.enqueue(context.Background(), pongFrame, true, true) == nil
	case wire.NameHeartbeatPong:
		// Nothing to do: every inbound frame already counts as liveness.
	case wire.NameSessionClosing:
		sc, err := wire.DecodeSessionClosing(payload)
		if err != nil {
			cn.fail(fmt.Errorf("%w: session-closing: %w", ErrFrameDecode, err))
			return false
		}
		// The server closes right after this frame; closing our side now fails the
		// pending requests with the server's reason instead of a bare EOF.
		cn.drop(sc.Reason, sc.Diagnostic, nil)
		return false
	default:
		cn.c.opts.Logger.Debug("stream connector ignored a control packet", "name", h.Name)
	}
	return true
}

// inflate returns the payload the application sees. fresh says whether it is a new
// slice (decompression output) rather than an alias of the read buffer.
func (cn *conn) inflate(h *wire.Header, payload []byte) (out []byte, fresh bool, err error) {
	if !h.Compressed {
		return payload, false, nil
	}
	if cn.c.opts.Compression == CompressionNone {
		return nil, false, fmt.Errorf("%w: compressed payload but compression is off", ErrDecompression)
	}
	limit := cn.c.opts.MaxReceivePayload
	out, err = compress.DecodeLZ4(payload, limit)
	switch {
	case errors.Is(err, compress.ErrTooLarge):
		return nil, false, fmt.Errorf("%w: decompressed payload over %d bytes: %w", ErrFrameTooLarge, limit, err)
	case err != nil:
		return nil, false, fmt.Errorf("%w: %w", ErrDecompression, err)
	}
	return out, true, nil
}

func (cn *conn) handleReply(h *wire.Header, payload []byte) bool {
	body, fresh, err := cn.inflate(h, payload)
	if errors.Is(err, ErrFrameTooLarge) {
		cn.fail(err)
		return false
	}
	if h.RequestSeq == 0 {
		// Only an Error may lack request_seq (the header codec enforces it): a
		// stream-level error.
		if err == nil {
			err = remoteError(body)
		}
		cn.emitError(err)
		return true
	}
	cl := cn.take(h.RequestSeq)
	if cl == nil {
		// Never sent, or already timed out or cancelled: dropped, never matched to
		// another request.
		what := "response"
		if h.Kind == wire.KindError {
			what = "error"
			if err == nil {
				err = remoteError(body)
			}
		}
		if err != nil {
			err = fmt.Errorf("%w: %s for request_seq %d: %w", ErrUnexpectedReply, what, h.RequestSeq, err)
		} else {
			err = fmt.Errorf("%w: %s for request_seq %d", ErrUnexpectedReply, what, h.RequestSeq)
		}
		cn.emitError(err)
		return true
	}
	switch {
	case err != nil: // DecompressionFailed: this request fails, the connection stays
		cl.finish(err)
	case h.Kind == wire.KindError:
		cl.finish(remoteError(body))
	case cl.typed:
		// Decoded here, while the caller waits, so the payload needs no copy.
		if cl.resp != nil {
			err = decode(cn.c.opts.Codecs, h.Codec, body, cl.resp)
		}
		cl.finish(err)
	default:
		if !fresh {
			body = bytes.Clone(body)
		}
		cl.reply = Reply{Codec: h.Codec, Payload: body, Metadata: h.Metadata, codecs: cn.c.opts.Codecs}
		cl.finish(nil)
	}
	return true
}

// remoteError turns an Error payload into a *RemoteError, or into ErrFrameDecode when
// it is not the {"code","message"} shape (digest §2.11).
func remoteError(body []byte) error {
	ep, err := codec.DecodeErrorPayload(body)
	if err != nil {
		return fmt.Errorf("%w: error payload: %w", ErrFrameDecode, err)
	}
	return &RemoteError{Code: ep.Code, Message: ep.Message}
}

func (cn *conn) handlePush(h *wire.Header, payload []byte) bool {
	body, fresh, err := cn.inflate(h, payload)
	if err != nil {
		if errors.Is(err, ErrFrameTooLarge) {
			cn.fail(err)
			return false
		}
		cn.emitError(fmt.Errorf("connector: push %q: %w", h.Name, err))
		return true
	}
	hd := cn.c.handler(h.Name)
	if hd == nil {
		cn.c.opts.Logger.Debug("stream connector dropped a push without handler", "name", h.Name)
		return true
	}
	if !fresh {
		body = bytes.Clone(body)
	}
	cn.disp.push(event{kind: eventMessage, handler: hd, msg: Message{
		Name: h.Name, Codec: h.Codec, Payload: body, Metadata: h.Metadata, FlowID: h.FlowID,
		codecs: cn.c.opts.Codecs,
	}})
	return true
}

// heartbeatLoop pings every Interval and drops the connection with HeartbeatTimeout
// once no inbound frame of any kind arrived for Timeout. The timeout is checked before
// each ping, as the reference connectors do, so it is detected with Interval
// resolution.
func (cn *conn) heartbeatLoop() {
	defer cn.c.wg.Done()
	hb := cn.c.opts.Heartbeat
	tick := time.NewTicker(hb.Interval)
	defer tick.Stop()
	seen := cn.frames.Load()
	quietSince := time.Now()
	for {
		select {
		case <-cn.stop:
			return
		case now := <-tick.C:
			if f := cn.frames.Load(); f != seen {
				seen, quietSince = f, now
			} else if now.Sub(quietSince) >= hb.Timeout {
				cn.drop(wire.CloseHeartbeatTimeout, "", fmt.Errorf("no inbound frame for %v", now.Sub(quietSince).Round(time.Millisecond)))
				return
			}
			if cn.enqueue(context.Background(), pingFrame, true, true) != nil {
				return
			}
		}
	}
}
