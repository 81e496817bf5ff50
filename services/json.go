package services

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Strict JSON at the boundary: exactly one JSON value (trailing data is rejected),
// decoded into the member's type with unknown object fields ignored (contracts must stay
// compatible across versions that differ in fields), and on the way out only values
// encoding/json can write (no channels, functions, NaN or infinities, non-string map
// keys). Absence is JSON null; a void result is an empty payload.

// decodeStrict decodes raw into v. An empty raw decodes as null. json.Unmarshal takes
// exactly one value: anything after it but white space is a syntax error.
func decodeStrict(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("null")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("not the expected JSON shape: %w", err)
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
