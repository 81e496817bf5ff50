package session

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/coder/websocket"

	"github.com/meshnode/meshnode/session/wire"
)

// writeMode says how a frame waits for room in the outbound queue. The queue has a soft
// limit (SocketOptions.MaxPendingWrite) and a hard limit of twice that: at the soft
// limit the session stops pulling packets and pushes wait; the room up to the hard
// limit is for replies to packets already pulled and for frames whose producer must not
// wait (a node's record receiver serving every session).
type writeMode uint8

const (
	// writePush waits while the queue is at its soft limit, bounded by its context.
	writePush writeMode = iota
	// writeReply waits only at the hard limit, and may write to the socket itself when
	// no write is in progress (a reply made in the session's turn costs no hand-off).
	writeReply
	// writeNoWait never waits: past the hard limit the client is a slow consumer, its
	// session is closed and the frame fails with ErrSlowConsumer.
	writeNoWait
	// writeSoft never waits either: at the soft limit the frame fails with ErrBehind and
	// the session stays open (a topic's fan-out drops a subscriber that falls behind).
	writeSoft
)

// enqueue queues one frame for the socket (see writeMode). With h nil, payload is a
// whole frame encoded already (EncodeSend), written as it is.
func (c *conn) enqueue(ctx context.Context, h *wire.Header, payload []byte, mode writeMode) error {
	limit := int64(c.node.socket.MaxPendingWrite)
	if mode != writePush && mode != writeSoft {
		limit *= 2
	}
	for {
		if c.isClosing() {
			return ErrSessionClosed
		}
		c.wmu.Lock()
		if c.wclosed {
			c.wmu.Unlock()
			return ErrSessionClosed
		}
		if q := c.wqueued.Load(); q == 0 || q < limit {
			n := len(c.wbuf)
			var out []byte
			if h == nil {
				out = append(c.wbuf, payload...)
			} else {
				var err error
				if out, err = wire.AppendFrame(c.wbuf, h, payload); err != nil {
					c.wmu.Unlock()
					return err
				}
			}
			c.wbuf = out
			c.wqueued.Add(int64(len(out) - n))
			c.host.metrics.packetOut(len(out) - n)
			if c.wactive {
				// The active writer loops until the queue is empty: it takes this too.
				c.wmu.Unlock()
				return nil
			}
			if mode == writeReply {
				c.wactive = true
				c.wmu.Unlock()
				c.drain()
				return nil
			}
			// No writer: a producer that must not wait writes what the socket takes
			// now (writeNow); otherwise, or for the rest, a writer starts for this
			// burst. It ends when the queue is empty, so an idle connection holds no
			// writer goroutine.
			c.wactive = true
			c.wmu.Unlock()
			if (mode == writeNoWait || mode == writeSoft) && !c.host.opts.NoInlineTurns && c.writeNow() {
				return nil
			}
			go c.drain()
			return nil
		}
		c.wmu.Unlock()
		switch mode {
		case writeNoWait:
			c.slowConsumer()
			return ErrSlowConsumer
		case writeSoft:
			return ErrBehind
		}
		ch := c.drained.Wait()
		if c.wqueued.Load() < limit {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closing:
			return ErrSessionClosed
		}
	}
}

// slowConsumer closes a session whose client does not read what it is sent, once its
// outbound queue reached the hard limit (the way nats-server treats a slow consumer):
// its memory stays bounded and the loss is visible to the client as a close, not as
// silently missing frames.
func (c *conn) slowConsumer() {
	if c.isClosing() {
		return
	}
	c.host.metrics.slowConsumer(c.transport)
	c.host.ratelog.Log(c.host.log, slog.LevelWarn, "slow_consumer", "stream session is a slow consumer, closing",
		"node", c.node.cfg.name, "routing_id", uint32(c.rid), "transport", c.transport, "queued_bytes", c.wqueued.Load())
	c.transportError(ErrSlowConsumer)
	// A write blocked on the client's full socket would hold the teardown for up to
	// SendTimeout: the client reads nothing, so no more writes, and the one in flight
	// ends now.
	c.wbroken.Store(true)
	_ = c.nc.SetWriteDeadline(time.Now())
}

func (c *conn) enqueueError(seq uint64, corr, code, message string) error {
	h := wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON, RequestSeq: seq, CorrelationID: corr}
	return c.enqueue(c.ctx, &h, c.host.errorPayload(code, message), writeNoWait)
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
		c.wqueued.Add(-int64(len(buf)))
		c.drained.Notify()
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
	c.drained.Notify()
	serverClose := c.cause.notify || c.cause.flush
	if len(buf) > 0 && serverClose && !c.wbroken.Load() {
		_ = c.nc.SetWriteDeadline(time.Now().Add(min(c.node.socket.SendTimeout, 2*time.Second)))
		if _, err := c.nc.Write(buf); err != nil {
			c.wbroken.Store(true)
		}
	}
	if c.ws != nil {
		c.closeWebSocket(serverClose)
	} else {
		_ = c.nc.SetReadDeadline(time.Now())
		<-c.readerDone
		if err := c.nc.Close(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.host.log.Debug("stream socket close", "node", c.node.cfg.name, "routing_id", uint32(c.rid), "err", err)
		}
	}
	c.host.metrics.closed(c.transport, c.cause.reason)
	c.host.system.Root.Send(c.pid, &disconnected{reason: c.cause.reason})
}

// closeWebSocket ends a WebSocket session. A close the server starts (idle, drain,
// replacement, a protocol error, EMSGSIZE) sends a WebSocket close frame after the
// session-closing frame and waits for the client's, as browsers expect (otherwise they
// report an abnormal closure, 1006); the code is going-away (1001) for a drain,
// message-too-big (1009) for EMSGSIZE and normal closure (1000) otherwise. A close the
// client started was already answered by the WebSocket library.
func (c *conn) closeWebSocket(serverClose bool) {
	defer func() { _ = c.nc.Close() }() // stops the byte stream's deadline timers
	if !serverClose || c.wbroken.Load() {
		_ = c.ws.conn.CloseNow()
		<-c.readerDone
		return
	}
	code := websocket.StatusNormalClosure
	switch {
	case c.cause.reason == wire.CloseServerDrain:
		code = websocket.StatusGoingAway
	case errors.Is(c.cause.err, ErrMessageTooLarge):
		code = websocket.StatusMessageTooBig
	}
	// The handshake reads the client's close frame; the read loop, if it is reading,
	// receives it and stops. A client that does not answer gets wsCloseGrace, then the
	// socket under the WebSocket is closed, which ends the handshake.
	done := make(chan error, 1)
	go func() { done <- c.ws.conn.Close(code, "") }()
	var err error
	select {
	case err = <-done:
	case <-time.After(wsCloseGrace):
		if c.ws.raw != nil {
			_ = c.ws.raw.Close()
		}
		err = <-done
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		c.host.log.Debug("stream WebSocket close handshake", "node", c.node.cfg.name, "routing_id", uint32(c.rid), "err", err)
	}
	<-c.readerDone
}

// wsCloseGrace is how long a server-initiated WebSocket close waits for the client's
// close frame; browsers answer within milliseconds.
const wsCloseGrace = time.Second
