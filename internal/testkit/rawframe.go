package testkit

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/wire"
)

// Frame is one frame read from the server.
type Frame struct {
	Header      wire.Header
	HeaderBytes []byte // the raw header, as it came off the wire
	Payload     []byte
}

// Encode returns prefix + header + payload for h, or panics: tests only encode valid
// headers with it (bad ones are built with RawFrame).
func Encode(h wire.Header, payload []byte) []byte {
	b, err := wire.AppendFrame(nil, &h, payload)
	if err != nil {
		panic(fmt.Sprintf("stream: encode %+v: %v", h, err))
	}
	return b
}

// RawFrame returns a frame whose header bytes are taken as they are, so a test can put
// any byte sequence on the wire with a consistent prefix.
func RawFrame(header, payload []byte) []byte {
	b := wire.AppendPrefix(nil, len(header), len(payload))
	b = append(b, header...)
	return append(b, payload...)
}

// HeaderBuilder builds a header byte by byte (big-endian, digest §2.3) without any
// validation.
type HeaderBuilder struct{ B []byte }

// NewHeader starts a header with marker, kind, codec and flags.
func NewHeader(marker, kind, codec, flags byte) *HeaderBuilder {
	return &HeaderBuilder{B: []byte{marker, kind, codec, flags}}
}

// Seq appends a u64 request_seq.
func (h *HeaderBuilder) Seq(seq uint64) *HeaderBuilder {
	h.B = binary.BigEndian.AppendUint64(h.B, seq)
	return h
}

// Name appends u8 length + name.
func (h *HeaderBuilder) Name(name string) *HeaderBuilder {
	h.B = append(h.B, byte(len(name)))
	h.B = append(h.B, name...)
	return h
}

// Metadata appends u16 length + count + entries exactly as given (duplicates allowed).
func (h *HeaderBuilder) Metadata(count byte, kv ...string) *HeaderBuilder {
	blk := []byte{count}
	for i := 0; i+1 < len(kv); i += 2 {
		blk = append(blk, byte(len(kv[i])))
		blk = append(blk, kv[i]...)
		blk = binary.BigEndian.AppendUint16(blk, uint16(len(kv[i+1])))
		blk = append(blk, kv[i+1]...)
	}
	h.B = binary.BigEndian.AppendUint16(h.B, uint16(len(blk)))
	h.B = append(h.B, blk...)
	return h
}

// Correlation appends u8 length + id.
func (h *HeaderBuilder) Correlation(id string) *HeaderBuilder {
	h.B = append(h.B, byte(len(id)))
	h.B = append(h.B, id...)
	return h
}

// Flow appends the 36 flow id bytes as given and the origin byte.
func (h *HeaderBuilder) Flow(id string, origin byte) *HeaderBuilder {
	h.B = append(h.B, id...)
	h.B = append(h.B, origin)
	return h
}

// Bytes returns the header.
func (h *HeaderBuilder) Bytes() []byte { return h.B }

// RawConn is a STREAM client that speaks the wire directly over one byte stream.
type RawConn struct {
	net.Conn
	br *bufio.Reader
}

// NewRawConn wraps an established byte stream (TCP, TLS, a WebSocket NetConn).
func NewRawConn(nc net.Conn) *RawConn {
	return &RawConn{Conn: nc, br: bufio.NewReaderSize(nc, 64<<10)}
}

// Dial connects over plain TCP with Nagle off, so small writes leave at once.
func Dial(addr string) (*RawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = nc.(*net.TCPConn).SetNoDelay(true)
	return NewRawConn(nc), nil
}

// WriteAll writes b with a deadline.
func (c *RawConn) WriteAll(b []byte, timeout time.Duration) error {
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.Write(b)
	return err
}

// ReadFrame reads one whole frame, waiting at most timeout. A header that does not
// decode is an error (the server must only send valid frames).
func (c *RawConn) ReadFrame(timeout time.Duration) (Frame, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	return ReadFrameFrom(c.br)
}

// ReadFrameFrom reads one frame from r.
func ReadFrameFrom(r io.Reader) (Frame, error) {
	var pre [wire.PrefixSize]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Frame{}, err
	}
	hl, pl := wire.ParsePrefix(pre[:])
	body := make([]byte, hl+pl)
	if _, err := io.ReadFull(r, body); err != nil {
		return Frame{}, err
	}
	h, err := wire.DecodeHeader(body[:hl])
	if err != nil {
		return Frame{}, fmt.Errorf("server frame does not decode: %w", err)
	}
	return Frame{Header: h, HeaderBytes: body[:hl:hl], Payload: body[hl:]}, nil
}

// MustReadFrame reads one frame from r and fails the test when it cannot.
func MustReadFrame(tb testing.TB, r io.Reader) Frame {
	tb.Helper()
	f, err := ReadFrameFrom(r)
	if err != nil {
		tb.Fatalf("read frame: %v", err)
	}
	return f
}

// SplitFrames parses the whole frames at the start of buf and returns them with the
// bytes of an incomplete trailing frame.
func SplitFrames(buf []byte) ([]Frame, []byte, error) {
	var out []Frame
	for len(buf) >= wire.PrefixSize {
		hl, pl := wire.ParsePrefix(buf)
		n := wire.PrefixSize + hl + pl
		if len(buf) < n {
			break
		}
		h, err := wire.DecodeHeader(buf[wire.PrefixSize : wire.PrefixSize+hl])
		if err != nil {
			return out, buf, err
		}
		body := append([]byte(nil), buf[wire.PrefixSize:n]...)
		out = append(out, Frame{Header: h, HeaderBytes: body[:hl:hl], Payload: body[hl:]})
		buf = buf[n:]
	}
	return out, buf, nil
}

// IsClosed reports whether err is how a reader sees the peer closing the connection:
// end of stream or a reset.
func IsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// IsTimeout reports whether err is a deadline expiry.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
