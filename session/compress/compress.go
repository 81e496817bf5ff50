package compress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/pierrec/lz4/v4"
)

// ErrDecompress is wrapped by every container or block decoding failure
// (the connector's DecompressionFailed).
var ErrDecompress = errors.New("lz4 container: decompression failed")

// ErrTooLarge is returned when the decompressed size would exceed the caller's cap.
var ErrTooLarge = errors.New("lz4 container: decompressed payload over the limit")

const (
	versionMask  = 0x07 // bits 0-2: pickle version, only 0 exists
	reservedMask = 0x38 // bits 3-5: no meaning in version 0; rejected so garbage is not guessed at
	widthShift   = 6    // bits 6-7: width code of the difference field

	// maxHeaderLen is the flags byte plus the widest difference field.
	maxHeaderLen = 1 + 4

	// maxBlockRatio bounds what a raw LZ4 block can expand to. A match costs at least a
	// token and a 2-byte offset and each extra length byte adds at most 255 output bytes,
	// literals are 1:1, so n block bytes never decode to more than 255*n bytes. A
	// container declaring more is corrupt; checking it before allocating keeps an
	// uncapped decode (maxSize <= 0) from being asked for gigabytes by a few bytes.
	maxBlockRatio = 255
)

// fieldWidth maps the width code in bits 6-7 to the difference field's byte length.
var fieldWidth = [4]int{0, 1, 2, 4}

// compressors recycles block compressors: each holds a hash table (tens of KiB) that
// would otherwise be allocated per payload. lz4.Compressor resets its own table, so a
// pooled one gives the same output as a fresh one.
var compressors = sync.Pool{New: func() any { return new(lz4.Compressor) }}

// AppendLZ4 appends the container encoding of src to dst. It emits a real LZ4 block when
// that makes the container smaller and the stored form (0x00 followed by src) otherwise.
// An empty src appends nothing. dst and src must not overlap.
func AppendLZ4(dst, src []byte) []byte {
	n := len(src)
	if n == 0 {
		return dst
	}
	start := len(dst)
	bound := lz4.CompressBlockBound(n)
	// Compress straight into dst behind room for the widest header; with a buffer of
	// CompressBlockBound bytes the compressor always succeeds, so its result is the
	// library's best effort rather than an early "does not fit".
	dst = slices.Grow(dst, maxHeaderLen+bound)
	block := dst[start+maxHeaderLen : start+maxHeaderLen+bound]
	c := compressors.Get().(*lz4.Compressor)
	clen, err := c.CompressBlock(src, block)
	compressors.Put(c)

	if err == nil && clen > 0 {
		diff := n - clen
		w := minWidth(diff)
		// Only worth it when the whole compressed container beats the stored one
		// (1+w+clen < 1+n); this also guarantees diff > 0, which the decoder relies on
		// to tell a block from a stored payload.
		// diff is capped at MaxInt32 because the reference pickler reads the 4-byte
		// field as a signed int; beyond that the stored form is the only safe encoding.
		if diff > 0 && diff <= math.MaxInt32 && clen+w < n {
			hdr := start + 1 + w
			dst = dst[:hdr+clen]
			copy(dst[hdr:], block[:clen]) // memmove: shifts the block left over the unused header bytes
			dst[start] = widthCode(w) << widthShift
			putLE(dst[start+1:hdr], uint32(diff))
			return dst
		}
	}
	dst = append(dst[:start], 0) // stored form: flags 0, no difference field
	return append(dst, src...)
}

// DecodeLZ4 returns the decompressed payload of a container. maxSize caps the result
// (<= 0 means no cap; the size is then still bounded by what an LZ4 block of the given
// length can produce). An empty src decodes to an empty payload. The result never
// aliases src. Failures wrap ErrDecompress or ErrTooLarge.
func DecodeLZ4(src []byte, maxSize int) ([]byte, error) {
	if len(src) == 0 {
		return nil, nil
	}
	flags := src[0]
	if v := flags & versionMask; v != 0 {
		return nil, fmt.Errorf("%w: unsupported container version %d (flags 0x%02x)", ErrDecompress, v, flags)
	}
	if r := flags & reservedMask; r != 0 {
		return nil, fmt.Errorf("%w: reserved flag bits 0x%02x set (flags 0x%02x)", ErrDecompress, r, flags)
	}
	w := fieldWidth[flags>>widthShift]
	body := src[1:]
	if len(body) < w {
		return nil, fmt.Errorf("%w: truncated header: %d-byte length difference field, %d bytes present",
			ErrDecompress, w, len(body))
	}
	diff := getLE(body[:w])
	block := body[w:]

	if diff == 0 {
		// No field (the stored form) or an explicit zero difference: the bytes are the
		// payload itself. The zero case is never written by an encoder (stored wins
		// ties); reading it as stored follows the reference pickler's decoder.
		if maxSize > 0 && len(block) > maxSize {
			return nil, fmt.Errorf("%w: stored payload of %d bytes, limit %d", ErrTooLarge, len(block), maxSize)
		}
		return slices.Clone(block), nil
	}
	if diff > math.MaxInt32 {
		// The reference pickler reads the 4-byte field as a signed 32-bit int; a value
		// with the top bit set is a negative length there, and absurd here.
		return nil, fmt.Errorf("%w: length difference %d is negative as a signed 32-bit value", ErrDecompress, diff)
	}
	declared := uint64(len(block)) + diff // cannot overflow: both operands are < 2^32 or < MaxInt
	if maxSize > 0 && declared > uint64(maxSize) {
		return nil, fmt.Errorf("%w: declares %d decompressed bytes, limit %d", ErrTooLarge, declared, maxSize)
	}
	if len(block) == 0 {
		return nil, fmt.Errorf("%w: length difference %d but no LZ4 block", ErrDecompress, diff)
	}
	if declared > maxBlockRatio*uint64(len(block)) {
		return nil, fmt.Errorf("%w: declares %d bytes from a %d-byte block, more than LZ4 can expand to",
			ErrDecompress, declared, len(block))
	}
	if declared > math.MaxInt {
		// Only reachable where int is 32 bits.
		return nil, fmt.Errorf("%w: declares %d bytes, more than this platform can address", ErrTooLarge, declared)
	}

	out := make([]byte, declared)
	got, err := lz4.UncompressBlock(block, out)
	if err != nil {
		// The library reports "corrupt" and "output buffer too small" alike; with an
		// exactly sized buffer the latter means the block is longer than declared.
		return nil, fmt.Errorf("%w: LZ4 block corrupt or longer than the declared %d bytes: %w", ErrDecompress, declared, err)
	}
	if uint64(got) != declared {
		return nil, fmt.Errorf("%w: LZ4 block decodes to %d bytes, header declares %d", ErrDecompress, got, declared)
	}
	return out, nil
}

// minWidth is the smallest difference field that holds d (d > 0).
func minWidth(d int) int {
	switch {
	case d <= math.MaxUint8:
		return 1
	case d <= math.MaxUint16:
		return 2
	default:
		return 4
	}
}

// widthCode is the inverse of fieldWidth for the widths minWidth returns.
func widthCode(w int) byte {
	if w == 4 {
		return 3
	}
	return byte(w)
}

func putLE(b []byte, v uint32) {
	switch len(b) {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, v)
	}
}

func getLE(b []byte) uint64 {
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return 0
}
