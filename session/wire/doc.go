// Package wire is the zlink STREAM frame codec: the 6-byte length prefix, the packet
// header and the control payloads, exactly as zlink-digest §2. It has no dependencies
// beyond the standard library and never panics on peer input: every rule violation is a
// *FrameError that errors.Is matches against one of the package's Err* values.
//
// AppendFrame encodes a frame, Reader reads whole frames off a byte stream, and
// DecodeHeader decodes and validates a header; AppendSessionClosing and
// DecodeSessionClosing do the session-closing payload.
package wire
