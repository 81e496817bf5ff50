package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Header building blocks. sendA is a minimal valid Send named "a" with the flags byte
// at offset 3; fields behind the name start at offset 6.
var seq7 = hx("00 00 00 00 00 00 00 07")

func sendA(flags byte) []byte { return cat(hx("f2 01 01"), flags, hx("01"), "a") }

// reqA is a Request with seq 7 named "a"; fields behind the name start at offset 14.
func reqA(flags byte) []byte { return cat(hx("f2 02 01"), flags|0x01, seq7, hx("01"), "a") }

type decodeCase struct {
	name string
	in   []byte
	v    Violation
	off  int
}

var decodeCases = []decodeCase{
	{"empty header", nil, ViolationEmptyHeader, 0},
	{"four-byte header", hx("f2 01 01 00"), ViolationEmptyHeader, 0},
	{"bad marker", cat(hx("f1 01 01 00 01"), "a"), ViolationBadMarker, 0},
	{"kind 0", cat(hx("f2 00 01 00 01"), "a"), ViolationUnknownKind, 1},
	{"kind 6", cat(hx("f2 06 01 00 01"), "a"), ViolationUnknownKind, 1},
	{"kind ff", cat(hx("f2 ff 01 00 01"), "a"), ViolationUnknownKind, 1},
	{"codec 4", cat(hx("f2 01 04 00 01"), "a"), ViolationUnknownCodec, 2},
	{"flag 0x20", sendA(0x20), ViolationUnknownFlag, 3},
	{"flag 0x40", sendA(0x40), ViolationUnknownFlag, 3},
	{"flag 0x80", sendA(0x80), ViolationUnknownFlag, 3},
	{"request without seq", cat(hx("f2 02 01 00 01"), "a"), ViolationMissingSeq, 3},
	{"response without seq", hx("f2 03 01 00 00"), ViolationMissingSeq, 3},
	{"send with seq", cat(hx("f2 01 01 01"), seq7, hx("01"), "a"), ViolationUnexpectedSeq, 3},
	{"control with seq", cat(hx("f2 05 00 01"), seq7, hx("01"), "a"), ViolationUnexpectedSeq, 3},
	{"request seq 0", cat(hx("f2 02 01 01 00 00 00 00 00 00 00 00 01"), "a"), ViolationZeroSeq, 4},
	{"error seq 0", hx("f2 04 01 01 00 00 00 00 00 00 00 00 00"), ViolationZeroSeq, 4},
	{"response with name", cat(hx("f2 03 01 01"), seq7, hx("01"), "a"), ViolationNameOnReply, 12},
	{"error with name", cat(hx("f2 04 01 00 01"), "a"), ViolationNameOnReply, 4},
	{"send without name", hx("f2 01 01 00 00"), ViolationEmptyName, 4},
	{"request without name", cat(hx("f2 02 01 01"), seq7, hx("00")), ViolationEmptyName, 12},
	{"control without name", hx("f2 05 00 00 00"), ViolationEmptyName, 4},
	{"name not UTF-8", hx("f2 01 01 00 02 ff fe"), ViolationNameNotUTF8, 5},
	{"name overlong NUL", hx("f2 01 01 00 02 c0 80"), ViolationNameNotUTF8, 5},
	{"name surrogate", hx("f2 01 01 00 03 ed a0 80"), ViolationNameNotUTF8, 5},
	{"reserved name on send", cat(hx("f2 01 01 00 08"), "$zlink.x"), ViolationReservedName, 5},
	{"reserved name on request", cat(hx("f2 02 01 01"), seq7, hx("15"), NameHeartbeatPing), ViolationReservedName, 13},
	{"control with codec json", cat(hx("f2 05 01 00 01"), "a"), ViolationControlShape, 2},
	{"control with metadata flag", cat(hx("f2 05 00 02 01"), "a", hx("00 01 00")), ViolationControlShape, 3},
	{"control compressed", cat(hx("f2 05 00 04 01"), "a"), ViolationControlShape, 3},
	{"control with correlation", cat(hx("f2 05 00 08 01"), "a", hx("01"), "x"), ViolationControlShape, 3},
	{"control with flow", cat(hx("f2 05 00 10 01"), "a", testFlowID, hx("03")), ViolationControlShape, 3},
	{"error raw", hx("f2 04 00 00 00"), ViolationErrorCodec, 2},
	{"error msgpack", hx("f2 04 02 00 00"), ViolationErrorCodec, 2},

	{"seq truncated", hx("f2 02 01 01 00 00 00"), ViolationTruncated, 4},
	{"name_len missing", cat(hx("f2 02 01 01"), seq7), ViolationTruncated, 12},
	{"name truncated", cat(hx("f2 01 01 00 05"), "ab"), ViolationTruncated, 5},
	{"metadata length truncated", cat(sendA(0x02), hx("00")), ViolationTruncated, 6},
	{"metadata block truncated", cat(sendA(0x02), hx("00 05 01")), ViolationTruncated, 8},
	{"correlation length missing", reqA(0x08), ViolationTruncated, 14},
	{"correlation truncated", cat(reqA(0x08), hx("03"), "ab"), ViolationTruncated, 15},
	{"flow truncated", cat(sendA(0x10), testFlowID), ViolationTruncated, 6},
	{"flow id truncated", cat(sendA(0x10), testFlowID[:20]), ViolationTruncated, 6},
	{"trailing byte on send", cat(sendA(0), hx("00")), ViolationTrailingBytes, 6},
	{"trailing bytes on response", cat(hx("f2 03 01 01"), seq7, hx("00 de ad")), ViolationTrailingBytes, 13},

	{"metadata length 1025", cat(sendA(0x02), hx("04 01")), ViolationMetadataTooLarge, 6},
	{"metadata block 1025", cat(sendA(0x02), hx("04 01 01 01"), "k", hx("03 fc"), strings.Repeat("v", 1020)), ViolationMetadataTooLarge, 6},
	{"metadata without count byte", cat(sendA(0x02), hx("00 00")), ViolationMetadataCount, 8},
	{"metadata count too high", cat(sendA(0x02), hx("00 06 02 01"), "k", hx("00 01"), "v"), ViolationMetadataCount, 14},
	{"metadata count 0 with entries", cat(sendA(0x02), hx("00 06 00 01"), "k", hx("00 00 00")), ViolationMetadataCount, 9},
	{"metadata count too low", cat(sendA(0x02), hx("00 0b 01 01"), "k", hx("00 01"), "v", hx("01"), "j", hx("00 01"), "w"), ViolationMetadataCount, 14},
	{"metadata key overruns", cat(sendA(0x02), hx("00 03 01 05"), "k"), ViolationMetadataCount, 10},
	{"metadata value_len overruns", cat(sendA(0x02), hx("00 04 01 01"), "k", hx("00")), ViolationMetadataCount, 11},
	{"metadata value overruns", cat(sendA(0x02), hx("00 06 01 01"), "k", hx("00 05"), "v"), ViolationMetadataCount, 13},
	{"metadata empty key", cat(sendA(0x02), hx("00 04 01 00 00 00")), ViolationMetadataEmptyKey, 9},
	{"metadata duplicate key", cat(sendA(0x02), hx("00 0b 02 01"), "k", hx("00 01"), "v", hx("01"), "k", hx("00 01"), "w"), ViolationMetadataDuplicate, 14},
	{"metadata NUL in key", cat(sendA(0x02), hx("00 06 01 02"), "a", hx("00 00 00")), ViolationMetadataNUL, 10},
	{"metadata NUL in value", cat(sendA(0x02), hx("00 06 01 01"), "k", hx("00 01 00")), ViolationMetadataNUL, 13},
	{"metadata key not UTF-8", cat(sendA(0x02), hx("00 05 01 01 ff 00 00")), ViolationMetadataNotUTF8, 10},
	{"metadata value not UTF-8", cat(sendA(0x02), hx("00 06 01 01"), "k", hx("00 01 ff")), ViolationMetadataNotUTF8, 13},

	{"correlation on send", cat(sendA(0x08), hx("01"), "x"), ViolationCorrelationID, 3},
	{"correlation empty", cat(reqA(0x08), hx("00")), ViolationCorrelationID, 14},
	{"correlation 65 bytes", cat(reqA(0x08), hx("41"), strings.Repeat("c", 65)), ViolationCorrelationID, 15},
	{"correlation with space", cat(reqA(0x08), hx("02"), "a "), ViolationCorrelationID, 15},
	{"correlation with DEL", cat(reqA(0x08), hx("02"), "a\x7f"), ViolationCorrelationID, 15},
	{"correlation non-ASCII", cat(reqA(0x08), hx("02"), "é"), ViolationCorrelationID, 15},
	{"flow id uppercase", cat(sendA(0x10), strings.ToUpper(testFlowID), hx("03")), ViolationFlowID, 6},
	{"flow id version 4", cat(sendA(0x10), testFlowID[:14]+"4"+testFlowID[15:], hx("03")), ViolationFlowID, 6},
	{"flow id variant c", cat(sendA(0x10), testFlowID[:19]+"c"+testFlowID[20:], hx("03")), ViolationFlowID, 6},
	{"flow id without hyphen", cat(sendA(0x10), testFlowID[:8]+"0"+testFlowID[9:], hx("03")), ViolationFlowID, 6},
	{"flow id non-hex", cat(sendA(0x10), "g"+testFlowID[1:], hx("03")), ViolationFlowID, 6},
	{"flow origin 0", cat(sendA(0x10), testFlowID, hx("00")), ViolationFlowOrigin, 42},
	{"flow origin 5", cat(sendA(0x10), testFlowID, hx("05")), ViolationFlowOrigin, 42},
}

