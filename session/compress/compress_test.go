package compress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/pierrec/lz4/v4"
)

// randomBytes is deterministic so a failure reproduces; random data is incompressible.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// textBytes is compressible but not trivially so (not a single repeated byte).
func textBytes(n int) []byte {
	const phrase = `{"room":"lobby","user":"alice","text":"hello, world","seq":`
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, "%s%d}\n", phrase, i%97)
	}
	return b[:n]
}

// rawBlock compresses src into a bare LZ4 block with the library, for hand-built containers.
func rawBlock(t testing.TB, src []byte) []byte {
	t.Helper()
	var c lz4.Compressor
	buf := make([]byte, lz4.CompressBlockBound(len(src)))
	n, err := c.CompressBlock(src, buf)
	if err != nil || n == 0 {
		t.Fatalf("CompressBlock(%d bytes) = %d, %v", len(src), n, err)
	}
	return buf[:n]
}

// container wraps block with a difference field of the given width (1, 2 or 4),
// which need not be the minimal one.
func container(width int, diff uint32, block []byte) []byte {
	code := map[int]byte{1: 1, 2: 2, 4: 3}[width]
	out := []byte{code << 6}
	var f [4]byte
	binary.LittleEndian.PutUint32(f[:], diff)
	out = append(out, f[:width]...)
	return append(out, block...)
}

func TestRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 100, 64 << 10} {
		for _, kind := range []struct {
			name string
			data []byte
		}{
			{"random", randomBytes(size, uint64(size)+1)},
			{"text", textBytes(size)},
			{"zeros", make([]byte, size)},
		} {
			t.Run(fmt.Sprintf("%s/%d", kind.name, size), func(t *testing.T) {
				enc := AppendLZ4(nil, kind.data)
				// The encoder must never lose against the stored form.
				if size > 0 && len(enc) > size+1 {
					t.Fatalf("container %d bytes for %d input bytes, stored form would be %d", len(enc), size, size+1)
				}
				if size == 0 && len(enc) != 0 {
					t.Fatalf("empty payload encoded as %x, want nothing", enc)
				}
				got, err := DecodeLZ4(enc, size)
				if err != nil {
					t.Fatalf("DecodeLZ4: %v", err)
				}
				if !bytes.Equal(got, kind.data) {
					t.Fatalf("round trip mismatch: got %d bytes, want %d", len(got), len(kind.data))
				}
			})
		}
	}
}

// The choice between block and stored form is part of the contract (smaller wins).
func TestEncoderPicksForm(t *testing.T) {
	t.Run("random is stored", func(t *testing.T) {
		src := randomBytes(1000, 7)
		enc := AppendLZ4(nil, src)
		if enc[0] != 0x00 || !bytes.Equal(enc[1:], src) {
			t.Fatalf("random data: want stored form 0x00+src, got flags 0x%02x len %d", enc[0], len(enc))
		}
	})
	t.Run("one byte is stored", func(t *testing.T) {
		if enc := AppendLZ4(nil, []byte{0x42}); !bytes.Equal(enc, []byte{0x00, 0x42}) {
			t.Fatalf("got %x, want 0042", enc)
		}
	})
	t.Run("compressible is a block", func(t *testing.T) {
		src := textBytes(4096)
		enc := AppendLZ4(nil, src)
		if enc[0] == 0 || len(enc) >= len(src) {
			t.Fatalf("compressible data: flags 0x%02x, %d bytes from %d", enc[0], len(enc), len(src))
		}
	})
}

