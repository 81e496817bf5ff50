package actor

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/meshnode/meshnode/store"
)

// The envelope of a state in the store: what a save writes around the bytes a move
// carries (Kind.State encoded with msgpack, or the Actor's Snapshot), so that a record
// that was damaged, truncated or written by something else is refused as corrupt
// instead of being decoded into a wrong state.
//
//	offset 0  'M' 'S'       magic
//	       2  1             envelope version
//	       3  encoding      1: msgpack of Kind.State, 2: Snapshotter bytes
//	       4  CRC-32C       of the payload (Castagnoli), big-endian
//	       8  payload
const (
	envelopeHeader   = 8
	envelopeVersion  = 1
	encodingMsgpack  = 1
	encodingSnapshot = 2
)

// putEnvelopeHeader fills the first envelopeHeader bytes of b (whose payload follows
// them).
func putEnvelopeHeader(b []byte, encoding byte) {
	b[0], b[1], b[2], b[3] = 'M', 'S', envelopeVersion, encoding
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(b[envelopeHeader:], castagnoli))
}

// encodeEnvelope returns payload in an envelope (a new slice).
func encodeEnvelope(encoding byte, payload []byte) []byte {
	b := make([]byte, envelopeHeader+len(payload))
	copy(b[envelopeHeader:], payload)
	putEnvelopeHeader(b, encoding)
	return b
}

// decodeEnvelope checks an envelope and returns its encoding and payload (pointing into
// b). Every failure matches store.ErrCorrupt.
func decodeEnvelope(b []byte) (encoding byte, payload []byte, err error) {
	switch {
	case len(b) < envelopeHeader:
		return 0, nil, fmt.Errorf("%w: %d bytes, shorter than the envelope's header", store.ErrCorrupt, len(b))
	case b[0] != 'M' || b[1] != 'S':
		return 0, nil, fmt.Errorf("%w: no envelope (starts % x)", store.ErrCorrupt, b[:2])
	case b[2] != envelopeVersion:
		return 0, nil, fmt.Errorf("%w: envelope version %d (this build reads %d)", store.ErrCorrupt, b[2], envelopeVersion)
	case b[3] != encodingMsgpack && b[3] != encodingSnapshot:
		return 0, nil, fmt.Errorf("%w: unknown encoding %d", store.ErrCorrupt, b[3])
	}
	payload = b[envelopeHeader:]
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(b[4:8]) {
		return 0, nil, fmt.Errorf("%w: CRC-32C mismatch over %d bytes", store.ErrCorrupt, len(payload))
	}
	return b[3], payload, nil
}
