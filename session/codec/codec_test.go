package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshnode/meshnode/session/wire"
)

type chatMsg struct {
	Room string   `json:"room" msgpack:"room"`
	Seq  int64    `json:"seq" msgpack:"seq"`
	Tags []string `json:"tags" msgpack:"tags"`
}

func mustIs(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}

func TestStandardCodecs(t *testing.T) {
	r := NewRegistry()
	for _, tc := range []struct {
		id   wire.Codec
		ct   string
		name string
	}{
		{wire.CodecRaw, "application/octet-stream", "raw"},
		{wire.CodecJSON, "application/json", "json"},
		{wire.CodecMsgPack, "application/x-msgpack", "msgpack"},
		{wire.CodecProtobuf, "application/x-protobuf", "protobuf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := r.Lookup(tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if c.ID() != tc.id || c.ContentType() != tc.ct {
				t.Fatalf("Lookup(%d) = id %d %q, want %q", tc.id, c.ID(), c.ContentType(), tc.ct)
			}
			byCT, err := r.ByContentType(tc.ct)
			if err != nil || byCT.ID() != tc.id {
				t.Fatalf("ByContentType(%q) = %v, %v", tc.ct, byCT, err)
			}
		})
	}
}

func TestRaw(t *testing.T) {
	var c RawCodec
	src := []byte{0, 1, 2, 0xff}
	b, err := c.Marshal(src)
	if err != nil || !bytes.Equal(b, src) {
		t.Fatalf("Marshal([]byte) = %x, %v", b, err)
	}
	src[0] = 9 // the payload must not change when the caller reuses its buffer
	if b[0] != 0 {
		t.Fatal("Marshal result aliases the input")
	}
	p := &[]byte{7, 8}
	if b, err = c.Marshal(p); err != nil || !bytes.Equal(b, []byte{7, 8}) {
		t.Fatalf("Marshal(*[]byte) = %x, %v", b, err)
	}

	data := []byte("payload")
	var out []byte
	if err := c.Unmarshal(data, &out); err != nil || string(out) != "payload" {
		t.Fatalf("Unmarshal = %q, %v", out, err)
	}
	data[0] = 'X' // the frame buffer is reused for the next frame
	if string(out) != "payload" {
		t.Fatal("Unmarshal result aliases the frame buffer")
	}
	if err := c.Unmarshal(nil, &out); err != nil || len(out) != 0 {
		t.Fatalf("Unmarshal(empty) = %q, %v", out, err)
	}
}

func TestRawRejects(t *testing.T) {
	var c RawCodec
	var nilSlicePtr *[]byte
	for _, v := range []any{"a string", chatMsg{}, 42, nil, nilSlicePtr, json.RawMessage(`{}`)} {
		if _, err := c.Marshal(v); !errors.Is(err, ErrUnsupportedValue) {
			t.Errorf("Marshal(%T) err = %v, want ErrUnsupportedValue", v, err)
		}
	}
	var s string
	var b []byte
	for _, v := range []any{&s, b, nil, nilSlicePtr} {
		if err := c.Unmarshal([]byte("x"), v); !errors.Is(err, ErrUnsupportedValue) {
			t.Errorf("Unmarshal into %T err = %v, want ErrUnsupportedValue", v, err)
		}
	}
}