func TestDecodeHeaderViolations(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := DecodeHeader(tc.in)
			assertViolation(t, err, tc.v, tc.off)
			if !reflect.DeepEqual(h, Header{}) {
				t.Errorf("header on error = %+v, want zero", h)
			}
		})
	}
}

// assertViolation checks err is the FrameError for v at off, and that errors.Is matches
// its sentinel and no other.
func assertViolation(t *testing.T, err error, v Violation, off int) {
	t.Helper()
	var fe *FrameError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a *FrameError %v", err, v)
	}
	if fe.Violation != v || fe.Offset != off {
		t.Fatalf("got %v at %d (%v), want %v at %d", fe.Violation, fe.Offset, err, v, off)
	}
	for _, s := range sentinels {
		if got, want := errors.Is(err, s), s.Violation == v; got != want {
			t.Errorf("errors.Is(err, sentinel %v) = %v", s.Violation, got)
		}
	}
}

// sentinels lists every Err* value; TestEveryViolationReachable checks it is complete.
var sentinels = []*FrameError{
	ErrTruncated, ErrTrailingBytes, ErrBadMarker, ErrUnknownKind, ErrUnknownCodec,
	ErrUnknownFlag, ErrMissingSeq, ErrUnexpectedSeq, ErrZeroSeq, ErrNameOnReply,
	ErrEmptyName, ErrNameTooLong, ErrNameNotUTF8, ErrReservedName, ErrControlShape,
	ErrErrorCodec, ErrMetadataTooLarge, ErrMetadataCount, ErrMetadataEmptyKey,
	ErrMetadataDuplicate, ErrMetadataNUL, ErrMetadataNotUTF8, ErrCorrelationID, ErrFlowID,
	ErrFlowOrigin, ErrEmptyHeader, ErrClosingVersion, ErrCloseReason, ErrDiagnostic,
	ErrMetadataKeyTooLong, ErrPayloadTooLarge,
}

