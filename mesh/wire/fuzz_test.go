package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// goldenSeeds returns every vector of the golden files, canonical and malformed.
func goldenSeeds(t testing.TB) [][][]byte {
	var replaced struct {
		Canonical struct {
			Bytes []int `json:"bytes"`
		} `json:"canonical"`
		Malformed []struct {
			Bytes []int `json:"bytes"`
		} `json:"malformed"`
	}
	readGolden(t, "bound-session-replaced-v1.json", &replaced)
	var barrier struct {
		Canonical []struct {
			Hex string `json:"hex"`
		} `json:"canonical"`
	}
	readGolden(t, "session-relocation-barrier-v1.json", &barrier)
	out := [][][]byte{{ints(t, replaced.Canonical.Bytes)}}
	for _, m := range replaced.Malformed {
		out = append(out, [][]byte{ints(t, m.Bytes)})
	}
	for _, c := range barrier.Canonical {
		b, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, [][]byte{b})
	}
	return out
}

// fuzzSeeds: the golden vectors, every round-trip record and every malformed case, in the
// fuzz input format. testdata/fuzz/FuzzDecode/ holds a committed selection of the same.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	add := func(frames [][]byte) {
		if n := len(frames); n >= 1 && n <= 3 {
			seeds = append(seeds, joinFrames(frames))
		}
	}
	for _, g := range goldenSeeds(t) {
		add(g)
	}
	for _, c := range roundTripRecords() {
		add(mustEncode(t, c.rec))
	}
	for _, c := range decodeCases() {
		add(c.in(t))
	}
	return seeds
}

func TestSplitFrames(t *testing.T) {
	for _, c := range roundTripRecords() {
		frames := mustEncode(t, c.rec)
		if got := splitFrames(joinFrames(frames)); !reflect.DeepEqual(got, frames) {
			t.Fatalf("%s: split(join) = % x", c.name, got)
		}
	}
}

// FuzzDecode: Decode never panics; every error is a well-formed *Error pointing into the
// input; whatever decodes re-encodes to the identical frames and decodes to the same value.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		frames := splitFrames(data)
		rec, err := Decode(frames)
		// A Decoder gives the same answer, fresh, after it decoded the same text, and for
		// a record that differs from the one before it in one byte (its fields compared
		// one by one with the previous record's).
		var d Decoder
		for range 2 {
			drec, derr := d.Decode(frames)
			if !reflect.DeepEqual(drec, rec) || !reflect.DeepEqual(derr, err) {
				t.Fatalf("Decoder = %+v, %v; Decode = %+v, %v", drec, derr, rec, err)
			}
		}
		if len(data) > 0 {
			next := append([]byte(nil), data...)
			next[len(next)/2] ^= 0x01
			nframes := splitFrames(next)
			want, werr := Decode(nframes)
			got, gerr := d.Decode(nframes)
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gerr, werr) {
				t.Fatalf("Decoder after another record = %+v, %v; Decode = %+v, %v", got, gerr, want, werr)
			}
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not a *Error", err, err)
			}
			switch e.Class {
			case ClassInvalidMagic, ClassInvalidMajor, ClassUnknownCommand, ClassForbiddenFlag, ClassFrameCount,
				ClassInvalidField, ClassTruncatedField, ClassTrailingByte:
			default:
				t.Fatalf("unknown class %q", e.Class)
			}
			checkErrorShape(t, e, frames)
			return
		}
		enc, err := Encode(rec)
		if err != nil {
			t.Fatalf("decoded record does not encode: %v\n%+v", err, rec)
		}
		if len(enc) != len(frames) {
			t.Fatalf("re-encode has %d frames, input %d", len(enc), len(frames))
		}
		for i := range enc {
			if !bytes.Equal(enc[i], frames[i]) {
				t.Fatalf("frame %d re-encodes to\n% x\nwant\n% x", i, enc[i], frames[i])
			}
		}
		again, err := Decode(enc)
		if err != nil || !reflect.DeepEqual(again, rec) {
			t.Fatalf("second decode = %+v, %v\nwant %+v", again, err, rec)
		}
	})
}