func TestJSON(t *testing.T) {
	var c JSONCodec
	in := chatMsg{Room: "lobby", Seq: 7, Tags: []string{"a", "b"}}
	b, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"room":"lobby","seq":7,"tags":["a","b"]}`; string(b) != want {
		t.Fatalf("Marshal = %s, want %s", b, want)
	}
	var out chatMsg
	if err := c.Unmarshal(b, &out); err != nil || out.Room != in.Room || out.Seq != in.Seq || len(out.Tags) != 2 {
		t.Fatalf("Unmarshal = %+v, %v", out, err)
	}

	t.Run("syntax error is ErrDecode and keeps the cause", func(t *testing.T) {
		err := c.Unmarshal([]byte(`{"room":`), &out)
		mustIs(t, err, ErrDecode)
		var se *json.SyntaxError
		if !errors.As(err, &se) {
			t.Fatalf("cause lost: %v", err)
		}
	})
	t.Run("type mismatch is ErrDecode", func(t *testing.T) {
		err := c.Unmarshal([]byte(`{"seq":"seven"}`), &out)
		mustIs(t, err, ErrDecode)
		var ute *json.UnmarshalTypeError
		if !errors.As(err, &ute) {
			t.Fatalf("cause lost: %v", err)
		}
	})
	t.Run("empty payload is ErrDecode", func(t *testing.T) {
		mustIs(t, c.Unmarshal(nil, &out), ErrDecode)
	})
	t.Run("bad targets are ErrUnsupportedValue", func(t *testing.T) {
		var nilPtr *chatMsg
		for _, v := range []any{out, nil, nilPtr} {
			err := c.Unmarshal([]byte(`{}`), v)
			mustIs(t, err, ErrUnsupportedValue)
			if errors.Is(err, ErrDecode) {
				t.Fatalf("a programming error must not look like a peer decode error: %v", err)
			}
		}
	})
	t.Run("unencodable values", func(t *testing.T) {
		_, err := c.Marshal(make(chan int))
		mustIs(t, err, ErrUnsupportedValue)
		_, err = c.Marshal(math.NaN())
		mustIs(t, err, ErrUnsupportedValue)
		_, err = c.Marshal(failingMarshaler{})
		mustIs(t, err, ErrEncode)
	})
}

type failingMarshaler struct{}

func (failingMarshaler) MarshalJSON() ([]byte, error) { return nil, errors.New("boom") }

func TestMsgPack(t *testing.T) {
	var c MsgPackCodec
	in := chatMsg{Room: "lobby", Seq: 7, Tags: []string{"a"}}
	b, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	// Golden bytes: a 3-entry fixmap in field order, the int64 in its compact fixint form
	// (0x07, not d3 + 8 bytes) as other implementations write it.
	want := []byte{0x83,
		0xa4, 'r', 'o', 'o', 'm', 0xa5, 'l', 'o', 'b', 'b', 'y',
		0xa3, 's', 'e', 'q', 0x07,
		0xa4, 't', 'a', 'g', 's', 0x91, 0xa1, 'a'}
	if !bytes.Equal(b, want) {
		t.Fatalf("Marshal = % x\nwant      % x", b, want)
	}
	var out chatMsg
	if err := c.Unmarshal(b, &out); err != nil || out.Room != "lobby" || out.Seq != 7 || len(out.Tags) != 1 {
		t.Fatalf("Unmarshal = %+v, %v", out, err)
	}
	// A peer's non-compact int64 (d3 + 8 bytes) decodes the same.
	wide := []byte{0x81, 0xa3, 's', 'e', 'q', 0xd3, 0, 0, 0, 0, 0, 0, 0, 7}
	out = chatMsg{}
	if err := c.Unmarshal(wide, &out); err != nil || out.Seq != 7 {
		t.Fatalf("Unmarshal(wide int) = %+v, %v", out, err)
	}

	t.Run("trailing bytes are ErrDecode", func(t *testing.T) {
		mustIs(t, c.Unmarshal(append(bytes.Clone(b), 0xc0), &out), ErrDecode)
	})
	t.Run("truncated is ErrDecode", func(t *testing.T) {
		mustIs(t, c.Unmarshal(b[:len(b)-1], &out), ErrDecode)
		mustIs(t, c.Unmarshal(nil, &out), ErrDecode)
	})
	t.Run("type mismatch is ErrDecode", func(t *testing.T) {
		var n int
		mustIs(t, c.Unmarshal([]byte{0xa1, 'x'}, &n), ErrDecode)
	})
	t.Run("bad targets are ErrUnsupportedValue", func(t *testing.T) {
		mustIs(t, c.Unmarshal(b, out), ErrUnsupportedValue)
		mustIs(t, c.Unmarshal(b, nil), ErrUnsupportedValue)
	})
	t.Run("unencodable value is ErrEncode", func(t *testing.T) {
		_, err := c.Marshal(make(chan int))
		mustIs(t, err, ErrEncode)
	})
}

func TestProtobuf(t *testing.T) {
	var c ProtobufCodec
	b, err := c.Marshal(wrapperspb.String("hello"))
	if err != nil {
		t.Fatal(err)
	}
	// Field 1, wire type 2 (0x0a), length 5.
	if want := append([]byte{0x0a, 0x05}, "hello"...); !bytes.Equal(b, want) {
		t.Fatalf("Marshal = % x, want % x", b, want)
	}
	var sv wrapperspb.StringValue
	if err := c.Unmarshal(b, &sv); err != nil || sv.GetValue() != "hello" {
		t.Fatalf("Unmarshal = %q, %v", sv.GetValue(), err)
	}

	st, err := structpb.NewStruct(map[string]any{"room": "lobby", "n": 3.0, "ok": true})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = c.Marshal(st); err != nil {
		t.Fatal(err)
	}
	var st2 structpb.Struct
	if err := c.Unmarshal(b, &st2); err != nil || !proto.Equal(st, &st2) {
		t.Fatalf("Struct round trip: %v, %v", st2.AsMap(), err)
	}

	t.Run("non-proto values are ErrUnsupportedValue", func(t *testing.T) {
		for _, v := range []any{chatMsg{}, &chatMsg{}, "x", nil} {
			if _, err := c.Marshal(v); !errors.Is(err, ErrUnsupportedValue) {
				t.Errorf("Marshal(%T) err = %v", v, err)
			}
			if err := c.Unmarshal(b, v); !errors.Is(err, ErrUnsupportedValue) {
				t.Errorf("Unmarshal into %T err = %v", v, err)
			}
		}
	})
	t.Run("typed nil target is ErrUnsupportedValue", func(t *testing.T) {
		var nilMsg *wrapperspb.StringValue
		mustIs(t, c.Unmarshal([]byte{0x0a, 0x00}, nilMsg), ErrUnsupportedValue)
	})
	t.Run("garbage is ErrDecode", func(t *testing.T) {
		mustIs(t, c.Unmarshal([]byte{0x0a, 0x09, 'x'}, &sv), ErrDecode) // length past the end
		mustIs(t, c.Unmarshal([]byte{0xff, 0xff, 0xff}, &sv), ErrDecode)
	})
}

// The one decode surface: every standard codec through the registry's id-based calls.
func TestRegistryMarshalUnmarshal(t *testing.T) {
	r := NewRegistry()
	in := chatMsg{Room: "r", Seq: 1 << 40, Tags: []string{"x"}}
	for _, id := range []wire.Codec{wire.CodecJSON, wire.CodecMsgPack} {
		b, err := r.Marshal(id, in)
		if err != nil {
			t.Fatalf("codec %d Marshal: %v", id, err)
		}
		var out chatMsg
		if err := r.Unmarshal(id, b, &out); err != nil || out.Seq != in.Seq || out.Room != in.Room {
			t.Fatalf("codec %d Unmarshal = %+v, %v", id, out, err)
		}
		mustIs(t, r.Unmarshal(id, []byte{0xc1, '{'}, &out), ErrDecode)
	}
	b, err := r.Marshal(wire.CodecProtobuf, wrapperspb.Int64(42))
	if err != nil {
		t.Fatal(err)
	}
	var iv wrapperspb.Int64Value
	if err := r.Unmarshal(wire.CodecProtobuf, b, &iv); err != nil || iv.GetValue() != 42 {
		t.Fatalf("protobuf via registry = %d, %v", iv.GetValue(), err)
	}
	if b, err = r.Marshal(wire.CodecRaw, []byte("raw")); err != nil || string(b) != "raw" {
		t.Fatalf("raw via registry = %q, %v", b, err)
	}
}

func TestUnknownCodec(t *testing.T) {
	r := NewRegistry()
	_, err := r.Lookup(9)
	mustIs(t, err, ErrUnknownCodec)
	_, err = r.Marshal(9, "x")
	mustIs(t, err, ErrUnknownCodec)
	var s string
	mustIs(t, r.Unmarshal(255, []byte(`"x"`), &s), ErrUnknownCodec)

	var zero Registry // usable, just empty
	_, err = zero.Lookup(wire.CodecJSON)
	mustIs(t, err, ErrUnknownCodec)
	_, err = zero.ByContentType("application/json")
	mustIs(t, err, ErrUnknownCodec)
}

func TestContentTypeCanonicalisation(t *testing.T) {
	r := NewRegistry()
	for _, tc := range []struct {
		in     string
		wantID wire.Codec
		want   error // nil = found
	}{
		{"application/json", wire.CodecJSON, nil},
		{" Application/JSON ", wire.CodecJSON, nil},
		{"\tapplication/x-msgpack\t ", wire.CodecMsgPack, nil},
		{"APPLICATION/X-PROTOBUF", wire.CodecProtobuf, nil},
		{"Application/Octet-Stream", wire.CodecRaw, nil},
		{"application/json; charset=utf-8", 0, ErrBadContentType},
		{"application/json;charset=utf-8", 0, ErrBadContentType},
		{"", 0, ErrBadContentType},
		{" \t ", 0, ErrBadContentType},
		{"application /json", 0, ErrBadContentType},
		{"application/ json", 0, ErrBadContentType},
		{"application/json\n", 0, ErrBadContentType}, // only SP and TAB are trimmed
		{"application/jsön", 0, ErrBadContentType},
		{"application/json\x00", 0, ErrBadContentType},
		{"application", 0, ErrBadContentType},
		{"/json", 0, ErrBadContentType},
		{"application/", 0, ErrBadContentType},
		{"application/json/x", 0, ErrBadContentType},
		{`application/"json"`, 0, ErrBadContentType},
		{"text/plain", 0, ErrUnknownCodec},
		{"application/jsonx", 0, ErrUnknownCodec},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := r.ByContentType(tc.in)
			if tc.want == nil {
				if err != nil || c.ID() != tc.wantID {
					t.Fatalf("ByContentType(%q) = %v, %v; want codec %d", tc.in, c, err, tc.wantID)
				}
				return
			}
			mustIs(t, err, tc.want)
			if tc.want == ErrUnknownCodec && errors.Is(err, ErrBadContentType) {
				t.Fatalf("well-formed unknown type reported as malformed: %v", err)
			}
		})
	}
	if got, err := CanonicalContentType(" Application/Vnd.Zlink+JSON\t"); err != nil || got != "application/vnd.zlink+json" {
		t.Fatalf("CanonicalContentType = %q, %v", got, err)
	}
	// The parameter case must say so rather than complain about the space.
	if _, err := CanonicalContentType("application/json; charset=utf-8"); err == nil ||
		!bytes.Contains([]byte(err.Error()), []byte("parameters")) {
		t.Fatalf("parameter error not explained: %v", err)
	}
}

// fakeCodec is a registered extension codec.
type fakeCodec struct {
	id  wire.Codec
	ct  string
	err error
}

func (f fakeCodec) ID() wire.Codec              { return f.id }
func (f fakeCodec) ContentType() string         { return f.ct }
func (f fakeCodec) Marshal(any) ([]byte, error) { return []byte(f.ct), f.err }
func (f fakeCodec) Unmarshal([]byte, any) error { return f.err }
func (f fakeCodec) String() string              { return fmt.Sprintf("fake(%d,%s)", f.id, f.ct) }

func ctOf(t *testing.T, r *Registry, ct string) wire.Codec {
	t.Helper()
	c, err := r.ByContentType(ct)
	if err != nil {
		t.Fatalf("ByContentType(%q): %v", ct, err)
	}
	return c.ID()
}

func TestRegisterReplacesByNumber(t *testing.T) {
	r := NewRegistry()
	custom := fakeCodec{id: wire.CodecJSON, ct: "application/vnd.test+json"}
	if err := r.Register(custom); err != nil {
		t.Fatal(err)
	}
	c, err := r.Lookup(wire.CodecJSON)
	if err != nil || c.ContentType() != custom.ct {
		t.Fatalf("Lookup(1) = %v, %v; want the replacement", c, err)
	}
	// The replaced codec's content type goes with it.
	_, err = r.ByContentType("application/json")
	mustIs(t, err, ErrUnknownCodec)
	if ctOf(t, r, "application/vnd.test+json") != wire.CodecJSON {
		t.Fatal("replacement not found by its content type")
	}
}

func TestRegisterDuplicateContentTypeLastWins(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(fakeCodec{id: 7, ct: " Application/JSON "}); err != nil {
		t.Fatal(err)
	}
	if got := ctOf(t, r, "application/json"); got != 7 {
		t.Fatalf("application/json -> %d, want the later registration 7", got)
	}
	if c, _ := r.Lookup(wire.CodecJSON); c == nil || c.ContentType() != ContentTypeJSON {
		t.Fatal("number 1 must stay registered")
	}
	// When 7 moves to another type, the name falls back to the earlier holder.
	if err := r.Register(fakeCodec{id: 7, ct: "application/x-seven"}); err != nil {
		t.Fatal(err)
	}
	if got := ctOf(t, r, "application/json"); got != wire.CodecJSON {
		t.Fatalf("application/json -> %d, want 1 again", got)
	}
	// Re-registering 1 makes it the latest holder of its type.
	if err := r.Register(fakeCodec{id: 8, ct: "application/json"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(JSONCodec{}); err != nil {
		t.Fatal(err)
	}
	if got := ctOf(t, r, "application/json"); got != wire.CodecJSON {
		t.Fatalf("application/json -> %d, want 1 (registered last)", got)
	}
}

func TestRegisterRejects(t *testing.T) {
	r := NewRegistry()
	err := r.Register(fakeCodec{id: wire.CodecJSON, ct: "application/json; charset=utf-8"})
	mustIs(t, err, ErrBadContentType)
	// A failed registration changes nothing.
	if c, _ := r.Lookup(wire.CodecJSON); c == nil || c.ContentType() != ContentTypeJSON {
		t.Fatal("failed Register replaced the codec")
	}
	mustIs(t, r.Register(nil), ErrUnsupportedValue)
}

// Errors from extension codecs come back typed like the standard ones.
func TestRegistryTypesExtensionErrors(t *testing.T) {
	r := NewRegistry()
	cause := errors.New("extension failure")
	if err := r.Register(fakeCodec{id: 9, ct: "application/x-nine", err: cause}); err != nil {
		t.Fatal(err)
	}
	err := r.Unmarshal(9, []byte("x"), new(int))
	mustIs(t, err, ErrDecode)
	mustIs(t, err, cause)
	_, err = r.Marshal(9, 1)
	mustIs(t, err, ErrEncode)
	mustIs(t, err, cause)
}

// Lookups sit on the per-frame path: no allocation, not even for a content type that
// needs lowercasing.
func TestLookupsDoNotAllocate(t *testing.T) {
	r := NewRegistry()
	for name, f := range map[string]func(){
		"Lookup":             func() { _, _ = r.Lookup(wire.CodecMsgPack) },
		"ByContentType":      func() { _, _ = r.ByContentType("application/json") },
		"ByContentType/fold": func() { _, _ = r.ByContentType(" Application/X-MsgPack ") },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}

// Readers run while a writer registers (run under -race): each reader must always see
// a complete table.
func TestConcurrentLookupAndRegister(t *testing.T) {
	r := NewRegistry()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	stop := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for id := wire.CodecRaw; id <= wire.CodecProtobuf; id++ {
					if c, err := r.Lookup(id); err != nil || c.ID() != id {
						errs <- fmt.Errorf("Lookup(%d) = %v, %v", id, c, err)
						return
					}
				}
				if c, err := r.ByContentType(ContentTypeMsgPack); err != nil || c.ID() != wire.CodecMsgPack {
					errs <- fmt.Errorf("ByContentType = %v, %v", c, err)
					return
				}
			}
		})
	}
	for i := range 200 {
		if err := r.Register(fakeCodec{id: wire.Codec(10 + i%50), ct: fmt.Sprintf("application/x-ext%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ctOf(t, r, "application/x-ext199") != wire.Codec(10+199%50) {
		t.Fatal("last registration not visible")
	}
	// Number 10+0 was replaced by later registrations: its first type is gone.
	_, err := r.ByContentType("application/x-ext0")
	mustIs(t, err, ErrUnknownCodec)
}

type benchMsg struct {
	Room string `json:"room" msgpack:"room"`
	User string `json:"user" msgpack:"user"`
	Text string `json:"text" msgpack:"text"`
	Seq  int64  `json:"seq" msgpack:"seq"`
}

func BenchmarkRegistry(b *testing.B) {
	r := NewRegistry()
	b.Run("Lookup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = r.Lookup(wire.CodecJSON)
		}
	})
	b.Run("ByContentType", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = r.ByContentType("application/x-msgpack")
		}
	})
	b.Run("ByContentType/fold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = r.ByContentType(" Application/X-MsgPack ")
		}
	})
}

func BenchmarkCodecs(b *testing.B) {
	r := NewRegistry()
	msg := benchMsg{Room: "lobby", User: "alice", Text: "hello, world", Seq: 123456}
	for _, id := range []wire.Codec{wire.CodecJSON, wire.CodecMsgPack} {
		c, _ := r.Lookup(id)
		data, _ := c.Marshal(msg)
		b.Run(c.ContentType()+"/Marshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Marshal(id, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.ContentType()+"/Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var out benchMsg
				if err := r.Unmarshal(id, data, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	sv := wrapperspb.String("hello, world")
	data, _ := ProtobufCodec{}.Marshal(sv)
	b.Run("protobuf/Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Marshal(wire.CodecProtobuf, sv); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf/Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		var out wrapperspb.StringValue
		for b.Loop() {
			if err := r.Unmarshal(wire.CodecProtobuf, data, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