type encodeCase struct {
	name string
	h    Header
	v    Violation
}

func send(name string) Header { return Header{Kind: KindSend, Codec: CodecJSON, Name: name} }

func withMD(md Metadata) Header { h := send("a"); h.Metadata = md; return h }

func control(mod func(*Header)) Header {
	h := Header{Kind: KindControl, Name: NameHeartbeatPong}
	mod(&h)
	return h
}

var encodeCases = []encodeCase{
	{"kind 0", Header{Name: "a"}, ViolationUnknownKind},
	{"kind 6", Header{Kind: 6, Name: "a"}, ViolationUnknownKind},
	{"codec 4", Header{Kind: KindSend, Codec: 4, Name: "a"}, ViolationUnknownCodec},
	{"request without seq", Header{Kind: KindRequest, Codec: CodecJSON, Name: "a"}, ViolationMissingSeq},
	{"response without seq", Header{Kind: KindResponse, Codec: CodecJSON}, ViolationMissingSeq},
	{"send with seq", Header{Kind: KindSend, Codec: CodecJSON, Name: "a", RequestSeq: 1}, ViolationUnexpectedSeq},
	{"control with seq", control(func(h *Header) { h.RequestSeq = 1 }), ViolationUnexpectedSeq},
	{"response with name", Header{Kind: KindResponse, Codec: CodecJSON, RequestSeq: 1, Name: "a"}, ViolationNameOnReply},
	{"error with name", Header{Kind: KindError, Codec: CodecJSON, Name: "a"}, ViolationNameOnReply},
	{"send without name", send(""), ViolationEmptyName},
	{"control without name", control(func(h *Header) { h.Name = "" }), ViolationEmptyName},
	{"name 256 bytes", send(strings.Repeat("n", 256)), ViolationNameTooLong},
	{"name not UTF-8", send("a\xff"), ViolationNameNotUTF8},
	{"reserved name on send", send(NameHeartbeatPing), ViolationReservedName},
	{"reserved name on request", Header{Kind: KindRequest, Codec: CodecJSON, RequestSeq: 1, Name: "$zlink."}, ViolationReservedName},
	{"control json", control(func(h *Header) { h.Codec = CodecJSON }), ViolationControlShape},
	{"control compressed", control(func(h *Header) { h.Compressed = true }), ViolationControlShape},
	{"control empty metadata", control(func(h *Header) { h.Metadata = Metadata{} }), ViolationControlShape},
	{"control correlation", control(func(h *Header) { h.CorrelationID = "x" }), ViolationControlShape},
	{"control flow", control(func(h *Header) { h.FlowID, h.FlowOrigin = testFlowID, FlowLifecycle }), ViolationControlShape},
	{"error raw", Header{Kind: KindError, Codec: CodecRaw}, ViolationErrorCodec},
	{"error protobuf", Header{Kind: KindError, Codec: CodecProtobuf, RequestSeq: 3}, ViolationErrorCodec},
	{"metadata 1025 bytes", withMD(Metadata{{Key: "k", Value: strings.Repeat("v", 1020)}}), ViolationMetadataTooLarge},
	{"metadata 231 entries", withMD(manyEntries(231)), ViolationMetadataTooLarge},
	{"metadata 256 entries", withMD(manyEntries(256)), ViolationMetadataTooLarge},
	{"metadata huge value", withMD(Metadata{{Key: "k", Value: strings.Repeat("v", 70000)}}), ViolationMetadataTooLarge},
	{"metadata empty key", withMD(Metadata{{Key: "", Value: "v"}}), ViolationMetadataEmptyKey},
	{"metadata key 256 bytes", withMD(Metadata{{Key: strings.Repeat("k", 256)}}), ViolationMetadataKeyTooLong},
	{"metadata duplicate", withMD(Metadata{{Key: "k", Value: "1"}, {Key: "j"}, {Key: "k", Value: "2"}}), ViolationMetadataDuplicate},
	{"metadata NUL key", withMD(Metadata{{Key: "a\x00"}}), ViolationMetadataNUL},
	{"metadata NUL value", withMD(Metadata{{Key: "a", Value: "\x00"}}), ViolationMetadataNUL},
	{"metadata key not UTF-8", withMD(Metadata{{Key: "\xc3"}}), ViolationMetadataNotUTF8},
	{"metadata value not UTF-8", withMD(Metadata{{Key: "k", Value: "\xed\xa0\x80"}}), ViolationMetadataNotUTF8},
	{"correlation on send", Header{Kind: KindSend, Codec: CodecJSON, Name: "a", CorrelationID: "1"}, ViolationCorrelationID},
	{"correlation 65 bytes", Header{Kind: KindRequest, Codec: CodecJSON, RequestSeq: 1, Name: "a", CorrelationID: strings.Repeat("c", 65)}, ViolationCorrelationID},
	{"correlation with space", Header{Kind: KindResponse, Codec: CodecJSON, RequestSeq: 1, CorrelationID: "a b"}, ViolationCorrelationID},
	{"flow id without origin", Header{Kind: KindSend, Codec: CodecJSON, Name: "a", FlowID: testFlowID}, ViolationFlowOrigin},
	{"flow origin 5", Header{Kind: KindSend, Codec: CodecJSON, Name: "a", FlowID: testFlowID, FlowOrigin: 5}, ViolationFlowOrigin},
	{"flow origin without id", Header{Kind: KindSend, Codec: CodecJSON, Name: "a", FlowOrigin: FlowTimer}, ViolationFlowID},
	{"flow id uppercase", Header{Kind: KindSend, Codec: CodecJSON, Name: "a", FlowID: strings.ToUpper(testFlowID), FlowOrigin: FlowTimer}, ViolationFlowID},
}

