package codec

import (
	"errors"
	"strings"
	"testing"
)

func TestEncodeErrorPayload(t *testing.T) {
	got := EncodeErrorPayload("not_found", "no such actor")
	if want := `{"code":"not_found","message":"no such actor"}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	// Quotes, backslashes, control characters and non-ASCII must survive escaping.
	msg := "bad \"name\" \\ line1\nline2\t<tag> & 한국어 \x01"
	p, err := DecodeErrorPayload(EncodeErrorPayload("x", msg))
	if err != nil || p.Code != "x" || p.Message != msg {
		t.Fatalf("round trip = %+v, %v", p, err)
	}
	// Invalid UTF-8 from a caller still yields valid UTF-8 JSON (U+FFFD), never a
	// payload our own decoder would refuse.
	p, err = DecodeErrorPayload(EncodeErrorPayload("c", "a\xffb"))
	if err != nil || p.Message != "a\uFFFDb" {
		t.Fatalf("invalid UTF-8 message: %+v, %v", p, err)
	}
	// Empty strings are still strings.
	if p, err = DecodeErrorPayload(EncodeErrorPayload("", "")); err != nil || p != (ErrorPayload{}) {
		t.Fatalf("empty fields: %+v, %v", p, err)
	}
}

func TestDecodeErrorPayloadAccepts(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     ErrorPayload
	}{
		{"plain", `{"code":"rejected","message":"nope"}`, ErrorPayload{"rejected", "nope"}},
		{"reordered", `{"message":"m","code":"c"}`, ErrorPayload{"c", "m"}},
		{"whitespace", " \n{ \"code\" : \"c\" ,\t\"message\":\"m\" }\r\n", ErrorPayload{"c", "m"}},
		{"extra fields ignored", `{"code":"c","detail":{"a":[1,2,{"b":null}]},"message":"m","retry":false}`, ErrorPayload{"c", "m"}},
		{"escapes", `{"code":"c","message":"\u00e9\"\n\ud83d\ude00"}`, ErrorPayload{"c", "é\"\n😀"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodeErrorPayload([]byte(tc.in))
			if err != nil || p != tc.want {
				t.Fatalf("got %+v, %v; want %+v", p, err, tc.want)
			}
		})
	}
}

func TestDecodeErrorPayloadRejects(t *testing.T) {
	for _, tc := range []struct {
		name, in, says string // says: a fragment the error must contain
	}{
		{"missing code", `{"message":"m"}`, `missing "code"`},
		{"missing message", `{"code":"c"}`, `missing "message"`},
		{"empty object", `{}`, `missing "code"`},
		{"code is a number", `{"code":404,"message":"m"}`, "number"},
		{"code is null", `{"code":null,"message":"m"}`, "null"},
		{"message is an object", `{"code":"c","message":{"text":"m"}}`, "object"},
		{"message is an array", `{"code":"c","message":["m"]}`, "array"},
		{"code is a boolean", `{"code":true,"message":"m"}`, "boolean"},
		{"names are case-sensitive", `{"Code":"c","Message":"m"}`, `missing "code"`},
		{"duplicate code", `{"code":"a","message":"m","code":"b"}`, "duplicate"},
		{"array", `[{"code":"c","message":"m"}]`, "not a JSON object"},
		{"string", `"not_found"`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"number", `42`, "not a JSON object"},
		{"empty", ``, "EOF"},
		{"truncated", `{"code":"c","message":"m"`, ""},
		{"bad syntax", `{"code":"c",,"message":"m"}`, ""},
		{"bad extra member", `{"code":"c","message":"m","x":tru}`, ""},
		{"trailing data", `{"code":"c","message":"m"} {}`, "trailing"},
		{"trailing garbage", `{"code":"c","message":"m"}x`, "trailing"},
		{"invalid UTF-8", "{\"code\":\"c\",\"message\":\"\xff\"}", "UTF-8"},
		{"byte order mark", "\ufeff{\"code\":\"c\",\"message\":\"m\"}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodeErrorPayload([]byte(tc.in))
			if !errors.Is(err, ErrBadErrorPayload) {
				t.Fatalf("got %+v, %v; want ErrBadErrorPayload", p, err)
			}
			if p != (ErrorPayload{}) {
				t.Fatalf("partial result %+v returned with the error", p)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not mention %q", err, tc.says)
			}
		})
	}
}

func FuzzDecodeErrorPayload(f *testing.F) {
	f.Add([]byte(`{"code":"not_found","message":"no such actor"}`))
	f.Add([]byte(`{"message":"m","code":"c","extra":[1,{"x":null}]}`))
	f.Add([]byte(`{"code":1,"message":"m"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := DecodeErrorPayload(in)
		if err != nil {
			if !errors.Is(err, ErrBadErrorPayload) {
				t.Fatalf("error %v does not wrap ErrBadErrorPayload", err)
			}
			return
		}
		enc := EncodeErrorPayload(p.Code, p.Message)
		again, err := DecodeErrorPayload(enc)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", enc, err)
		}
		if again != p {
			t.Fatalf("round trip changed %+v into %+v", p, again)
		}
	})
}

func BenchmarkErrorPayload(b *testing.B) {
	enc := EncodeErrorPayload("capacity_exceeded", "session queue full (1024 pending)")
	b.Run("Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = EncodeErrorPayload("capacity_exceeded", "session queue full (1024 pending)")
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeErrorPayload(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
