//go:build unix

package session

import (
	"errors"
	"net"
	"syscall"
)

// nbWrite is a connection's one non-blocking write system call (writeNow), made once
// per connection so that a write allocates nothing; only the goroutine that set
// wactive uses it.
type nbWrite struct {
	rc  syscall.RawConn
	fn  func(fd uintptr)
	buf []byte
	n   int
	err error
}

// write is run through RawConn.Control, not RawConn.Write: it never waits for the
// socket (what does not fit is the drain's), and Write would first fail on the write
// deadline a drain left behind once SendTimeout has passed since.
func (w *nbWrite) write(fd uintptr) {
	w.n, w.err = syscall.Write(int(fd), w.buf)
}

// writeNow writes the queue on the producer's goroutine with one non-blocking write
// system call, on a plain TCP connection: a frame produced outside the session's turn
// by a producer that must not wait (a reply that came from another node, on the
// goroutine that received it) reaches the socket without a writer goroutine being
// started for it. It reports true when it wrote the whole queue and gave up the
// writer's role; false when frames remain (the socket's buffer was full, or more were
// queued meanwhile), for a drain goroutine to write. The caller set wactive.
func (c *conn) writeNow() bool {
	if c.transport != "tcp" || c.wbroken.Load() {
		return false
	}
	w := c.nbw
	if w == nil {
		w = &nbWrite{}
		nc := c.nc
		if cc, ok := nc.(*countedConn); ok {
			nc = cc.Conn
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			if rc, err := tc.SyscallConn(); err == nil {
				w.rc = rc
				w.fn = w.write
			}
		}
		c.nbw = w // with no rc when the socket is not a TCP one: asked once
	}
	if w.rc == nil {
		return false
	}
	c.wmu.Lock()
	buf := c.wbuf
	if len(buf) == 0 || c.wclosed {
		c.wmu.Unlock()
		return false // the drain's end handles these
	}
	c.wbuf = c.wspare[:0]
	c.wmu.Unlock()

	w.buf = buf
	err := w.rc.Control(w.fn)
	n := max(w.n, 0)
	if err == nil && w.err != nil && !errors.Is(w.err, syscall.EAGAIN) && !errors.Is(w.err, syscall.EINTR) {
		err = w.err
	}
	w.buf, w.err = nil, nil
	if err != nil {
		// As drain does for a failed write: the connection is broken.
		n = len(buf)
		c.wbroken.Store(true)
		if !c.isClosing() {
			c.transportError(err)
		}
	}
	if n > 0 {
		c.wqueued.Add(-int64(n))
		c.drained.Notify()
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if n < len(buf) {
		// The socket took part: the rest goes first, before what was queued meanwhile.
		rest := buf[n:]
		c.wbuf = append(append(make([]byte, 0, len(rest)+len(c.wbuf)), rest...), c.wbuf...)
		c.wspare = buf[:0]
		return false
	}
	c.wspare = buf[:0]
	if len(c.wbuf) > 0 && !c.wclosed {
		return false
	}
	c.wactive = false
	c.wcond.Broadcast()
	return true
}