// manyEntries returns n distinct entries with empty values and the shortest keys there
// are: the 127 one-byte keys 0x01..0x7f (4 wire bytes each), then two-byte keys (5 each).
// 230 of them fill a block of exactly 1,024 bytes (1 + 127×4 + 103×5), the most entries
// a valid block can hold.
func manyEntries(n int) Metadata {
	md := make(Metadata, n)
	for i := range md {
		if i < 127 {
			md[i].Key = string([]byte{byte(i + 1)})
		} else {
			j := i - 127
			md[i].Key = string([]byte{byte(0x21 + j%94), byte(0x21 + j/94)})
		}
	}
	return md
}

func TestManyEntriesFillsBlock(t *testing.T) {
	if n, err := metadataLen(manyEntries(230)); n != MaxMetadataBytes || err != nil {
		t.Fatalf("metadataLen(230 entries) = %d, %v", n, err)
	}
}

func TestEncodeViolations(t *testing.T) {
	for _, tc := range encodeCases {
		t.Run(tc.name, func(t *testing.T) {
			assertViolation(t, ValidateHeader(&tc.h), tc.v, -1)

			dst := []byte("keep")
			out, err := AppendHeader(dst, &tc.h)
			assertViolation(t, err, tc.v, -1)
			if string(out) != "keep" {
				t.Errorf("AppendHeader changed dst on error: %q", out)
			}
			out, err = AppendFrame(dst, &tc.h, []byte("p"))
			assertViolation(t, err, tc.v, -1)
			if string(out) != "keep" {
				t.Errorf("AppendFrame changed dst on error: %q", out)
			}
		})
	}
}

