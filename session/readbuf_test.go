package session

import (
	"bytes"
	"io"
	"testing"
)

// chunkReader returns at most chunk bytes per Read.
type chunkReader struct {
	data  []byte
	chunk int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.chunk, len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// The buffer holds what arrived, at most twice over, whatever a frame announces; it
// keeps its steady size between bursts and drops a large-frame buffer once consumed.
func TestFrameBuffer_GrowsWithArrivedBytes(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10_000) // 100,000 bytes
	src := &chunkReader{data: data, chunk: 700}
	b := frameBuffer{src: src, steady: 16 << 10}

	if err := b.fill(1); err != nil {
		t.Fatal(err)
	}
	if len(b.buf) != minReadBuffer {
		t.Fatalf("first buffer %d bytes, want %d", len(b.buf), minReadBuffer)
	}
	for _, want := range []int{1000, 5000, 40_000, 100_000} {
		if err := b.fill(want); err != nil {
			t.Fatal(err)
		}
		if len(b.buf) > 2*b.buffered() && len(b.buf) > minReadBuffer {
			t.Fatalf("buffer %d bytes for %d arrived", len(b.buf), b.buffered())
		}
	}
	if !bytes.Equal(b.peek(100_000), data) {
		t.Fatal("bytes changed while the buffer grew")
	}
	b.consume(100_000)
	if b.buf != nil {
		t.Fatalf("a %d-byte large-frame buffer was kept", len(b.buf))
	}
	if err := b.fill(1); err != io.EOF {
		t.Fatalf("fill at end = %v, want EOF", err)
	}
}

// A reader whose reads keep filling the buffer (a pipelining client) gets a buffer of
// the steady size, not more, however many small frames it sends.
func TestFrameBuffer_BusyReaderGrowsToSteady(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 1<<20)
	b := frameBuffer{src: &chunkReader{data: data, chunk: 1 << 20}, steady: 16 << 10}
	for range 1000 {
		if err := b.fill(64); err != nil {
			t.Fatal(err)
		}
		b.consume(64)
	}
	if len(b.buf) != b.steady {
		t.Fatalf("busy buffer %d bytes, want the steady %d", len(b.buf), b.steady)
	}
}
