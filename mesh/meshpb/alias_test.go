package meshpb_test

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/mesh/meshpb"
)

// heads are envelope heads worth encoding: zero fields (which proto3 omits), the
// largest values, and identities longer than one length byte covers.
var heads = []*meshpb.Envelope{
	{},
	{FromRid: "127.0.0.1:40000", FromGeneration: 1, ToRid: "127.0.0.1:40001", ToGeneration: 2, Seq: 1},
	{FromRid: "a", FromGeneration: 1 << 63, ToRid: "b", ToGeneration: ^uint64(0), Seq: ^uint64(0), Ack: 1 << 35},
	{FromRid: strings.Repeat("h", 300), FromGeneration: 7, ToRid: strings.Repeat("é", 200), Ack: 127},
}

// The head AppendEnvelopeHead and AppendBatchKey write, followed by the batch, is
// byte for byte what proto.Marshal writes for the same Envelope, and EnvelopeHeadSize
// says how long the head is.
func TestEnvelopeHead_IsWhatProtoMarshalWrites(t *testing.T) {
	for i, h := range heads {
		for _, batch := range [][]byte{nil, {1, 2, 3}, bytes.Repeat([]byte{9}, 70_000)} {
			want := proto.Clone(h).(*meshpb.Envelope)
			want.Batch = batch
			wantBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			got := meshpb.AppendEnvelopeHead(nil, h.FromRid, h.FromGeneration, h.ToRid, h.ToGeneration, h.Seq, h.Ack)
			got = meshpb.AppendBatchKey(got, len(batch))
			if size := meshpb.EnvelopeHeadSize(h.FromRid, h.FromGeneration, h.ToRid, h.ToGeneration, h.Seq, h.Ack, len(batch)); size != len(got) {
				t.Errorf("head %d, batch %d: EnvelopeHeadSize = %d, wrote %d", i, len(batch), size, len(got))
			}
			if over := len(got) - len(h.FromRid) - len(h.ToRid); over > meshpb.MaxEnvelopeHead {
				t.Errorf("head %d: %d bytes beyond the identities, MaxEnvelopeHead is %d", i, over, meshpb.MaxEnvelopeHead)
			}
			got = append(got, batch...)
			if !bytes.Equal(got, wantBytes) {
				t.Errorf("head %d, batch %d: encoding differs from proto.Marshal\n got %x\nwant %x", i, len(batch), head(got), head(wantBytes))
			}
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 64)] }

// UnmarshalAliasing decodes what proto.Marshal wrote into the same Envelope, and its
// bytes fields point into the input instead of being copies.
func TestUnmarshalAliasing_DecodesProtoMarshalOutputWithoutCopying(t *testing.T) {
	for i, h := range heads {
		want := proto.Clone(h).(*meshpb.Envelope)
		want.Frames = [][]byte{[]byte("frame zero"), {}, []byte("frame two")}
		want.Batch = []byte("a batch")
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got meshpb.Envelope
		if err := got.UnmarshalAliasing(b); err != nil {
			t.Fatalf("head %d: %v", i, err)
		}
		if !proto.Equal(&got, want) {
			t.Errorf("head %d: decoded %v, want %v", i, &got, want)
		}
		if !within(got.Batch, b) || !within(got.Frames[0], b) || !within(got.Frames[2], b) {
			t.Errorf("head %d: bytes fields were copied, not aliased", i)
		}
		// A sub-slice must not let an append overwrite the bytes after it.
		if cap(got.Frames[0]) != len(got.Frames[0]) {
			t.Errorf("head %d: frame capacity %d reaches past its length %d", i, cap(got.Frames[0]), len(got.Frames[0]))
		}
	}
}

func within(sub, b []byte) bool {
	if len(sub) == 0 {
		return true
	}
	p, start := uintptr(unsafe.Pointer(unsafe.SliceData(sub))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p+uintptr(len(sub)) <= start+uintptr(len(b))
}

// FuzzEnvelopeUnmarshalAliasing: on any input, UnmarshalAliasing agrees with
// proto.Unmarshal (unknown fields discarded): both fail, or both decode the same
// Envelope. It never panics.
func FuzzEnvelopeUnmarshalAliasing(f *testing.F) {
	for _, h := range heads {
		e := proto.Clone(h).(*meshpb.Envelope)
		e.Frames = [][]byte{{0x5a, 0x4c, 0x01, 24, 0}}
		e.Batch = []byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7}
		b, _ := proto.Marshal(e)
		f.Add(b)
	}
	f.Add([]byte{0x08, 0x01})       // from_rid with the varint wire type
	f.Add([]byte{0x0a, 0x02, 0xff}) // from_rid cut short
	f.Add([]byte{0x0a, 0x01, 0xff}) // from_rid not UTF-8
	f.Add([]byte{0x00, 0x01})       // field number 0
	f.Add([]byte{0x9a, 0x05, 0x00}) // unknown field 83, empty bytes
	f.Add([]byte{0x0b, 0x0c})       // an empty group, field 1
	f.Fuzz(func(t *testing.T, b []byte) {
		var got meshpb.Envelope
		gotErr := got.UnmarshalAliasing(b)
		var want meshpb.Envelope
		wantErr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, &want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("UnmarshalAliasing error %v, proto.Unmarshal error %v, input %x", gotErr, wantErr, b)
		}
		if gotErr == nil && !proto.Equal(&got, &want) {
			t.Fatalf("UnmarshalAliasing %v, proto.Unmarshal %v, input %x", &got, &want, b)
		}
	})
}
