package services

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Strict JSON at the boundary: exactly one JSON value (trailing data is rejected),
// decoded into the member's type with unknown object fields ignored (contracts must stay
// compatible across versions that differ in fields), and on the way out only values
// encoding/json can write (no channels, functions, NaN or infinities, non-string map
// keys). Absence is JSON null; a void result is an empty payload.

var errTrailing = errors.New("trailing data after the JSON value")

// decodeStrict decodes raw into v. An empty raw decodes as null.
func decodeStrict(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not the expected JSON shape: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errTrailing
	}
	return nil
}

// encodeStrict encodes v as one JSON value.
func encodeStrict(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not a JSON value: %w", err)
	}
	return b, nil
}

// validJSON reports whether raw is exactly one well-formed JSON value (or empty).
func validJSON(raw []byte) bool {
	if len(bytes.TrimSpace(raw)) == 0 {
		return true
	}
	var v json.RawMessage
	return decodeStrict(raw, &v) == nil
}