func TestWorkedExamples(t *testing.T) {
	for _, ex := range examples() {
		t.Run(ex.name, func(t *testing.T) {
			hdr := headerOf(t, ex.frame)

			got, err := AppendFrame(nil, &ex.header, ex.payload)
			if err != nil {
				t.Fatalf("AppendFrame: %v", err)
			}
			if !bytes.Equal(got, ex.frame) {
				t.Fatalf("AppendFrame\n got % x\nwant % x", got, ex.frame)
			}
			gotHdr, err := AppendHeader(nil, &ex.header)
			if err != nil || !bytes.Equal(gotHdr, hdr) {
				t.Fatalf("AppendHeader = % x, %v; want % x", gotHdr, err, hdr)
			}

			h, err := DecodeHeader(hdr)
			if err != nil {
				t.Fatalf("DecodeHeader: %v", err)
			}
			if !reflect.DeepEqual(h, ex.header) {
				t.Fatalf("DecodeHeader\n got %+v\nwant %+v", h, ex.header)
			}
			if p := ex.frame[PrefixSize+len(hdr):]; !bytes.Equal(p, ex.payload) {
				t.Fatalf("payload = %q, want %q", p, ex.payload)
			}
		})
	}
}

func TestWorkedExampleSessionClosing(t *testing.T) {
	ex := examples()[4]
	sc := SessionClosing{Reason: CloseServerDrain}
	p, err := AppendSessionClosing(nil, sc)
	if err != nil || !bytes.Equal(p, ex.payload) {
		t.Fatalf("AppendSessionClosing = % x, %v; want % x", p, err, ex.payload)
	}
	got, err := DecodeSessionClosing(ex.payload)
	if err != nil || got != sc {
		t.Fatalf("DecodeSessionClosing = %+v, %v; want %+v", got, err, sc)
	}
}

