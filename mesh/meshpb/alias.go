package meshpb

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of Envelope (meshpb.proto).
const (
	envFromRid        = 1
	envFromGeneration = 2
	envToRid          = 3
	envToGeneration   = 4
	envFrames         = 5
	envSeq            = 6
	envAck            = 7
	envBatch          = 8
)

var errInvalidUTF8 = errors.New("meshpb: string field is not valid UTF-8")

// UnmarshalAliasing decodes an Envelope from b like proto.Unmarshal, except that its
// bytes fields (frames, batch) are sub-slices of b rather than copies, and unknown
// fields are skipped rather than kept. protoactor's endpoint reader calls it with bytes
// it owns (remote.AliasingUnmarshaler), so a coalesced batch is copied once on its way
// in, not twice. The caller must not write to b afterwards.
func (e *Envelope) UnmarshalAliasing(b []byte) error {
	e.Reset()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("meshpb: envelope: %w", protowire.ParseError(n))
		}
		if !num.IsValid() {
			return fmt.Errorf("meshpb: envelope: field number %d out of range", num)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == envFromRid || num == envToRid || num == envFrames || num == envBatch):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("meshpb: envelope field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case envFromRid, envToRid:
				if !utf8.Valid(v) {
					return fmt.Errorf("meshpb: envelope field %d: %w", num, errInvalidUTF8)
				}
				if num == envFromRid {
					e.FromRid = string(v)
				} else {
					e.ToRid = string(v)
				}
			case envFrames:
				e.Frames = append(e.Frames, v[:len(v):len(v)])
			case envBatch:
				e.Batch = v[:len(v):len(v)]
			}
		case typ == protowire.VarintType && (num == envFromGeneration || num == envToGeneration || num == envSeq || num == envAck):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("meshpb: envelope field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case envFromGeneration:
				e.FromGeneration = v
			case envToGeneration:
				e.ToGeneration = v
			case envSeq:
				e.Seq = v
			case envAck:
				e.Ack = v
			}
		default:
			// An unknown field, or a known one with another wire type (which
			// proto.Unmarshal also keeps as unknown): skip it, checking its form.
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("meshpb: envelope field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
}

// AppendEnvelopeHead appends the encoding of an envelope's identity, sequence and
// acknowledgement fields (every field but frames and batch), as proto.Marshal would
// write them, to b.
func AppendEnvelopeHead(b []byte, fromRid string, fromGeneration uint64, toRid string, toGeneration, seq, ack uint64) []byte {
	b = appendString(b, envFromRid, fromRid)
	b = appendVarint(b, envFromGeneration, fromGeneration)
	b = appendString(b, envToRid, toRid)
	b = appendVarint(b, envToGeneration, toGeneration)
	b = appendVarint(b, envSeq, seq)
	return appendVarint(b, envAck, ack)
}

// AppendBatchKey appends the key and length of a batch field of n bytes: followed by
// the batch itself, it completes an envelope head.
func AppendBatchKey(b []byte, n int) []byte {
	if n == 0 {
		return b
	}
	b = protowire.AppendTag(b, envBatch, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

// MaxEnvelopeHead is the most bytes AppendEnvelopeHead and AppendBatchKey write
// beyond the two identities' strings: seven keys of one byte (fields 1 to 8), each
// followed by a varint (a value or a length) of at most ten bytes.
const MaxEnvelopeHead = 7 * (1 + 10)

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// EnvelopeHeadSize is how many bytes AppendEnvelopeHead and then AppendBatchKey for
// a batch of batchLen bytes write.
func EnvelopeHeadSize(fromRid string, fromGeneration uint64, toRid string, toGeneration, seq, ack uint64, batchLen int) int {
	n := stringSize(fromRid) + varintSize(fromGeneration) + stringSize(toRid) + varintSize(toGeneration) +
		varintSize(seq) + varintSize(ack)
	if batchLen > 0 {
		n += 1 + protowire.SizeVarint(uint64(batchLen))
	}
	return n
}

// stringSize and varintSize: the size of a field (one-byte key) as proto3 writes it,
// nothing for a zero value.
func stringSize(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func varintSize(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}
