// Package compress implements the LZ4 payload container of the STREAM wire
// (zlink-digest §2.13): the LZ4 "pickle" format, one flags byte, a little-endian
// length-difference field and a raw LZ4 block, or the stored-uncompressed form.
//
// AppendLZ4 puts a payload into the container; DecodeLZ4 takes it out, with a cap on
// the decompressed size.
//
// Container layout (version 0):
//
//	flags    u8   bits 0-2 version (must be 0), bits 3-5 reserved (must be 0),
//	              bits 6-7 width code of the difference field: 0→0, 1→1, 2→2, 3→4 bytes
//	diff     0/1/2/4 bytes, little-endian: uncompressed_len - len(block)
//	block    raw LZ4 block (no frame), or the payload itself when diff is 0
//
// The algorithm is agreed once per connector and never written in the frame header
// (flag 0x04 only says "compressed"), so this container is the only framing a
// compressed payload carries: every length in it is checked before memory is committed.
package compress
