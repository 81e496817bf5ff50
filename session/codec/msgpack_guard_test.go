package codec

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Each of these once made the library allocate from the declared length (a 5-byte
// map32 header asking for 2^28 entries killed the process with a fatal out-of-memory)
// or recurse without bound. They must now be refused cheaply as the peer's ErrDecode.
func TestMsgPackHostileInput(t *testing.T) {
	deep := append(bytes.Repeat([]byte{0x91}, maxMsgPackDepth+1), 0xc0)
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"map32 2^28 entries", []byte{0xdf, 0x0f, 0xff, 0xff, 0xff}},
		{"map16 more entries than bytes", []byte{0xde, 0xff, 0xff, 0xc0, 0xc0}},
		{"array32 2^32-1", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"array32 inside array", []byte{0x92, 0xdd, 0x7f, 0xff, 0xff, 0xff, 0xc0}},
		{"bin32 past the end", []byte{0xc6, 0x7f, 0xff, 0xff, 0xff, 1}},
		{"str32 past the end", []byte{0xdb, 0x00, 0x01, 0x00, 0x00, 'x'}},
		{"ext32 past the end", []byte{0xc9, 0x00, 0x01, 0x00, 0x00, 0x01}},
		{"fixext16 short", []byte{0xd8, 0x01, 1, 2, 3}},
		{"truncated length field", []byte{0xdd, 0x00}},
		{"never-used type byte", []byte{0xc1}},
		{"deep nesting", deep},
		{"trailing value", []byte{0xc0, 0xc0}},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var v any
			err := MsgPackCodec{}.Unmarshal(tc.in, &v)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("err = %v, want ErrDecode", err)
			}
			// Linear in the input at most (the deep case keeps a count per open level).
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10+64*uint64(len(tc.in)) {
				t.Fatalf("refusing %d bytes allocated %d bytes", len(tc.in), grew)
			}
		})
	}
	// Just inside the depth limit still decodes.
	ok := append(bytes.Repeat([]byte{0x91}, maxMsgPackDepth-1), 0xc0)
	var v any
	if err := (MsgPackCodec{}).Unmarshal(ok, &v); err != nil {
		t.Fatalf("depth %d: %v", maxMsgPackDepth-1, err)
	}
}

// The guard must accept everything the library itself writes, in every length form,
// or valid peers would be refused.
func TestCheckMsgPackAcceptsLibraryOutput(t *testing.T) {
	str := func(n int) string { return strings.Repeat("s", n) }
	bin := func(n int) []byte { return bytes.Repeat([]byte{7}, n) }
	arr := func(n int) []any {
		a := make([]any, n)
		for i := range a {
			a[i] = i % 3
		}
		return a
	}
	mp := func(n int) map[string]any {
		m := make(map[string]any, n)
		for i := range n {
			m[str(i+1)] = nil
		}
		return m
	}
	values := []any{
		nil, true, false, 0, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, uint64(math.MaxUint64),
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32 - 1, int64(math.MinInt64),
		float32(1.5), 2.25, math.Inf(1),
		str(0), str(31), str(32), str(255), str(256), str(65535), str(65536),
		bin(0), bin(255), bin(256), bin(65536),
		arr(0), arr(15), arr(16), arr(65536),
		mp(0), mp(15), mp(16), mp(300),
		map[string]any{"nested": []any{map[string]any{"a": []any{1, "x", nil}}}},
		time.Unix(1, 0).UTC(), time.Unix(1<<34, 5).UTC(), time.Unix(-1, 123).UTC(),
		chatMsg{Room: "r", Seq: -5, Tags: []string{"a", "b"}},
	}
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatalf("library Marshal(%T): %v", v, err)
		}
		if err := checkMsgPack(b); err != nil {
			t.Errorf("%T (%d bytes, type byte 0x%02x): %v", v, len(b), b[0], err)
		}
		compact, _ := MsgPackCodec{}.Marshal(v)
		if err := checkMsgPack(compact); err != nil {
			t.Errorf("compact %T: %v", v, err)
		}
	}
	// Ext types other than time pass the guard whole (type byte and data skipped).
	for _, ext := range [][]byte{
		{0xd4, 0x05, 1}, {0xd5, 0x05, 1, 2}, {0xd6, 0x05, 1, 2, 3, 4},
		{0xd7, 0x05, 1, 2, 3, 4, 5, 6, 7, 8}, append([]byte{0xd8, 0x05}, make([]byte, 16)...),
		{0xc7, 0x02, 0x05, 1, 2}, {0xc8, 0x00, 0x01, 0x05, 1}, {0xc9, 0, 0, 0, 1, 0x05, 1},
	} {
		if err := checkMsgPack(ext); err != nil {
			t.Errorf("ext % x: %v", ext, err)
		}
	}
}

func TestMsgPackDecodesEveryForm(t *testing.T) {
	in := map[string]any{"s": strings.Repeat("x", 70000), "a": []any{int8(1), "two", nil, true}}
	b, err := MsgPackCodec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := (MsgPackCodec{}).Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out["s"] != in["s"] || !reflect.DeepEqual(out["a"], in["a"]) {
		t.Fatalf("round trip mismatch: %v", out["a"])
	}
}

// Peer payloads must never crash the process: no panic, no runaway allocation (the
// fuzzer itself would die of the latter), and failures are always ErrDecode.
func FuzzMsgPackUnmarshal(f *testing.F) {
	for _, v := range []any{nil, 1, "x", []any{1, []any{2}}, map[string]any{"k": 1.5}, []byte{1}} {
		b, _ := MsgPackCodec{}.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0xdf, 0x0f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		var v any
		if err := (MsgPackCodec{}).Unmarshal(in, &v); err != nil && !errors.Is(err, ErrDecode) {
			t.Fatalf("err %v is not ErrDecode", err)
		}
		var m chatMsg
		if err := (MsgPackCodec{}).Unmarshal(in, &m); err != nil && !errors.Is(err, ErrDecode) {
			t.Fatalf("err %v is not ErrDecode", err)
		}
	})
}
