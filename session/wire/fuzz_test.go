package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// Seeds in code; testdata/fuzz/<FuzzName>/ holds the same kind of inputs as files plus
// anything the fuzzers found.

func headerSeeds() [][]byte {
	var seeds [][]byte
	for _, ex := range examples() {
		hl, _ := ParsePrefix(ex.frame)
		seeds = append(seeds, ex.frame[PrefixSize:PrefixSize+hl])
	}
	for _, h := range roundTrips() {
		if b, err := AppendHeader(nil, &h); err == nil {
			seeds = append(seeds, b)
		}
	}
	for _, tc := range decodeCases {
		seeds = append(seeds, tc.in)
	}
	return seeds
}

// checkFrameError asserts err is a well-formed *FrameError for an input of n bytes.
func checkFrameError(t *testing.T, err error, n int) {
	t.Helper()
	var fe *FrameError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FrameError", err, err)
	}
	if fe.Offset < 0 || fe.Offset > n {
		t.Fatalf("offset %d outside the %d-byte input: %v", fe.Offset, n, err)
	}
	if strings.HasPrefix(fe.Violation.String(), "violation(") {
		t.Fatalf("unnamed violation %d", fe.Violation)
	}
}

// FuzzDecodeHeader: DecodeHeader never panics, every error is a FrameError pointing into
// the input, and whatever decodes is valid and re-encodes to the identical bytes.
func FuzzDecodeHeader(f *testing.F) {
	for _, s := range headerSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHeader(data)
		// The in-place decoder accepts and rejects exactly the same headers, with the
		// same fields (its strings point into its own copy of the bytes).
		hp, errp := DecodeHeaderInPlace(bytes.Clone(data))
		if (err == nil) != (errp == nil) || (err == nil && !reflect.DeepEqual(h, hp)) {
			t.Fatalf("DecodeHeaderInPlace = %+v, %v\nDecodeHeader = %+v, %v", hp, errp, h, err)
		}
		// So does DecodeHeaderInPlaceTo, and it overwrites every field of a Header
		// that held another one (the zero Header on an error).
		ht := Header{Kind: KindError, Codec: CodecProtobuf, Compressed: true, RequestSeq: 9, Name: "old",
			Metadata: Metadata{{Key: "k", Value: "v"}}, CorrelationID: "c", FlowID: testFlowID, FlowOrigin: FlowLifecycle}
		errt := DecodeHeaderInPlaceTo(&ht, bytes.Clone(data))
		if (err == nil) != (errt == nil) || (err == nil && !reflect.DeepEqual(h, ht)) || (err != nil && !reflect.DeepEqual(ht, Header{})) {
			t.Fatalf("DecodeHeaderInPlaceTo = %+v, %v\nDecodeHeader = %+v, %v", ht, errt, h, err)
		}
		if err != nil {
			checkFrameError(t, err, len(data))
			return
		}
		if err := ValidateHeader(&h); err != nil {
			t.Fatalf("decoded header fails validation: %v\n%+v", err, h)
		}
		enc, err := AppendHeader(nil, &h)
		if err != nil || !bytes.Equal(enc, data) {
			t.Fatalf("re-encode = % x, %v\nwant % x", enc, err, data)
		}
		again, err := DecodeHeader(enc)
		if err != nil || !reflect.DeepEqual(again, h) {
			t.Fatalf("second decode = %+v, %v\nwant %+v", again, err, h)
		}
	})
}

// FuzzSessionClosing: same contract for the session-closing payload.
func FuzzSessionClosing(f *testing.F) {
	f.Add(hx("01 04 00 00"))
	f.Add(cat(hx("01 05 00 03"), "bye"))
	for _, tc := range closingDecodeCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := DecodeSessionClosing(data)
		if err != nil {
			checkFrameError(t, err, len(data))
			return
		}
		enc, err := AppendSessionClosing(nil, sc)
		if err != nil || !bytes.Equal(enc, data) {
			t.Fatalf("re-encode = % x, %v\nwant % x", enc, err, data)
		}
	})
}