// roundTrips are valid headers covering every field, boundary sizes and each kind.
func roundTrips() []Header {
	full := Metadata{{Key: "locale", Value: "ko"}, {Key: "trace", Value: ""}, {Key: "ключ", Value: "値"}}
	return []Header{
		send("a"),
		{Kind: KindSend, Codec: CodecMsgPack, Compressed: true, Name: "chat.msg", Metadata: Metadata{},
			FlowID: testFlowID, FlowOrigin: FlowApplication},
		{Kind: KindRequest, Codec: CodecProtobuf, RequestSeq: 1<<64 - 1, Name: strings.Repeat("é", 127) + "x",
			Metadata: full, CorrelationID: strings.Repeat("~", 64), FlowID: testFlowID, FlowOrigin: FlowInbound},
		{Kind: KindRequest, Codec: CodecRaw, RequestSeq: 1, Name: "svc.call", CorrelationID: "!"},
		{Kind: KindResponse, Codec: CodecJSON, RequestSeq: 9, Metadata: Metadata{{Key: "k", Value: "v"}}},
		{Kind: KindResponse, Codec: CodecRaw, RequestSeq: 9, Compressed: true, CorrelationID: "a", FlowID: testFlowID, FlowOrigin: FlowTimer},
		{Kind: KindError, Codec: CodecJSON},
		{Kind: KindError, Codec: CodecJSON, RequestSeq: 2, CorrelationID: testCorr, FlowID: testFlowID, FlowOrigin: FlowLifecycle},
		{Kind: KindControl, Name: NameHeartbeatPing},
		{Kind: KindControl, Name: NameHeartbeatPong},
		{Kind: KindControl, Name: NameSessionClosing},
		{Kind: KindControl, Name: "$zlink.actor.bound"},
		{Kind: KindControl, Name: "custom"},
		withMD(Metadata{{Key: "k", Value: strings.Repeat("v", 1019)}}), // block exactly 1,024 bytes
		withMD(manyEntries(230)),                                       // most entries a 1,024-byte block can hold
		withMD(Metadata{{Key: strings.Repeat("k", 255), Value: "v"}}),
	}
}

func TestRoundTrip(t *testing.T) {
	for _, h := range roundTrips() {
		enc, err := AppendHeader(nil, &h)
		if err != nil {
			t.Fatalf("AppendHeader(%+v): %v", h, err)
		}
		got, err := DecodeHeader(enc)
		if err != nil {
			t.Fatalf("DecodeHeader(% x): %v", enc, err)
		}
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, h)
		}
		if (got.Metadata == nil) != (h.Metadata == nil) {
			t.Fatalf("metadata presence changed: %v -> %v", h.Metadata == nil, got.Metadata == nil)
		}
		again, _ := AppendHeader(nil, &got)
		if !bytes.Equal(again, enc) {
			t.Fatalf("re-encode differs\n got % x\nwant % x", again, enc)
		}
		frame, err := AppendFrame([]byte("x"), &h, []byte("payload"))
		if err != nil {
			t.Fatal(err)
		}
		hl, pl := ParsePrefix(frame[1:])
		if hl != len(enc) || pl != 7 || !bytes.Equal(frame[1+PrefixSize:1+PrefixSize+hl], enc) ||
			string(frame[1+PrefixSize+hl:]) != "payload" || frame[0] != 'x' {
			t.Fatalf("AppendFrame = % x (hl %d pl %d)", frame, hl, pl)
		}
	}
}

// A present metadata block with count 0 decodes to a non-nil empty Metadata and an
// absent block to nil, which is what makes decode → encode the identity.
func TestMetadataPresence(t *testing.T) {
	h, err := DecodeHeader(cat(sendA(0x02), hx("00 01 00")))
	if err != nil || h.Metadata == nil || len(h.Metadata) != 0 {
		t.Fatalf("present empty block: %#v, %v", h.Metadata, err)
	}
	h, err = DecodeHeader(sendA(0))
	if err != nil || h.Metadata != nil {
		t.Fatalf("absent block: %#v, %v", h.Metadata, err)
	}
}

