package wire

import "fmt"

// Violation names one rule of the wire format.
type Violation uint8

// The rule violations. Each has an Err* value below for errors.Is.
const (
	_ Violation = iota
	ViolationTruncated
	ViolationTrailingBytes
	ViolationBadMarker
	ViolationUnknownKind
	ViolationUnknownCodec
	ViolationUnknownFlag
	ViolationMissingSeq    // Request/Response without flag 0x01
	ViolationUnexpectedSeq // Send or Control with flag 0x01
	ViolationZeroSeq       // request_seq present but 0
	ViolationNameOnReply   // Response/Error with name_len != 0
	ViolationEmptyName     // Send/Request/Control without a name
	ViolationNameTooLong   // encode only: name over 255 bytes
	ViolationNameNotUTF8   // name bytes are not valid UTF-8
	ViolationReservedName  // $zlink. name on a non-Control kind
	ViolationControlShape  // Control with codec != Raw or any flag set
	ViolationErrorCodec    // Error with codec != JSON
	ViolationMetadataTooLarge
	ViolationMetadataCount // count byte disagrees with the entries in the block
	ViolationMetadataEmptyKey
	ViolationMetadataDuplicate
	ViolationMetadataNUL
	ViolationMetadataNotUTF8
	ViolationCorrelationID // length 0, over 64, not printable ASCII, or on a Send
	ViolationFlowID        // not a lowercase hyphenated UUIDv7
	ViolationFlowOrigin    // not 1..4, or (encode) a FlowID without an origin
	ViolationEmptyHeader   // header_len below the 5-byte minimum
	ViolationClosingVersion
	ViolationCloseReason
	ViolationDiagnostic // diag_len over 512, disagrees with the remaining bytes, or not UTF-8

	// Added after the first cut; appended so the numbers above stay put.
	ViolationMetadataKeyTooLong // encode only: a metadata key over 255 bytes has no u8 length
	ViolationPayloadTooLarge    // encode only: payload over the u32 payload_len range
)

var violationNames = [...]string{
	ViolationTruncated:         "truncated field",
	ViolationTrailingBytes:     "trailing bytes after the last field",
	ViolationBadMarker:         "bad format marker",
	ViolationUnknownKind:       "unknown kind",
	ViolationUnknownCodec:      "unknown codec",
	ViolationUnknownFlag:       "unknown flag bit",
	ViolationMissingSeq:        "request_seq missing",
	ViolationUnexpectedSeq:     "request_seq not allowed for this kind",
	ViolationZeroSeq:           "request_seq is 0",
	ViolationNameOnReply:       "packet name on a reply",
	ViolationEmptyName:         "empty packet name",
	ViolationNameTooLong:       "packet name over 255 bytes",
	ViolationNameNotUTF8:       "packet name is not UTF-8",
	ViolationReservedName:      "reserved $zlink. name on a non-control packet",
	ViolationControlShape:      "control packet with a codec or flags",
	ViolationErrorCodec:        "error packet not JSON",
	ViolationMetadataTooLarge:  "metadata block over 1024 bytes",
	ViolationMetadataCount:     "metadata count does not match the block",
	ViolationMetadataEmptyKey:  "empty metadata key",
	ViolationMetadataDuplicate: "duplicate metadata key",
	ViolationMetadataNUL:       "NUL in metadata",
	ViolationMetadataNotUTF8:   "metadata is not UTF-8",
	ViolationCorrelationID:     "invalid correlation id",
	ViolationFlowID:            "invalid flow id",
	ViolationFlowOrigin:        "invalid flow origin",
	ViolationEmptyHeader:       "header shorter than 5 bytes",
	ViolationClosingVersion:    "unknown session-closing version",
	ViolationCloseReason:       "unknown close reason",
	ViolationDiagnostic:        "invalid session-closing diagnostic",

	ViolationMetadataKeyTooLong: "metadata key over 255 bytes",
	ViolationPayloadTooLarge:    "payload over 4294967295 bytes",
}

func (v Violation) String() string {
	if int(v) < len(violationNames) && violationNames[v] != "" {
		return violationNames[v]
	}
	return fmt.Sprintf("violation(%d)", uint8(v))
}

