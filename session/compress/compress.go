// Package compress implements the LZ4 payload container of the STREAM wire
// (zlink-digest §2.13): the LZ4 "pickle" format, one flags byte, a little-endian
// length-difference field and a raw LZ4 block, or the stored-uncompressed form.
package compress

import "errors"

// ErrDecompress is wrapped by every container or block decoding failure
// (the connector's DecompressionFailed).
var ErrDecompress = errors.New("lz4 container: decompression failed")

// ErrTooLarge is returned when the decompressed size would exceed the caller's cap.
var ErrTooLarge = errors.New("lz4 container: decompressed payload over the limit")

// AppendLZ4 appends the container encoding of src to dst. It emits a real LZ4 block when
// that is smaller and the stored form otherwise. An empty src appends nothing.
func AppendLZ4(dst, src []byte) []byte { return dst }

// DecodeLZ4 returns the decompressed payload of a container. maxSize caps the result
// (<= 0 means no cap). An empty src decodes to an empty payload.
func DecodeLZ4(src []byte, maxSize int) ([]byte, error) { return nil, ErrDecompress }
