package wire

import "errors"

var errUnimplemented = errors.New("wire: not implemented yet")

// ParsePrefix reads the 6-byte prefix. b must hold at least PrefixSize bytes.
func ParsePrefix(b []byte) (headerLen int, payloadLen int) {
	return int(b[0])<<8 | int(b[1]), int(b[2])<<24 | int(b[3])<<16 | int(b[4])<<8 | int(b[5])
}

// DecodeHeader decodes exactly one header from b (b is the header_len bytes after the
// prefix) and validates every rule of digest §2.3–§2.8 and §2.10 that the header alone
// decides. It never retains b.
func DecodeHeader(b []byte) (Header, error) { return Header{}, errUnimplemented }

// ValidateHeader checks h against the same rules DecodeHeader enforces, plus the encode
// only rules (name length, metadata size).
func ValidateHeader(h *Header) error { return errUnimplemented }

// AppendHeader validates h and appends its encoding to dst.
func AppendHeader(dst []byte, h *Header) ([]byte, error) { return dst, errUnimplemented }

// AppendFrame validates h and appends prefix + header + payload to dst.
func AppendFrame(dst []byte, h *Header, payload []byte) ([]byte, error) {
	return dst, errUnimplemented
}

// EncodeSessionClosing appends the session-closing payload (digest §2.10).
func AppendSessionClosing(dst []byte, sc SessionClosing) ([]byte, error) {
	return dst, errUnimplemented
}

// DecodeSessionClosing decodes a session-closing payload.
func DecodeSessionClosing(b []byte) (SessionClosing, error) {
	return SessionClosing{}, errUnimplemented
}