func TestDecodeDoesNotRetainInput(t *testing.T) {
	in := cat(reqA(0x0a), hx("00 06 01 01"), "k", hx("00 01"), "v", hx("02"), "c1")
	h, err := DecodeHeader(in)
	if err != nil {
		t.Fatal(err)
	}
	want := h
	want.Metadata = append(Metadata(nil), h.Metadata...)
	for i := range in {
		in[i] = '#'
	}
	if !reflect.DeepEqual(h, want) || h.Name != "a" || h.Metadata[0] != (MetadataEntry{"k", "v"}) || h.CorrelationID != "c1" {
		t.Fatalf("header changed with its input: %+v", h)
	}
}

func TestFrameErrorMessage(t *testing.T) {
	_, err := DecodeHeader(hx("f2 09 01 00 00"))
	if got, want := err.Error(), "stream wire: unknown kind: 9 (offset 1)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	err = ValidateHeader(&Header{Kind: KindSend, Codec: CodecJSON})
	if got, want := err.Error(), "stream wire: empty packet name"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if s := Violation(200).String(); s != "violation(200)" {
		t.Errorf("unknown violation String() = %q", s)
	}
}

func TestSessionClosing(t *testing.T) {
	for r := CloseClientClose; r <= CloseTransportError; r++ {
		for _, diag := range []string{"", "bye", "déjà vu", strings.Repeat("d", MaxDiagnosticLen)} {
			sc := SessionClosing{Reason: r, Diagnostic: diag}
			p, err := AppendSessionClosing([]byte{0xAA}, sc)
			if err != nil {
				t.Fatalf("AppendSessionClosing(%+v): %v", sc, err)
			}
			if p[0] != 0xAA || p[1] != 1 || p[2] != byte(r) || int(p[3])<<8|int(p[4]) != len(diag) || string(p[5:]) != diag {
				t.Fatalf("AppendSessionClosing(%+v) = % x", sc, p)
			}
			got, err := DecodeSessionClosing(p[1:])
			if err != nil || got != sc {
				t.Fatalf("DecodeSessionClosing = %+v, %v; want %+v", got, err, sc)
			}
		}
	}
}

type closingCase struct {
	name string
	in   []byte
	v    Violation
	off  int
}

var closingDecodeCases = []closingCase{
	{"empty", nil, ViolationTruncated, 0},
	{"version 0", hx("00 04 00 00"), ViolationClosingVersion, 0},
	{"version 2", hx("02 04 00 00"), ViolationClosingVersion, 0},
	{"reason missing", hx("01"), ViolationTruncated, 1},
	{"reason 0", hx("01 00 00 00"), ViolationCloseReason, 1},
	{"reason 7", hx("01 07 00 00"), ViolationCloseReason, 1},
	{"diag_len missing", hx("01 04"), ViolationTruncated, 2},
	{"diag_len half", hx("01 04 00"), ViolationTruncated, 2},
	{"diag_len 513", cat(hx("01 04 02 01"), strings.Repeat("d", 513)), ViolationDiagnostic, 2},
	{"diag_len over remaining", cat(hx("01 04 00 03"), "ab"), ViolationDiagnostic, 2},
	{"diag_len under remaining", cat(hx("01 04 00 01"), "ab"), ViolationDiagnostic, 2},
	{"diagnostic not UTF-8", hx("01 04 00 02 c3 28"), ViolationDiagnostic, 4},
}

var closingEncodeCases = []struct {
	name string
	sc   SessionClosing
	v    Violation
}{
	{"reason 0", SessionClosing{}, ViolationCloseReason},
	{"reason 7", SessionClosing{Reason: 7}, ViolationCloseReason},
	{"diagnostic 513 bytes", SessionClosing{Reason: CloseIdleTimeout, Diagnostic: strings.Repeat("d", 513)}, ViolationDiagnostic},
	{"diagnostic not UTF-8", SessionClosing{Reason: CloseIdleTimeout, Diagnostic: "\xff"}, ViolationDiagnostic},
}

