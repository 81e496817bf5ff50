package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"
)

// stream concatenates the worked-example frames.
func stream() ([]byte, []example) {
	exs := examples()
	var all []byte
	for _, ex := range exs {
		all = append(all, ex.frame...)
	}
	return all, exs
}

// readAll reads every frame of r, checking each against exs, then expects io.EOF.
func readAll(t *testing.T, r *Reader, exs []example, wait bool) {
	t.Helper()
	for _, ex := range exs {
		hdr := headerOf(t, ex.frame)
		hl, pl, err := r.PeekPrefix()
		if err != nil || hl != len(hdr) || pl != len(ex.payload) {
			t.Fatalf("%s: PeekPrefix = %d, %d, %v", ex.name, hl, pl, err)
		}
		if wait {
			ok, err := r.WaitFrame()
			if err != nil || !ok {
				t.Fatalf("%s: WaitFrame = %v, %v", ex.name, ok, err)
			}
			if r.Buffered() < len(ex.frame) {
				t.Fatalf("%s: WaitFrame returned with %d of %d bytes buffered", ex.name, r.Buffered(), len(ex.frame))
			}
		}
		gotHL, body, err := r.Next()
		if err != nil {
			t.Fatalf("%s: Next: %v", ex.name, err)
		}
		if gotHL != len(hdr) || !bytes.Equal(body, ex.frame[PrefixSize:]) {
			t.Fatalf("%s: Next = %d, % x", ex.name, gotHL, body)
		}
		if cap(body) != len(body) {
			t.Errorf("%s: body has spare capacity %d", ex.name, cap(body)-len(body))
		}
		h, err := DecodeHeader(body[:gotHL])
		if err != nil || !reflect.DeepEqual(h, ex.header) {
			t.Fatalf("%s: DecodeHeader = %+v, %v", ex.name, h, err)
		}
	}
	for i := 0; i < 2; i++ { // io.EOF is stable at the end
		if _, _, err := r.PeekPrefix(); err != io.EOF {
			t.Fatalf("PeekPrefix at end = %v, want io.EOF", err)
		}
		if _, _, err := r.Next(); err != io.EOF {
			t.Fatalf("Next at end = %v, want io.EOF", err)
		}
		if ok, err := r.WaitFrame(); ok || err != io.EOF {
			t.Fatalf("WaitFrame at end = %v, %v, want io.EOF", ok, err)
		}
	}
}

func TestReaderSeveralFramesInOneRead(t *testing.T) {
	all, exs := stream()
	for _, wait := range []bool{false, true} {
		readAll(t, NewReader(bytes.NewReader(all), 4096), exs, wait)
	}
}

func TestReaderByteByByte(t *testing.T) {
	all, exs := stream()
	for _, wait := range []bool{false, true} {
		readAll(t, NewReader(iotest.OneByteReader(bytes.NewReader(all)), 4096), exs, wait)
	}
	// Half-reads too: fragments that straddle every field boundary.
	readAll(t, NewReader(iotest.HalfReader(bytes.NewReader(all)), 4096), exs, true)
}

// A frame larger than the buffer cannot be awaited; Next reads it from the stream.
func TestReaderFrameLargerThanBuffer(t *testing.T) {
	h := send("big")
	payload := bytes.Repeat([]byte("0123456789"), 100)
	frame, err := AppendFrame(nil, &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	ping := examples()[3]
	in := append(append([]byte{}, frame...), ping.frame...)

	r := NewReader(iotest.OneByteReader(bytes.NewReader(in)), 1) // raised to MinReaderBuffer
	if r.BufferSize() != MinReaderBuffer {
		t.Fatalf("BufferSize = %d, want %d", r.BufferSize(), MinReaderBuffer)
	}
	ok, err := r.WaitFrame()
	if ok || err != nil {
		t.Fatalf("WaitFrame on a frame over the buffer = %v, %v; want false, nil", ok, err)
	}
	if r.Buffered() > MinReaderBuffer {
		t.Fatalf("WaitFrame buffered %d bytes", r.Buffered())
	}
	hl, body, err := r.Next()
	if err != nil || hl != len(frame)-PrefixSize-len(payload) || !bytes.Equal(body, frame[PrefixSize:]) {
		t.Fatalf("Next = %d, %d bytes, %v", hl, len(body), err)
	}
	readAll(t, r, []example{ping}, true)
}

// End of stream inside a frame is io.ErrUnexpectedEOF, wherever it is cut.
func TestReaderEOFMidFrame(t *testing.T) {
	frame := examples()[0].frame
	for cut := 1; cut < len(frame); cut++ {
		for _, mode := range []string{"peek", "wait", "next"} {
			r := NewReader(iotest.OneByteReader(bytes.NewReader(frame[:cut])), 4096)
			var err error
			switch mode {
			case "peek":
				_, _, err = r.PeekPrefix()
				if cut >= PrefixSize {
					if err != nil {
						t.Fatalf("cut %d: PeekPrefix = %v", cut, err)
					}
					continue
				}
			case "wait":
				_, err = r.WaitFrame()
			case "next":
				_, _, err = r.Next()
			}
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("cut %d, %s: err = %v, want io.ErrUnexpectedEOF", cut, mode, err)
			}
		}
	}
	// Also when the body is read straight from the stream (frame over the buffer).
	h := send("big")
	big, _ := AppendFrame(nil, &h, make([]byte, 500))
	r := NewReader(bytes.NewReader(big[:300]), MinReaderBuffer)
	if _, _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("Next on a cut large frame = %v", err)
	}
	if _, _, err := r.PeekPrefix(); err != io.ErrUnexpectedEOF {
		t.Fatalf("after a failed Next, PeekPrefix = %v; want the sticky error", err)
	}
}

