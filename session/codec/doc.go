// Package codec is the STREAM payload codec registry (zlink-digest §2.5, §12.4): raw (0),
// JSON (1), MessagePack (2) and Protobuf (3), each with its content type, behind one
// decode surface. A server root owns one Registry; so does each connector.
//
// Errors are typed so the session can route them without string matching:
//
//   - ErrUnknownCodec: no codec is registered for the number or content type
//     (a peer sent a codec byte we do not speak: a protocol matter).
//   - ErrUnsupportedValue: the Go value cannot be used with that codec at all (Raw given a
//     struct, Protobuf given a non-proto.Message, a nil or non-pointer decode target): a
//     programming error on our side, never the peer's fault.
//   - ErrDecode: the payload bytes do not decode into the target (the peer's fault; the
//     session's decode_error path).
//   - ErrEncode: the value has a supported type but encoding it failed.
//   - ErrBadContentType: a content type is not a canonical-able ASCII type/subtype.
//
// Every error names the codec ("codec: decode failed (json): ...") and wraps the
// library's own error as well, so errors.As still reaches, say, a *json.SyntaxError.
package codec