// Each width must be the smallest that holds the difference, and the field must hold
// exactly uncompressed_len - block_len.
func TestEncoderMinimalWidth(t *testing.T) {
	for _, tc := range []struct {
		name      string
		src       []byte
		wantCode  byte
		wantWidth int
	}{
		{"1-byte", textBytes(200), 1, 1},           // diff < 256
		{"2-byte", make([]byte, 8<<10), 2, 2},      // 256 <= diff < 65536
		{"4-byte", make([]byte, 256<<10), 3, 4},    // diff >= 65536
		{"2-byte edge", make([]byte, 65536), 2, 2}, // ~65536-260: still fits 16 bits
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := AppendLZ4(nil, tc.src)
			if code := enc[0] >> 6; code != tc.wantCode || enc[0]&0x3f != 0 {
				t.Fatalf("flags 0x%02x, want width code %d and no other bits", enc[0], tc.wantCode)
			}
			diff := getLE(enc[1 : 1+tc.wantWidth])
			blockLen := len(enc) - 1 - tc.wantWidth
			if want := uint64(len(tc.src) - blockLen); diff != want {
				t.Fatalf("difference field %d, want %d (= %d - %d)", diff, want, len(tc.src), blockLen)
			}
			if minWidth(int(diff)) != tc.wantWidth {
				t.Fatalf("difference %d does not need width %d; test data is wrong", diff, tc.wantWidth)
			}
		})
	}
}

func TestAppendKeepsPrefix(t *testing.T) {
	prefix := []byte("header")
	for _, src := range [][]byte{textBytes(5000), randomBytes(300, 3), nil} {
		dst := append([]byte(nil), prefix...)
		out := AppendLZ4(dst, src)
		if !bytes.Equal(out[:len(prefix)], prefix) {
			t.Fatalf("prefix clobbered: %q", out[:len(prefix)])
		}
		got, err := DecodeLZ4(out[len(prefix):], 0)
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("decode after prefix: err %v, equal %v", err, bytes.Equal(got, src))
		}
	}
}

func TestStoredFormDecodes(t *testing.T) {
	got, err := DecodeLZ4([]byte{0x00, 'h', 'i'}, 0)
	if err != nil || string(got) != "hi" {
		t.Fatalf("stored form: %q, %v", got, err)
	}
	// A bare flags byte is a stored empty payload (what a connector that always stores
	// would send for an empty body).
	got, err = DecodeLZ4([]byte{0x00}, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("stored empty: %q, %v", got, err)
	}
	got, err = DecodeLZ4(nil, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty container: %q, %v", got, err)
	}
	// A present but zero difference field is never written (stored wins ties); the
	// reference pickler's decoder copies such a body verbatim, and so do we.
	got, err = DecodeLZ4([]byte{0x40, 0x00, 'r', 'a', 'w'}, 0)
	if err != nil || string(got) != "raw" {
		t.Fatalf("explicit zero difference: %q, %v", got, err)
	}
}

