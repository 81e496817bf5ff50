package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// ErrBadErrorPayload is wrapped when an Error frame's payload is not the JSON object
// {"code": <string>, "message": <string>} (digest §2.11). The connector reports that as
// FrameDecodeFailed and keeps the connection.
var ErrBadErrorPayload = errors.New("codec: malformed error payload")

// ErrorPayload is the payload of an Error frame. It is always JSON (header codec JSON)
// whatever codec the connection otherwise uses.
type ErrorPayload struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// EncodeErrorPayload returns the JSON encoding of {"code": code, "message": message}.
// encoding/json does the escaping; invalid UTF-8 in either string becomes U+FFFD, so
// the result is always the valid UTF-8 JSON the spec requires.
func EncodeErrorPayload(code, message string) []byte {
	b, err := json.Marshal(ErrorPayload{Code: code, Message: message})
	if err != nil {
		// Two string fields cannot fail to marshal.
		panic("codec: marshal error payload: " + err.Error())
	}
	return b
}

// DecodeErrorPayload decodes an Error frame payload strictly: b must be valid UTF-8
// holding exactly one JSON object in which "code" and "message" each appear exactly once
// with a string value. Other members are ignored (forward compatibility). Member names
// match case-sensitively, unlike encoding/json's struct decoding, per the
// framework-json-v1 profile (digest §2.5). Failures wrap ErrBadErrorPayload.
func DecodeErrorPayload(b []byte) (ErrorPayload, error) {
	var p ErrorPayload
	bad := func(format string, args ...any) (ErrorPayload, error) {
		return ErrorPayload{}, fmt.Errorf("%w: "+format, append([]any{ErrBadErrorPayload}, args...)...)
	}
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD; the spec says UTF-8.
	if !utf8.Valid(b) {
		return bad("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return bad("%v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return bad("not a JSON object (starts with %s)", describe(tok))
	}
	var haveCode, haveMessage bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("%v", err)
		}
		key, ok := tok.(string)
		if !ok { // the decoder only yields string keys inside an object; belt and braces
			return bad("member name is %s", describe(tok))
		}
		switch key {
		case "code", "message":
			have := &haveCode
			dst := &p.Code
			if key == "message" {
				have, dst = &haveMessage, &p.Message
			}
			if *have {
				// encoding/json would keep the last one; an ambiguous error is no error report.
				return bad("duplicate %q", key)
			}
			v, err := dec.Token()
			if err != nil {
				return bad("%q: %v", key, err)
			}
			s, ok := v.(string)
			if !ok {
				return bad("%q is %s, want a string", key, describe(v))
			}
			*have, *dst = true, s
		default:
			// Skip the value whole (it may be an object or array) while still checking
			// its syntax.
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return bad("member %q: %v", key, err)
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return bad("%v", err)
	}
	// json.Decoder reads a stream of values; the payload must be exactly one.
	if _, err := dec.Token(); err != io.EOF {
		return bad("trailing data after the object")
	}
	switch {
	case !haveCode:
		return bad(`missing "code"`)
	case !haveMessage:
		return bad(`missing "message"`)
	}
	return p, nil
}

// describe names a JSON token's kind for error messages without echoing peer data.
func describe(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		if t == '{' {
			return "an object"
		}
		if t == '[' {
			return "an array"
		}
		return fmt.Sprintf("%q", rune(t))
	}
	return fmt.Sprintf("%T", tok)
}
