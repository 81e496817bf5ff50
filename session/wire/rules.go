package wire

// Field rules shared by the decoder (which checks peer bytes) and the encoder (which checks
// a Header built by the runtime). Generic over string and []byte so both sides run the
// same code without converting, which would allocate on the decode path.

// text is the two representations a field is checked in.
type text interface{ ~string | ~[]byte }

// kindValid reports whether k is one of the five kinds of digest §2.4.
func kindValid(k Kind) bool { return k >= KindSend && k <= KindControl }

// isReply reports whether k is a reply kind, which carries no packet name.
func isReply(k Kind) bool { return k == KindResponse || k == KindError }

// checkShape enforces the rules that follow from kind, codec and flags alone (digest
// §2.4, §2.6, §2.8). The offsets say where the codec and flags bytes sit (-1 on encode).
// Seq rules are checked before the Control shape so that a Control frame with only a
// request_seq reports the more specific ViolationUnexpectedSeq.
func checkShape(k Kind, c Codec, f Flags, codecOff, flagsOff int) error {
	hasSeq := f&FlagRequestSeq != 0
	switch k {
	case KindSend:
		if hasSeq {
			return violation(ViolationUnexpectedSeq, flagsOff, "send carries request_seq")
		}
		// A Send is never tracked, so a correlation id on it is always a sender bug.
		if f&FlagCorrelationID != 0 {
			return violation(ViolationCorrelationID, flagsOff, "send carries a correlation id")
		}
	case KindRequest, KindResponse:
		if !hasSeq {
			return violation(ViolationMissingSeq, flagsOff, "request and response need request_seq")
		}
	case KindError:
		if c != CodecJSON {
			return violation(ViolationErrorCodec, codecOff, "")
		}
	case KindControl:
		if hasSeq {
			return violation(ViolationUnexpectedSeq, flagsOff, "control carries request_seq")
		}
		if c != CodecRaw {
			return violation(ViolationControlShape, codecOff, "codec must be raw")
		}
		if f != 0 {
			return violation(ViolationControlShape, flagsOff, "flags must be 0")
		}
	}
	return nil
}

// checkNameLen enforces the name presence rules that the length alone decides.
func checkNameLen(k Kind, n, off int) error {
	if isReply(k) {
		if n != 0 {
			return violation(ViolationNameOnReply, off, "")
		}
		return nil
	}
	if n == 0 {
		return violation(ViolationEmptyName, off, "")
	}
	return nil
}

// checkReserved keeps application kinds out of the control namespace (digest §2.10).
func checkReserved[T text](k Kind, name T, off int) error {
	if k != KindControl && hasReservedPrefix(name) {
		return violation(ViolationReservedName, off, "")
	}
	return nil
}

func hasReservedPrefix[T text](name T) bool {
	if len(name) < len(ReservedPrefix) {
		return false
	}
	for i := 0; i < len(ReservedPrefix); i++ {
		if name[i] != ReservedPrefix[i] {
			return false
		}
	}
	return true
}

// hasNUL reports whether s contains a zero byte (forbidden in metadata, digest §2.7).
func hasNUL[T text](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// validCorrelation: 1..64 printable ASCII bytes without space (digest §2.8).
func validCorrelation[T text](s T) bool {
	if len(s) == 0 || len(s) > MaxCorrelationLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7E {
			return false
		}
	}
	return true
}

// ValidFlowID reports whether s is a lowercase hyphenated UUIDv7 (digest §2.8).
func ValidFlowID[T text](s T) bool { return validFlowID(s) }

// validFlowID reports whether s is a lowercase hyphenated UUIDv7 (digest §2.8):
// 8-4-4-4-12 lowercase hex, version nibble 7 at index 14, RFC 9562 variant (8, 9, a, b)
// at index 19. The 32 hex positions are checked eight bytes at a time (SWAR: a byte
// is in a range when adding an offset sets its top bit), the five fixed positions one
// by one. A flow id rides on every packet a connector sends, and its validation was
// an eighth of the server's CPU on pipelined Sends byte by byte, 11 ns of 50 of a
// Send's header decode with a table lookup per byte, 3 ns this way.
func validFlowID[T text](s T) bool {
	if len(s) != FlowIDLen {
		return false
	}
	if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' || s[14] != '7' || !isVariant(s[19]) {
		return false
	}
	// Words at 0, 8, 16, 24 and 28 cover all 36 bytes; the masks leave out the
	// hyphens (bytes 8 and 13 are bytes 0 and 5 of the word at 8; 18 and 23 are bytes
	// 2 and 7 of the word at 16).
	return notHex(le64(s, 0), swarHigh)|
		notHex(le64(s, 8), swarHigh&^(0x80|0x80<<40))|
		notHex(le64(s, 16), swarHigh&^(0x80<<16|0x80<<56))|
		notHex(le64(s, 24), swarHigh)|
		notHex(le64(s, 28), swarHigh) == 0
}

// isVariant reports whether c is an RFC 9562 variant nibble: 8, 9, a or b.
func isVariant(c byte) bool { return c == '8' || c == '9' || c == 'a' || c == 'b' }

const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// notHex returns, for the bytes of w selected by mask (top bit of each), the top bit
// set when the byte is not a lowercase hex digit. A byte over 0x7F is never hex; for
// the others the additions cannot carry into the next byte.
func notHex(w, mask uint64) uint64 {
	ascii := w &^ swarHigh
	digit := (ascii + (0x80-'0')*swarOnes) &^ (ascii + (0x7F-'9')*swarOnes)
	lower := (ascii + (0x80-'a')*swarOnes) &^ (ascii + (0x7F-'f')*swarOnes)
	return ((^(digit | lower) | w) & mask)
}

// validOrigin reports whether o is one of the four wire values (0 is "no flow").
func validOrigin(o FlowOrigin) bool { return o >= FlowInbound && o <= FlowLifecycle }

// le64 reads the eight bytes of s at i as a little-endian word (the compiler combines
// the byte loads into one).
func le64[T text](s T, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}