func TestSessionClosingViolations(t *testing.T) {
	for _, tc := range closingDecodeCases {
		t.Run("decode "+tc.name, func(t *testing.T) {
			sc, err := DecodeSessionClosing(tc.in)
			assertViolation(t, err, tc.v, tc.off)
			if sc != (SessionClosing{}) {
				t.Errorf("value on error = %+v", sc)
			}
		})
	}
	for _, tc := range closingEncodeCases {
		t.Run("encode "+tc.name, func(t *testing.T) {
			out, err := AppendSessionClosing([]byte("keep"), tc.sc)
			assertViolation(t, err, tc.v, -1)
			if string(out) != "keep" {
				t.Errorf("dst changed on error: %q", out)
			}
		})
	}
}

// TestEveryViolationReachable makes sure each Violation (and so each Err* sentinel) is
// produced by at least one input in the tables above, and that sentinels is complete.
func TestEveryViolationReachable(t *testing.T) {
	seen := map[Violation]bool{}
	record := func(err error) {
		var fe *FrameError
		if errors.As(err, &fe) {
			seen[fe.Violation] = true
		}
	}
	for _, tc := range decodeCases {
		_, err := DecodeHeader(tc.in)
		record(err)
	}
	for _, tc := range encodeCases {
		record(ValidateHeader(&tc.h))
	}
	for _, tc := range closingDecodeCases {
		_, err := DecodeSessionClosing(tc.in)
		record(err)
	}
	for _, tc := range closingEncodeCases {
		_, err := AppendSessionClosing(nil, tc.sc)
		record(err)
	}
	// A payload over 4 GiB cannot be allocated in a test; see TestAppendFramePayloadTooLarge
	// for the real call where the platform allows it.
	seen[ViolationPayloadTooLarge] = true

	last := ViolationPayloadTooLarge
	if len(sentinels) != int(last) {
		t.Errorf("sentinels lists %d values, want %d", len(sentinels), last)
	}
	for v := Violation(1); v <= last; v++ {
		if !seen[v] {
			t.Errorf("no test input produces %v", v)
		}
		if strings.HasPrefix(v.String(), "violation(") {
			t.Errorf("violation %d has no name", v)
		}
	}
	if !strings.HasPrefix((last + 1).String(), "violation(") {
		t.Errorf("Violation %d is named but not covered here; extend this test", last+1)
	}
}

func TestAllocations(t *testing.T) {
	exs := examples()
	cases := []struct {
		name string
		hdr  []byte
		max  float64
	}{
		{"response", headerOf(t, exs[1].frame), 0},
		{"heartbeat ping", headerOf(t, exs[3].frame), 0},
		{"session-closing", headerOf(t, exs[4].frame), 0},
		{"send", headerOf(t, exs[2].frame), 1},
		{"request with metadata", headerOf(t, exs[0].frame), 2},
	}
	for _, tc := range cases {
		n := testing.AllocsPerRun(100, func() {
			if _, err := DecodeHeader(tc.hdr); err != nil {
				t.Fatal(err)
			}
		})
		if n > tc.max {
			t.Errorf("DecodeHeader(%s) allocates %v times, want ≤ %v", tc.name, n, tc.max)
		}
	}

	dst := make([]byte, 0, 512)
	for _, ex := range exs {
		n := testing.AllocsPerRun(100, func() {
			var err error
			if _, err = AppendFrame(dst[:0], &ex.header, ex.payload); err != nil {
				t.Fatal(err)
			}
			if _, err = AppendHeader(dst[:0], &ex.header); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("AppendFrame/AppendHeader(%s) with capacity allocates %v times", ex.name, n)
		}
	}
}

func TestAppendPrefix(t *testing.T) {
	p := AppendPrefix([]byte{9}, 0x1234, 0x89abcdef)
	if !bytes.Equal(p, hx("09 12 34 89 ab cd ef")) {
		t.Fatalf("AppendPrefix = % x", p)
	}
	if hl, pl := ParsePrefix(p[1:]); hl != 0x1234 || pl != 0x89abcdef {
		t.Fatalf("ParsePrefix = %#x, %#x", hl, pl)
	}
}