// The result is fresh memory: the caller's read buffer can be reused right after.
func TestDecodeDoesNotAlias(t *testing.T) {
	src := []byte{0x00, 1, 2, 3}
	got, err := DecodeLZ4(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got[0] = 99
	if src[1] != 1 {
		t.Fatal("decoded stored payload aliases the container")
	}
}

// A block written by hand from the LZ4 block spec, independent of the library's
// compressor: literals "abc", a 16-byte match at offset 3, then 5 final literals.
func TestHandWrittenBlock(t *testing.T) {
	block := []byte{0x3C, 'a', 'b', 'c', 0x03, 0x00, 0x50, 'b', 'c', 'a', 'b', 'c'}
	want := bytes.Repeat([]byte("abc"), 8)
	enc := append([]byte{0x40, byte(len(want) - len(block))}, block...)
	got, err := DecodeLZ4(enc, 0)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

// Every width code decodes, including wider-than-needed fields: some pickler versions
// size the field from the input length rather than from the difference.
func TestDifferenceFieldWidths(t *testing.T) {
	for _, tc := range []struct {
		name  string
		src   []byte
		width int
	}{
		{"1-byte", textBytes(200), 1},
		{"2-byte", make([]byte, 8<<10), 2},
		{"4-byte", make([]byte, 256<<10), 4},
		{"2-byte non-minimal", textBytes(200), 2},
		{"4-byte non-minimal", textBytes(200), 4},
		{"4-byte for 2-byte diff", make([]byte, 8<<10), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			block := rawBlock(t, tc.src)
			diff := len(tc.src) - len(block)
			if minWidth(diff) > tc.width {
				t.Fatalf("difference %d does not fit %d bytes; test data is wrong", diff, tc.width)
			}
			got, err := DecodeLZ4(container(tc.width, uint32(diff), block), len(tc.src))
			if err != nil || !bytes.Equal(got, tc.src) {
				t.Fatalf("err %v, equal %v", err, bytes.Equal(got, tc.src))
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	src := textBytes(1000)
	block := rawBlock(t, src)
	diff := uint32(len(src) - len(block))
	good := container(2, diff, block)
	if _, err := DecodeLZ4(good, 0); err != nil {
		t.Fatalf("control container does not decode: %v", err)
	}
	withFlags := func(f byte) []byte { c := bytes.Clone(good); c[0] = f; return c }

	for _, tc := range []struct {
		name    string
		in      []byte
		maxSize int
		want    error
	}{
		{"version 1", withFlags(0x81), 0, ErrDecompress},
		{"version 7", withFlags(0x87), 0, ErrDecompress},
		{"stored with version bits", []byte{0x01, 'x'}, 0, ErrDecompress},
		{"reserved bit 3", withFlags(0x88), 0, ErrDecompress},
		{"reserved bit 5", withFlags(0xA0), 0, ErrDecompress},
		{"truncated 1-byte field", []byte{0x40}, 0, ErrDecompress},
		{"truncated 2-byte field", []byte{0x80, 0x10}, 0, ErrDecompress},
		{"truncated 4-byte field", []byte{0xC0, 1, 2, 3}, 0, ErrDecompress},
		{"block shorter than declared", container(2, diff+1, block), 0, ErrDecompress},
		{"block longer than declared", container(2, diff-1, block), 0, ErrDecompress},
		{"block truncated", container(2, diff, block[:len(block)-1]), 0, ErrDecompress},
		{"garbage block", container(1, 50, randomBytes(40, 9)), 0, ErrDecompress},
		{"difference but no block", []byte{0x40, 0x05}, 0, ErrDecompress},
		{"negative 32-bit difference", container(4, 0x80000000, block), 0, ErrDecompress},
		{"expansion beyond LZ4's ratio", container(4, math.MaxInt32, []byte{0x00}), 0, ErrDecompress},
		{"compressed over maxSize", good, len(src) - 1, ErrTooLarge},
		{"stored over maxSize", []byte{0x00, 1, 2, 3, 4}, 3, ErrTooLarge},
		{"huge declared over maxSize", container(4, math.MaxInt32, block), 64 << 10, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeLZ4(tc.in, tc.maxSize)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			other := ErrTooLarge
			if tc.want == ErrTooLarge {
				other = ErrDecompress
			}
			if errors.Is(err, other) {
				t.Fatalf("err = %v also matches %v", err, other)
			}
			if got != nil {
				t.Fatalf("returned %d bytes alongside an error", len(got))
			}
			if err.Error() == tc.want.Error() {
				t.Fatalf("error %q does not say what was wrong", err)
			}
		})
	}
}

func TestMaxSizeBoundary(t *testing.T) {
	for _, src := range [][]byte{textBytes(1000), randomBytes(1000, 5)} {
		enc := AppendLZ4(nil, src)
		if _, err := DecodeLZ4(enc, len(src)); err != nil {
			t.Fatalf("at the limit: %v", err)
		}
		if _, err := DecodeLZ4(enc, len(src)-1); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("one over the limit: %v", err)
		}
	}
}

// A container declaring a huge size must be refused before the output is allocated.
// TotalAlloc is process-wide; nothing else runs here (no t.Parallel in this package).
func TestRejectsBeforeAllocating(t *testing.T) {
	small := rawBlock(t, textBytes(1000))
	cases := []struct {
		in      []byte
		maxSize int
	}{
		{container(4, math.MaxInt32, small), 64 << 10}, // over the cap
		{container(4, math.MaxInt32, small), 0},        // uncapped, but beyond 255x
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		for _, c := range cases {
			if _, err := DecodeLZ4(c.in, c.maxSize); err == nil {
				t.Fatal("huge container accepted")
			}
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("rejecting 40 oversized containers allocated %d bytes", grew)
	}
}

// Pooled compressors must not leak state between goroutines (run under -race).
func TestConcurrentUse(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				src := textBytes(500 + 97*g + i)
				if (g+i)%3 == 0 {
					src = randomBytes(300+i, uint64(g*100+i))
				}
				got, err := DecodeLZ4(AppendLZ4(nil, src), 0)
				if err != nil || !bytes.Equal(got, src) {
					errs <- fmt.Errorf("goroutine %d iteration %d: err %v, equal %v", g, i, err, bytes.Equal(got, src))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The 255x bound used to reject containers early must hold for what the library
// actually produces, or valid payloads would be refused.
func TestMaxRatioHoldsForLibrary(t *testing.T) {
	src := make([]byte, 4<<20)
	block := rawBlock(t, src)
	if ratio := len(src) / len(block); ratio > maxBlockRatio {
		t.Fatalf("library block expands %dx, above the %dx bound", ratio, maxBlockRatio)
	}
	got, err := DecodeLZ4(AppendLZ4(nil, src), 0)
	if err != nil || len(got) != len(src) {
		t.Fatalf("4 MiB zeros: %d bytes, %v", len(got), err)
	}
}

func FuzzDecodeLZ4(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{0x00, 'h', 'i'}, uint16(0))
	f.Add(AppendLZ4(nil, textBytes(300)), uint16(0))
	f.Add(AppendLZ4(nil, make([]byte, 5000)), uint16(1000))
	f.Fuzz(func(t *testing.T, in []byte, limit uint16) {
		maxSize := int(limit) // 0 = uncapped; the 255x bound keeps memory in check
		out, err := DecodeLZ4(in, maxSize)
		if err != nil {
			if !errors.Is(err, ErrDecompress) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		if maxSize > 0 && len(out) > maxSize {
			t.Fatalf("decoded %d bytes past maxSize %d", len(out), maxSize)
		}
		if len(out) > maxBlockRatio*len(in) {
			t.Fatalf("decoded %d bytes from %d, beyond the ratio bound", len(out), len(in))
		}
		enc := AppendLZ4(nil, out)
		if len(out) > 0 && len(enc) > len(out)+1 {
			t.Fatalf("re-encoding %d bytes gave %d, worse than stored", len(out), len(enc))
		}
		again, err := DecodeLZ4(enc, maxSize)
		if err != nil {
			t.Fatalf("re-encoded container does not decode: %v", err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("re-encode round trip changed the payload")
		}
	})
}

func BenchmarkAppendLZ4(b *testing.B) {
	for _, tc := range []struct {
		name string
		src  []byte
	}{
		{"text-100B", textBytes(100)},
		{"text-64KiB", textBytes(64 << 10)},
		{"random-64KiB", randomBytes(64<<10, 1)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.src)))
			dst := make([]byte, 0, lz4.CompressBlockBound(len(tc.src))+maxHeaderLen)
			for b.Loop() {
				dst = AppendLZ4(dst[:0], tc.src)
			}
			b.ReportMetric(float64(len(dst))/float64(len(tc.src)), "ratio")
		})
	}
}

func BenchmarkDecodeLZ4(b *testing.B) {
	for _, tc := range []struct {
		name string
		src  []byte
	}{
		{"text-100B", textBytes(100)},
		{"text-64KiB", textBytes(64 << 10)},
		{"stored-64KiB", randomBytes(64<<10, 1)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			enc := AppendLZ4(nil, tc.src)
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.src)))
			for b.Loop() {
				if _, err := DecodeLZ4(enc, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
