package wire

import (
	"strconv"
	"strings"
)

// ErrorClass is the decoder failure class. The first six are the vocabulary of the zlink
// golden fixtures (digest §6.6.2); the other two name failures the fixtures do not cover.
type ErrorClass string

const (
	ClassInvalidMagic   ErrorClass = "invalid-magic"   // bytes 0-1 are not 'Z' 'M'
	ClassUnknownCommand ErrorClass = "unknown-command" // not one of this package's commands
	ClassForbiddenFlag  ErrorClass = "forbidden-flag"  // a flag the command does not allow, or 0x02 without 0x04 (or the reverse)
	ClassInvalidField   ErrorClass = "invalid-field"   // a field value outside its type (zero nonzero-u64, bad text, union length mismatch, ...)
	ClassTruncatedField ErrorClass = "truncated-field" // a field, or a declared length, runs past the end of its frame
	ClassTrailingByte   ErrorClass = "trailing-byte"   // bytes left after the last field of a frame
	// ClassInvalidMajor is a wrong wire major (byte 2). The zlink reference decoder reports
	// it apart from invalid-magic: the peer speaks another protocol version, it does not
	// send garbage.
	ClassInvalidMajor ErrorClass = "invalid-major"
	// ClassFrameCount is a wrong number of frames for the head: a metadata frame without
	// flag 0x01 or missing with it, a missing required payload, a payload on a command that
	// forbids it (or on a failed reply), or any extra frame.
	ClassFrameCount ErrorClass = "frame-count"
)

func (c ErrorClass) String() string { return string(c) }

// Error is a record that breaks a wire rule, found by Decode or refused by Encode.
// errors.Is(err, ErrInvalidField) (and so on) matches on Class.
type Error struct {
	Class   ErrorClass
	Command Command // 0 when the head was not read that far; the raw id for unknown-command
	Field   string  // schema path of the offending field, e.g. "targetActor.targetNodeGeneration"
	Reason  string  // what is wrong with it, for people
	Frame   int     // index of the frame the field is (or, for frame-count, should be) in
	Offset  int     // byte offset of the field in that frame; -1 when not applicable (encode, frame-count)
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("service wire: ")
	b.WriteString(string(e.Class))
	if e.Command != 0 {
		b.WriteString(" in ")
		b.WriteString(e.Command.String())
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	b.WriteString(" (frame ")
	b.WriteString(strconv.Itoa(e.Frame))
	if e.Offset >= 0 {
		b.WriteString(", offset ")
		b.WriteString(strconv.Itoa(e.Offset))
	}
	b.WriteString(")")
	return b.String()
}

// Is reports whether target is an *Error of the same class (the Err* sentinels).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Class == e.Class
}

// Sentinels for errors.Is, one per class. They are never returned themselves.
var (
	ErrInvalidMagic   = &Error{Class: ClassInvalidMagic, Offset: -1}
	ErrInvalidMajor   = &Error{Class: ClassInvalidMajor, Offset: -1}
	ErrUnknownCommand = &Error{Class: ClassUnknownCommand, Offset: -1}
	ErrForbiddenFlag  = &Error{Class: ClassForbiddenFlag, Offset: -1}
	ErrFrameCount     = &Error{Class: ClassFrameCount, Offset: -1}
	ErrInvalidField   = &Error{Class: ClassInvalidField, Offset: -1}
	ErrTruncatedField = &Error{Class: ClassTruncatedField, Offset: -1}
	ErrTrailingByte   = &Error{Class: ClassTrailingByte, Offset: -1}
)

// path is the stack of struct field names above the field being read or written. It is a
// fixed array so that descending into a struct costs no allocation; the dotted name is
// only built when an error is reported.
type path struct {
	seg [4]string
	n   int
}

func (p *path) push(s string) {
	if p.n < len(p.seg) {
		p.seg[p.n] = s
	}
	p.n++
}

func (p *path) pop() { p.n-- }

func (p *path) join(leaf string) string {
	parts := make([]string, 0, len(p.seg)+1)
	for _, s := range p.seg[:min(p.n, len(p.seg))] {
		if s != "" { // an inlined struct (the session fence of 42-44) adds no name
			parts = append(parts, s)
		}
	}
	if leaf != "" {
		parts = append(parts, leaf)
	}
	return strings.Join(parts, ".")
}

// Reasons shared by the encoder and the decoder.
const (
	reasonZero       = "zero in a nonzero-u64"
	reasonAboveMax   = "above 2^63-1"
	reasonEmpty      = "empty"
	reasonTooLong    = "too long"
	reasonNUL        = "contains NUL"
	reasonNotUTF8    = "not valid UTF-8"
	reasonCaseLength = "length does not match the selected case"
)

// checkNonzero returns the reason v is not a nonzero-u64, or "".
func checkNonzero(v uint64) string {
	if v == 0 {
		return reasonZero
	}
	if v > MaxNonzero {
		return reasonAboveMax
	}
	return ""
}
