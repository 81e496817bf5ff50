package session

import "io"

// minReadBuffer is the receive buffer of a connection that has seen no burst: a session
// that sends small frames one at a time never holds more.
const minReadBuffer = 512

// frameBuffer is a connection's receive buffer (the part of the receive pipe that lives
// in user space). It grows only with bytes that actually arrived (it doubles when a read
// filled it), never with a length a prefix announces, so a client that announces a large
// frame and trickles it costs what it sent. It keeps at most steady bytes between
// bursts; a buffer grown past that for one large frame is dropped once the frame is
// consumed. It is owned by the goroutine currently reading the connection.
type frameBuffer struct {
	src    io.Reader
	buf    []byte
	r, w   int
	steady int  // capacity kept between bursts (SocketOptions.ReadBufferSize)
	busy   bool // the last read filled every free byte: more is waiting in the kernel
}

func (b *frameBuffer) buffered() int { return b.w - b.r }

// peek returns the next n buffered bytes without consuming them; n <= buffered().
func (b *frameBuffer) peek(n int) []byte { return b.buf[b.r : b.r+n] }

// consume drops the next n buffered bytes.
func (b *frameBuffer) consume(n int) {
	b.r += n
	if b.r < b.w {
		return
	}
	b.r, b.w = 0, 0
	if len(b.buf) > b.steady {
		b.buf = nil // the large-frame buffer goes; the next read starts small again
	}
}

// fill reads until at least n bytes are buffered.
func (b *frameBuffer) fill(n int) error {
	for b.w-b.r < n {
		b.makeRoom()
		free := len(b.buf) - b.w
		m, err := b.src.Read(b.buf[b.w:])
		b.w += m
		b.busy = m == free
		if err != nil {
			if b.w-b.r >= n {
				return nil
			}
			return err
		}
	}
	return nil
}

// makeRoom ensures free space at the end of buf. A connection whose reads keep filling
// the buffer (a pipelining client) gets a larger one, up to steady, so it needs fewer
// reads; unread bytes are compacted to the front; a frame larger than the buffer makes
// it double, as its bytes arrive.
func (b *frameBuffer) makeRoom() {
	switch {
	case b.buf == nil:
		b.buf = make([]byte, minReadBuffer)
	case b.busy && len(b.buf) < b.steady:
		b.resize(min(2*len(b.buf), b.steady))
	case b.w < len(b.buf):
	case b.r > 0:
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	default:
		b.resize(2 * len(b.buf))
	}
	b.busy = false
}

func (b *frameBuffer) resize(size int) {
	grown := make([]byte, size)
	b.w = copy(grown, b.buf[b.r:b.w])
	b.r = 0
	b.buf = grown
}