// An empty prefix is a valid frame at this layer; the header decoder rejects it.
func TestReaderZeroLengthFrame(t *testing.T) {
	r := NewReader(bytes.NewReader(make([]byte, PrefixSize)), 64)
	hl, body, err := r.Next()
	if err != nil || hl != 0 || len(body) != 0 {
		t.Fatalf("Next = %d, %q, %v", hl, body, err)
	}
	if _, err := DecodeHeader(body[:hl]); !errors.Is(err, ErrEmptyHeader) {
		t.Fatalf("DecodeHeader = %v, want ErrEmptyHeader", err)
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next at end = %v", err)
	}
}

func TestReaderDiscard(t *testing.T) {
	all, exs := stream()
	r := NewReader(iotest.OneByteReader(bytes.NewReader(all)), 64)
	hl, pl, err := r.PeekPrefix()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Discard(PrefixSize + hl + pl); err != nil {
		t.Fatal(err)
	}
	if err := r.Discard(0); err != nil {
		t.Fatal(err)
	}
	readAll(t, r, exs[1:], false)

	r = NewReader(bytes.NewReader(all[:10]), 64)
	if err := r.Discard(11); err != io.ErrUnexpectedEOF {
		t.Fatalf("Discard past the end = %v, want io.ErrUnexpectedEOF", err)
	}
	if err := r.Discard(1); err != io.ErrUnexpectedEOF {
		t.Fatalf("Discard after failure = %v, want the sticky error", err)
	}
}

// A transient error while waiting (e.g. a read deadline) consumes nothing, so the caller
// can simply wait again.
func TestReaderTransientErrorWhileWaiting(t *testing.T) {
	all, exs := stream()
	// OneByteReader(TimeoutReader): the second one-byte read fails with ErrTimeout.
	r := NewReader(iotest.OneByteReader(iotest.TimeoutReader(bytes.NewReader(all))), 4096)
	if _, _, err := r.PeekPrefix(); err != iotest.ErrTimeout {
		t.Fatalf("first PeekPrefix = %v, want ErrTimeout", err)
	}
	readAll(t, r, exs, true)
}

func TestReaderPassesErrors(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(iotest.ErrReader(boom), 64)
	if _, _, err := r.PeekPrefix(); err != boom {
		t.Fatalf("PeekPrefix = %v", err)
	}
	// An error after part of the prefix is still the reader's error, not an EOF.
	ex := examples()[1]
	r = NewReader(io.MultiReader(bytes.NewReader(ex.frame[:3]), iotest.ErrReader(boom)), 64)
	if ok, err := r.WaitFrame(); ok || err != boom {
		t.Fatalf("WaitFrame = %v, %v", ok, err)
	}
}

// loopReader serves the same bytes forever, for allocation measurements.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func TestReaderAllocations(t *testing.T) {
	ex := examples()[0]
	r := NewReader(&loopReader{data: ex.frame}, 4096)
	n := testing.AllocsPerRun(200, func() {
		if _, _, err := r.PeekPrefix(); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.WaitFrame(); !ok || err != nil {
			t.Fatal(ok, err)
		}
	})
	if n != 0 {
		t.Errorf("waiting allocates %v times", n)
	}
	n = testing.AllocsPerRun(200, func() {
		if _, _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if n != 1 {
		t.Errorf("Next allocates %v times, want exactly 1 (the body)", n)
	}
}
