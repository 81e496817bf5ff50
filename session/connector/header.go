package connector

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/session/wire"
)

// Outbound ids without allocation. Every Request carries a correlation id and, unless
// diagnostics are off, every Send and Request a fresh flow id. Building them as strings
// for wire.Header costs an allocation each, and having the encoder check a flow id we
// generated ourselves costs more than generating it. So the header is encoded by
// wire.AppendHeader with a correlation placeholder of the right length (a constant
// slice: no allocation) and no flow, and finishHeader then writes the real correlation
// characters over the placeholder and appends the flow fields. Both fields end the
// header, in the order correlation id, flow_id, flow_origin (digest §2.3).

// flowPlaceholder is a valid UUIDv7 (version 7 at index 14, variant 8 at index 19).
const flowPlaceholder = "00000000-0000-7000-8000-000000000000"

// corrPlaceholder is cut to the length of the seq's hex form.
const corrPlaceholder = "0000000000000000"

// flagsOffset is where the header's flags byte sits in a frame.
const flagsOffset = wire.PrefixSize + 3

// corrLen is the length of seq in lowercase hex without leading zeros (seq > 0).
func corrLen(seq uint64) int { return (bits.Len64(seq) + 3) / 4 }

// finishHeader completes the header that b ends with, of the frame that starts (with
// its prefix) at b[start:]: when seq > 0 it writes the hex form of seq over the
// correlation placeholder, when flow it appends a fresh flow id of time now with origin
// application and sets the flow flag, and it fills in header_len.
func finishHeader(b []byte, start int, seq uint64, flow bool, now time.Time) []byte {
	if seq > 0 {
		putHex(b[len(b)-corrLen(seq):], seq)
	}
	if flow {
		b[start+flagsOffset] |= byte(wire.FlagFlow)
		b = append(b, flowPlaceholder...)
		putFlowID(b[len(b)-wire.FlowIDLen:], now)
		b = append(b, byte(wire.FlowApplication))
	}
	binary.BigEndian.PutUint16(b[start:], uint16(len(b)-start-wire.PrefixSize))
	return b
}

const hexDigits = "0123456789abcdef"

// putHex writes v as len(dst) lowercase hex digits, most significant first.
func putHex(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// clock is a connector's time source for flow ids and the expiry of a lead. time.Now
// reads two clocks, wall and monotonic; now reads the monotonic one only and adds what
// passed to a wall reading at most clockRebase old. A pipelining sender stamps every
// Send, and on the VMs we measure on a clock read is 25-30 ns of a Send's few hundred.
// The wall part follows a stepped system clock within clockRebase; flow ids only need
// their millisecond to be about right (RFC 9562 §6.1 lets it be monotonic).
type clock struct{ base atomic.Pointer[time.Time] }

// clockRebase is how long a wall reading is reused.
const clockRebase = time.Second

func (c *clock) now() time.Time {
	if b := c.base.Load(); b != nil {
		if d := time.Since(*b); d < clockRebase {
			return b.Add(d) // monotonic reading only: b has one
		}
	}
	t := time.Now()
	c.base.Store(&t)
	return t
}

// putFlowID writes a lowercase hyphenated UUIDv7 (RFC 9562) of time now into dst (36
// bytes): 48-bit Unix milliseconds, version 7, 12 random bits, variant 10, 62 random
// bits. Flow ids need uniqueness, not secrecy, so the fast runtime generator is enough.
// The hex digits come two at a time from a table, group by group: a pipelining sender
// writes one per Send.
func putFlowID(dst []byte, now time.Time) {
	ms := uint64(now.UnixMilli())
	hi := ms<<16 | 0x7000 | rand.Uint64()&0x0fff // ms in the top 48 bits
	lo := 0x8000_0000_0000_0000 | rand.Uint64()&0x3fff_ffff_ffff_ffff
	_ = dst[35]
	putHexPairs(dst[0:8], hi>>32, 4)
	dst[8] = '-'
	putHexPairs(dst[9:13], hi>>16, 2)
	dst[13] = '-'
	putHexPairs(dst[14:18], hi, 2)
	dst[18] = '-'
	putHexPairs(dst[19:23], lo>>48, 2)
	dst[23] = '-'
	putHexPairs(dst[24:36], lo, 6)
}

// hexPairs holds the two lowercase hex digits of every byte value.
var hexPairs = func() (t [512]byte) {
	for i := range 256 {
		t[2*i], t[2*i+1] = hexDigits[i>>4], hexDigits[i&0xf]
	}
	return t
}()

// putHexPairs writes the low n bytes of v, most significant first, as 2n hex digits.
func putHexPairs(dst []byte, v uint64, n int) {
	_ = dst[2*n-1]
	for i := n - 1; i >= 0; i-- {
		b := v & 0xff
		dst[2*i], dst[2*i+1] = hexPairs[2*b], hexPairs[2*b+1]
		v >>= 8
	}
}

// Inbound replies without allocation. wire.DecodeHeader makes one string for every
// header with variable fields, and a meshnode reply always has them: it echoes the
// request's correlation id and flow. The connector never looks at either on a reply, so
// decodeReplyHeader checks them in place and leaves them out of the Header.

// decodeReplyHeader decodes the usual reply shape: a Response, or an Error with codec
// JSON, with request_seq, optionally the compressed flag, a correlation id and a flow,
// no metadata and no name. Its checks are those of wire.DecodeHeader for this shape, and
// it returns ok=false for every other input, valid or not: the caller then uses
// wire.DecodeHeader, which also words the error. So it may reject more than the wire
// rules do, never less (TestDecodeReplyHeaderAgreesWithWire).
func decodeReplyHeader(b []byte) (h wire.Header, ok bool) {
	const fixed = 4 + 8 + 1 // marker, kind, codec, flags; request_seq; name_len
	if len(b) < fixed || b[0] != wire.Marker {
		return h, false
	}
	kind, codec, flags := wire.Kind(b[1]), wire.Codec(b[2]), wire.Flags(b[3])
	switch {
	case kind == wire.KindResponse && codec <= wire.CodecProtobuf:
	case kind == wire.KindError && codec == wire.CodecJSON:
	default:
		return h, false
	}
	const allowed = wire.FlagRequestSeq | wire.FlagCompressed | wire.FlagCorrelationID | wire.FlagFlow
	if flags&wire.FlagRequestSeq == 0 || flags&^allowed != 0 {
		return h, false
	}
	seq := binary.BigEndian.Uint64(b[4:])
	if seq == 0 || b[12] != 0 { // request_seq 0, or a name on a reply
		return h, false
	}
	off := fixed
	if flags&wire.FlagCorrelationID != 0 {
		if off >= len(b) {
			return h, false
		}
		n := int(b[off])
		off++
		if n == 0 || n > wire.MaxCorrelationLen || len(b)-off < n {
			return h, false
		}
		for _, c := range b[off : off+n] {
			if c < 0x21 || c > 0x7e { // printable ASCII, no space
				return h, false
			}
		}
		off += n
	}
	if flags&wire.FlagFlow != 0 {
		if len(b)-off < wire.FlowIDLen+1 || !wire.ValidFlowID(b[off:off+wire.FlowIDLen]) {
			return h, false
		}
		off += wire.FlowIDLen
		if o := wire.FlowOrigin(b[off]); o < wire.FlowInbound || o > wire.FlowLifecycle {
			return h, false
		}
		off++
	}
	if off != len(b) {
		return h, false
	}
	return wire.Header{Kind: kind, Codec: codec, Compressed: flags&wire.FlagCompressed != 0, RequestSeq: seq}, true
}