// fuzzRecord builds a record of the command picked by sel from fuzzed values, reusing
// them across fields so that the encoder's validation sees every kind of bad input.
func fuzzRecord(sel, small byte, s1, s2 string, u1, u2, u3 uint64, data []byte) *Record {
	fence := ActorRouteFence{Actor: ActorRef{ID: s1, Generation: u1}, TargetNodeRID: s2,
		TargetNodeGeneration: u2, ExpectedAuthorityOwnerGeneration: u3, ExpectedOwnerLeaseGeneration: u1}
	session := SessionFence{OwnerNodeRID: s2, OwnerNodeGeneration: u1, OwnerID: s1, OwnerLeaseGeneration: u2,
		SessionRID: s2, BindingGeneration: u3}
	coord := CoordinatorFence{OwnerID: s1, LeaseGeneration: u2, NodeRID: s2, NodeGeneration: u3,
		ExpectedAuthorityStoreVersion: s1 + s2}
	var pl *Payload
	if small&0x10 != 0 {
		pl = &Payload{PacketName: s1, ContentType: s2, Data: data}
	}
	var md Metadata
	if small&0x20 != 0 {
		md = Metadata{{Key: s1, Value: s2}}
		if small&0x40 != 0 {
			md = append(md, MetadataEntry{Key: s2, Value: string(data)})
		}
	}
	rec := &Record{Metadata: md, Payload: pl}
	switch sel % 9 {
	case 0:
		r := &Reply{Correlation: u1, Result: TerminalResult(u2 % 120), Failure: FailureCode(u3 % 40)}
		if small&1 != 0 {
			r.BindOK = &BindOK{BindingGeneration: u2, AuthorityOwnerGeneration: u3}
		}
		rec.Body = r
	case 1:
		b := &ActorSend{Operation: OperationID{u1, u2}, HopCount: small & 0x0f, TargetActor: fence}
		if small&1 != 0 {
			b.SourceActor = ActorRef{ID: s2, Generation: u3}
		}
		if small&2 != 0 {
			b.BoundSession = &BoundSessionTail{SourceSessionRID: s1, SourceBindingGeneration: u2, SourceSessionSequence: u3}
		}
		rec.Body = b
	case 2:
		rec.Body = &BoundSessionSend{Actor: fence, ExpectedBindingGeneration: u2}
	case 3:
		rec.Body = &BoundSessionBind{Correlation: u3, Actor: fence, SessionRID: s1,
			Binding: BindingTransition{State: BindingState(small % 4), Generation: u2}}
	case 4:
		rec.Body = &SessionRelocationSeal{Relocation: RelocationID{u1, u2}, Coordinator: coord,
			SenderRole: RelocationRole(small % 4), Actor: fence, Session: session}
	case 5:
		rec.Body = &SessionRelocationSealed{Relocation: RelocationID{u2, u3}, Coordinator: coord, Actor: fence, Session: session}
	case 6, 7:
		b := &SessionRelocationRoute{Relocation: RelocationID{u3, u1}, Coordinator: coord,
			SenderRole: RelocationRole(small % 4), Actor: fence.Actor, Session: session}
		if sel%9 == 6 {
			b.Route.Commit = &RouteCommit{PreviousAuthorityOwnerGeneration: u1, TargetAuthorityOwnerGeneration: u2,
				TargetNodeRID: s1, TargetNodeGeneration: u3, TargetOwnerLeaseGeneration: u2}
		} else {
			b.Route.Abort = &RouteAbort{CurrentAuthorityOwnerGeneration: u2}
		}
		rec.Body = b
	default:
		rec.Body = &BoundSessionReplaced{ActorAuthority: fence, RetiredSession: session}
	}
	return rec
}

// FuzzEncode: whatever Encode accepts, Decode accepts and returns unchanged (so the two
// sides enforce the same rules); whatever it refuses comes with a class.
func FuzzEncode(f *testing.F) {
	f.Add(byte(1), byte(0x12), "room-17", "node-b", uint64(5), uint64(2), uint64(11), []byte("hello"))
	f.Add(byte(0), byte(0x01), "a", "b", uint64(1), uint64(0), uint64(0), []byte(nil))
	f.Add(byte(6), byte(0x02), "actor-1", "target", uint64(11), uint64(12), uint64(4), []byte(nil))
	f.Add(byte(7), byte(0x01), "actor-1", "source", uint64(11), uint64(12), uint64(4), []byte(nil))
	f.Add(byte(1), byte(0x73), "k", "v", uint64(1), uint64(1), uint64(1), []byte("x\x00"))
	f.Add(byte(3), byte(0x02), "s", "n", uint64(1), uint64(1<<63), uint64(1), []byte(nil))
	f.Fuzz(func(t *testing.T, sel, small byte, s1, s2 string, u1, u2, u3 uint64, data []byte) {
		rec := fuzzRecord(sel, small, s1, s2, u1, u2, u3, data)
		frames, err := Encode(rec)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Class == "" || e.Offset != -1 {
				t.Fatalf("encode error %v (%T)", err, err)
			}
			return
		}
		got, err := Decode(frames)
		if err != nil {
			t.Fatalf("Encode accepted what Decode rejects: %v\n%+v", err, rec)
		}
		if rec.Payload != nil && len(rec.Payload.Data) == 0 {
			rec.Payload.Data = nil // an empty payload decodes as nil
		}
		if !reflect.DeepEqual(got, rec) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, rec)
		}
	})
}

// FuzzTextChecks: the word-at-a-time text checks give the reason the byte-by-byte
// checks they replaced give (kept below as the reference).
func FuzzTextChecks(f *testing.F) {
	for _, s := range []string{"", "room", "application/json", "0123456789abcdef", "ümlaut", "a\x00b",
		"abcdefg\x00hijk", "abcdefgh\xffijk", "\xe2\x82", "longer-ascii-text-with-a-NUL-\x00-late", "abcdefgh€",
		"é\x00\xff", "abcdefghé\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := checkTextBytes(b), checkTextBytesByteWise(b); got != want {
			t.Fatalf("checkTextBytes(%q) = %q, byte by byte %q", b, got, want)
		}
		if got, want := checkText(string(b), 0, 1<<20), checkTextTwoPass(string(b)); got != want {
			t.Fatalf("checkText(%q) = %q, in two passes %q", b, got, want)
		}
	})
}

// checkTextBytesByteWise is the decoder's text check as it was: a NUL before the
// first non-ASCII byte is NUL; from there, invalid UTF-8 first, then NUL.
func checkTextBytesByteWise(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return reasonNUL
		}
		if c >= utf8.RuneSelf {
			rest := b[i:]
			if !utf8.Valid(rest) {
				return reasonNotUTF8
			}
			if bytes.IndexByte(rest, 0) >= 0 {
				return reasonNUL
			}
			return ""
		}
	}
	return ""
}

// checkTextTwoPass is the encoder's as it was: any NUL, then UTF-8.
func checkTextTwoPass(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return reasonNUL
	}
	if !utf8.ValidString(s) {
		return reasonNotUTF8
	}
	return ""
}
