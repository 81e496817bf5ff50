package wire

import (
	"bufio"
	"errors"
	"io"
)

// MinReaderBuffer is the smallest buffer NewReader uses; smaller requests are raised.
const MinReaderBuffer = 64

// errFrameTooBig is only possible where int is 32 bits: header_len + payload_len does
// not fit an int there.
var errFrameTooBig = errors.New("stream wire: frame length overflows int")

// Reader reads whole frames from a byte stream (TCP, TLS, or a WebSocket connection used
// as a byte stream), accumulating prefix → header → payload across arbitrary
// fragmentation; a byte-by-byte trickle works. It does only framing: callers decode the
// header with DecodeHeader and apply their own size cap.
//
// The intended read loop, which never reads a frame body ahead of a permit:
//
//	hl, pl, err := r.PeekPrefix()     // block for data without holding anything
//	if hl+pl > maxMessageSize { ... } // cap before the body is read
//	ok, err := r.WaitFrame()          // block until the frame is buffered, if it fits
//	acquire permit
//	headerLen, body, err := r.Next()  // no blocking when ok was true; one allocation
//	h, err := DecodeHeader(body[:headerLen])
//
// Waiting (PeekPrefix, WaitFrame) never allocates. End of stream is io.EOF exactly at a
// frame boundary and io.ErrUnexpectedEOF anywhere inside a frame. Other errors of the
// underlying reader are returned as they are; a failure inside Next's body read (after
// the prefix was consumed) leaves the stream mid-frame, so the Reader then keeps returning
// that error. A Reader is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	err error // sticky: set once the stream position is lost
}

// NewReader returns a Reader on r with a buffer of bufSize bytes (at least
// MinReaderBuffer). Frames whose PrefixSize+header_len+payload_len fits the buffer can
// be awaited with WaitFrame; larger ones are read straight into the body by Next.
func NewReader(r io.Reader, bufSize int) *Reader {
	if bufSize < MinReaderBuffer {
		bufSize = MinReaderBuffer
	}
	return &Reader{br: bufio.NewReaderSize(r, bufSize)}
}

// BufferSize returns the size of the buffer: the largest whole frame (prefix included)
// that WaitFrame can hold.
func (r *Reader) BufferSize() int { return r.br.Size() }

// Buffered returns the number of bytes read from the stream but not yet consumed.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// PeekPrefix waits until the next frame's prefix is buffered and returns its lengths
// without consuming anything. io.EOF means the stream ended cleanly between frames.
func (r *Reader) PeekPrefix() (headerLen, payloadLen int, err error) {
	if r.err != nil {
		return 0, 0, r.err
	}
	p, err := r.br.Peek(PrefixSize)
	if err != nil {
		return 0, 0, r.midFrame(err)
	}
	headerLen, payloadLen = ParsePrefix(p)
	return headerLen, payloadLen, nil
}

// WaitFrame waits until the whole next frame is buffered and returns true, without
// consuming anything, so a following Next cannot block. It returns false (and reads
// nothing beyond the prefix) when the frame is larger than BufferSize; Next then reads
// the body from the stream.
func (r *Reader) WaitFrame() (ok bool, err error) {
	hl, pl, err := r.PeekPrefix()
	if err != nil {
		return false, err
	}
	total := PrefixSize + hl + pl
	if total < 0 || total > r.br.Size() {
		return false, nil
	}
	if _, err := r.br.Peek(total); err != nil {
		return false, r.midFrame(err)
	}
	return true, nil
}

// Next consumes the next frame. It returns header_len and one freshly allocated slice
// body = header || payload, owned by the caller (the header is body[:headerLen], the
// payload body[headerLen:]). That slice is the only allocation. Next trusts the prefix:
// check the lengths with PeekPrefix first when the peer is not trusted, since Next
// allocates header_len + payload_len bytes (up to 4 GiB) before reading.
func (r *Reader) Next() (headerLen int, body []byte, err error) {
	hl, pl, err := r.PeekPrefix()
	if err != nil {
		return 0, nil, err
	}
	n := hl + pl
	if n < 0 {
		r.err = errFrameTooBig
		return 0, nil, r.err
	}
	body = make([]byte, n)
	// The prefix is buffered (PeekPrefix saw it), so this Discard cannot fail.
	_, _ = r.br.Discard(PrefixSize)
	if _, err := io.ReadFull(r.br, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the prefix was there, so this is mid-frame
		}
		r.err = err
		return 0, nil, err
	}
	return hl, body, nil
}

// Discard skips n bytes of the stream, e.g. PrefixSize+header_len+payload_len to drop a
// frame whose prefix PeekPrefix showed. Running out of stream is io.ErrUnexpectedEOF.
// Skipping part of a frame is the caller's business; the Reader only counts bytes.
func (r *Reader) Discard(n int) error {
	if r.err != nil {
		return r.err
	}
	if n <= 0 {
		return nil
	}
	if _, err := r.br.Discard(n); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		r.err = err
		return err
	}
	return nil
}

// midFrame maps a Peek error: end of stream with bytes of a frame already buffered is
// an unexpected EOF; end of stream with nothing buffered is a clean io.EOF.
func (r *Reader) midFrame(err error) error {
	if err == io.EOF && r.br.Buffered() > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}