// refFrame is one frame as a naive whole-buffer parser sees it.
type refFrame struct {
	headerLen int
	body      []byte
}

// refParse splits data into frames the obvious way and returns the error a streaming
// reader must end with.
func refParse(data []byte) ([]refFrame, error) {
	var frames []refFrame
	for len(data) > 0 {
		if len(data) < PrefixSize {
			return frames, io.ErrUnexpectedEOF
		}
		hl, pl := ParsePrefix(data)
		if len(data)-PrefixSize < hl+pl {
			return frames, io.ErrUnexpectedEOF
		}
		frames = append(frames, refFrame{hl, data[PrefixSize : PrefixSize+hl+pl]})
		data = data[PrefixSize+hl+pl:]
	}
	return frames, io.EOF
}

// FuzzReader: any byte stream, in any fragmentation and buffer size, yields exactly the
// frames a whole-buffer parse finds, then io.EOF or io.ErrUnexpectedEOF; nothing panics.
func FuzzReader(f *testing.F) {
	all, _ := stream()
	f.Add(all, uint16(4096), false)
	f.Add(all, uint16(0), true)
	f.Add(all[:len(all)-1], uint16(64), true)
	f.Add(make([]byte, PrefixSize), uint16(64), false)
	f.Add(hx("ff ff ff ff ff ff 00"), uint16(64), false)
	f.Fuzz(func(t *testing.T, data []byte, bufSize uint16, trickle bool) {
		want, wantErr := refParse(data)
		var src io.Reader = bytes.NewReader(data)
		if trickle {
			src = iotest.OneByteReader(src)
		}
		r := NewReader(src, int(bufSize))
		for i := 0; ; i++ {
			hl, pl, err := r.PeekPrefix()
			if err == nil && PrefixSize+hl+pl > len(data) {
				// What a server does with an oversized prefix: never allocate for it.
				err = r.Discard(PrefixSize + hl + pl)
			}
			if err == nil && i%2 == 1 {
				var ok bool
				ok, err = r.WaitFrame()
				if err == nil && ok != (PrefixSize+hl+pl <= r.BufferSize()) {
					t.Fatalf("frame %d: WaitFrame = %v for %d bytes with buffer %d", i, ok, PrefixSize+hl+pl, r.BufferSize())
				}
			}
			var gotHL int
			var body []byte
			if err == nil {
				gotHL, body, err = r.Next()
			}
			if err != nil {
				if i != len(want) || err != wantErr {
					t.Fatalf("frame %d: err %v; reference has %d frames then %v", i, err, len(want), wantErr)
				}
				return
			}
			if i >= len(want) || gotHL != want[i].headerLen || !bytes.Equal(body, want[i].body) {
				t.Fatalf("frame %d: got (%d, % x), reference has %d frames", i, gotHL, body, len(want))
			}
		}
	})
}

// FuzzValidFlowID: the word-at-a-time flow id check accepts exactly what the rule,
// written out position by position, accepts.
func FuzzValidFlowID(f *testing.F) {
	f.Add([]byte(testFlowID))
	f.Add([]byte("0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b"))
	f.Add([]byte("0190A1B2-C3D4-7E5F-8A6B-7C8D9E0F1A2B"))
	f.Add([]byte("0190a1b2-c3d4-7e5f-ca6b-7c8d9e0f1a2b"))
	f.Add([]byte("0190a1b2\xc3d4-7e5f-8a6b-7c8d9e0f1a2b"))
	f.Add([]byte("0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2"))
	f.Fuzz(func(t *testing.T, id []byte) {
		want := flowIDByRule(id)
		if got := validFlowID(id); got != want {
			t.Fatalf("validFlowID(%q) = %v, the rule says %v", id, got, want)
		}
		if got := validFlowID(string(id)); got != want {
			t.Fatalf("validFlowID(string %q) = %v, the rule says %v", id, got, want)
		}
	})
}