// FrameError is a wire rule violation. Offset is the byte offset of the offending field in
// the decoded input: the header for DecodeHeader, the payload for DecodeSessionClosing.
// It is -1 when it does not apply (every encode-side rule).
type FrameError struct {
	Violation Violation
	Offset    int
	Detail    string
}

func (e *FrameError) Error() string {
	s := "stream wire: " + e.Violation.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf(" (offset %d)", e.Offset)
	}
	return s
}

// Is makes errors.Is(err, ErrX) true for every FrameError of the same violation.
func (e *FrameError) Is(target error) bool {
	t, ok := target.(*FrameError)
	return ok && t.Violation == e.Violation
}

func violation(v Violation, off int, detail string) *FrameError {
	return &FrameError{Violation: v, Offset: off, Detail: detail}
}

// Sentinels for errors.Is. Offset -1 and no detail; never returned themselves.
var (
	ErrTruncated         = &FrameError{Violation: ViolationTruncated, Offset: -1}
	ErrTrailingBytes     = &FrameError{Violation: ViolationTrailingBytes, Offset: -1}
	ErrBadMarker         = &FrameError{Violation: ViolationBadMarker, Offset: -1}
	ErrUnknownKind       = &FrameError{Violation: ViolationUnknownKind, Offset: -1}
	ErrUnknownCodec      = &FrameError{Violation: ViolationUnknownCodec, Offset: -1}
	ErrUnknownFlag       = &FrameError{Violation: ViolationUnknownFlag, Offset: -1}
	ErrMissingSeq        = &FrameError{Violation: ViolationMissingSeq, Offset: -1}
	ErrUnexpectedSeq     = &FrameError{Violation: ViolationUnexpectedSeq, Offset: -1}
	ErrZeroSeq           = &FrameError{Violation: ViolationZeroSeq, Offset: -1}
	ErrNameOnReply       = &FrameError{Violation: ViolationNameOnReply, Offset: -1}
	ErrEmptyName         = &FrameError{Violation: ViolationEmptyName, Offset: -1}
	ErrNameTooLong       = &FrameError{Violation: ViolationNameTooLong, Offset: -1}
	ErrNameNotUTF8       = &FrameError{Violation: ViolationNameNotUTF8, Offset: -1}
	ErrReservedName      = &FrameError{Violation: ViolationReservedName, Offset: -1}
	ErrControlShape      = &FrameError{Violation: ViolationControlShape, Offset: -1}
	ErrErrorCodec        = &FrameError{Violation: ViolationErrorCodec, Offset: -1}
	ErrMetadataTooLarge  = &FrameError{Violation: ViolationMetadataTooLarge, Offset: -1}
	ErrMetadataCount     = &FrameError{Violation: ViolationMetadataCount, Offset: -1}
	ErrMetadataEmptyKey  = &FrameError{Violation: ViolationMetadataEmptyKey, Offset: -1}
	ErrMetadataDuplicate = &FrameError{Violation: ViolationMetadataDuplicate, Offset: -1}
	ErrMetadataNUL       = &FrameError{Violation: ViolationMetadataNUL, Offset: -1}
	ErrMetadataNotUTF8   = &FrameError{Violation: ViolationMetadataNotUTF8, Offset: -1}
	ErrCorrelationID     = &FrameError{Violation: ViolationCorrelationID, Offset: -1}
	ErrFlowID            = &FrameError{Violation: ViolationFlowID, Offset: -1}
	ErrFlowOrigin        = &FrameError{Violation: ViolationFlowOrigin, Offset: -1}
	ErrEmptyHeader       = &FrameError{Violation: ViolationEmptyHeader, Offset: -1}
	ErrClosingVersion    = &FrameError{Violation: ViolationClosingVersion, Offset: -1}
	ErrCloseReason       = &FrameError{Violation: ViolationCloseReason, Offset: -1}
	ErrDiagnostic        = &FrameError{Violation: ViolationDiagnostic, Offset: -1}

	ErrMetadataKeyTooLong = &FrameError{Violation: ViolationMetadataKeyTooLong, Offset: -1}
	ErrPayloadTooLarge    = &FrameError{Violation: ViolationPayloadTooLarge, Offset: -1}
)
