package connector

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
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

// conn is one live session: a transport, its pending requests and its goroutines. It
// never outlives a drop; a reconnect makes a new conn.
type conn struct {
	c    *Connector
	t    *transport
	disp *dispatcher
	br   *bufio.Reader
	pre  [wire.PrefixSize]byte
	fbuf []byte // header + payload of the frame being read; reused

	wmu sync.Mutex // one frame (or control frame) per transport write

	mu      sync.Mutex
	pending map[uint64]*call // nil once dropped

	closed atomic.Bool   // set first thing on drop; writes check it
	frames atomic.Uint64 // inbound frames, for the heartbeat's silence check
	stop   chan struct{} // closed on drop: ends the heartbeat loop

	once sync.Once
	ce   *CloseError // set inside once; read after drop returned
}

func newConn(c *Connector, t *transport) *conn {
	return &conn{
		c:       c,
		t:       t,
		disp:    c.disp,
		br:      bufio.NewReaderSize(t, readBufferSize),
		pending: make(map[uint64]*call),
		stop:    make(chan struct{}),
	}
}

// drop ends the connection exactly once: the connector learns the reason first (so
// CloseReason and State are current when callers wake up), then the transport closes
// and every pending request fails with the reason. A concurrent second call waits for
// the first to finish, so afterwards cn.ce is always set.
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

// write sends b in one transport write. A failed write ends the connection, and the
// result is then the connection's *CloseError.
func (cn *conn) write(b []byte) error {
	cn.wmu.Lock()
	if cn.closed.Load() {
		cn.wmu.Unlock()
		cn.drop(wire.CloseTransportError, "", errConnClosed)
		return cn.ce
	}
	_, err := cn.t.Write(b)
	cn.wmu.Unlock()
	if err != nil {
		cn.drop(wire.CloseTransportError, "", fmt.Errorf("write: %w", err))
		return cn.ce
	}
	return nil
}

// errConnClosed is the cause recorded when a write finds the connection already
// dropping; drop keeps the first cause, so this is never seen in practice.
var errConnClosed = errors.New("connection closed")

// readLoop reads frames until the transport fails or a frame ends the connection.
func (cn *conn) readLoop() {
	defer cn.c.wg.Done()
	for {
		h, payload, err := cn.readFrame()
		if err != nil {
			if errors.Is(err, ErrFrameDecode) || errors.Is(err, ErrFrameTooLarge) {
				cn.fail(err)
			} else {
				cn.drop(wire.CloseTransportError, "", fmt.Errorf("read: %w", err))
			}
			return
		}
		cn.frames.Add(1)
		if !cn.handle(&h, payload) {
			return
		}
	}
}

// readFrame reads one whole frame. The payload aliases cn.fbuf until the next call.
// The receive bound is checked on the prefix, before the body is read.
func (cn *conn) readFrame() (wire.Header, []byte, error) {
	if _, err := io.ReadFull(cn.br, cn.pre[:]); err != nil {
		return wire.Header{}, nil, err
	}
	hl, pl := wire.ParsePrefix(cn.pre[:])
	if pl > cn.c.opts.MaxReceivePayload {
		return wire.Header{}, nil, fmt.Errorf("%w: payload of %d bytes, limit %d", ErrFrameTooLarge, pl, cn.c.opts.MaxReceivePayload)
	}
	n := hl + pl
	buf := cn.fbuf
	if cap(buf) < n {
		buf = make([]byte, n, max(n, 4<<10))
		if n <= maxKeptFrameBuffer {
			cn.fbuf = buf
		}
	}
	buf = buf[:n]
	if _, err := io.ReadFull(cn.br, buf); err != nil {
		return wire.Header{}, nil, err
	}
	h, err := wire.DecodeHeader(buf[:hl])
	if err != nil {
		return wire.Header{}, nil, fmt.Errorf("%w: %w", ErrFrameDecode, err)
	}
	return h, buf[hl:], nil
}

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
		// Answered even with heartbeats off (digest §4.4).
		return cn.write(pongFrame) == nil
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
			if cn.write(pingFrame) != nil {
				return
			}
		}
	}
}
