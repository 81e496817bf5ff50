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

// flowIDChar classifies each position of a flow id: the byte at position i is valid
// when flowIDChar[i] has the bit of the byte's class (flowClass) set.
var flowIDChar = func() (m [FlowIDLen]byte) {
	for i := range m {
		switch i {
		case 8, 13, 18, 23:
			m[i] = classHyphen
		case 14:
			m[i] = classVersion7
		case 19:
			m[i] = classVariant
		default:
			m[i] = classHex
		}
	}
	return m
}()

// Byte classes of a flow id. A byte may have several: '7' is hex and the version,
// '8', '9', 'a', 'b' are hex and the variant.
const (
	classHex      = 1 << iota // lowercase hex digit
	classHyphen               // '-'
	classVersion7             // '7'
	classVariant              // RFC 9562 variant nibble: 8, 9, a, b
)

var flowClass = func() (t [256]byte) {
	for c := '0'; c <= '9'; c++ {
		t[c] |= classHex
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] |= classHex
	}
	t['-'] |= classHyphen
	t['7'] |= classVersion7
	for _, c := range "89ab" {
		t[c] |= classVariant
	}
	return t
}()

// validFlowID reports whether s is a lowercase hyphenated UUIDv7 (digest §2.8):
// 8-4-4-4-12 lowercase hex, version nibble 7 at index 14, RFC 9562 variant (8, 9, a, b)
// at index 19. Table lookups without a branch per byte: a flow id is random hex,
// and the obvious range comparisons mispredicted on every other byte (validation
// of the connector's flow ids was an eighth of the server's CPU on pipelined Sends).
func validFlowID[T text](s T) bool {
	if len(s) != FlowIDLen {
		return false
	}
	ok := byte(1)
	for i := 0; i < FlowIDLen; i++ {
		if flowClass[s[i]]&flowIDChar[i] == 0 {
			ok = 0
		}
	}
	return ok == 1
}

// validOrigin reports whether o is one of the four wire values (0 is "no flow").
func validOrigin(o FlowOrigin) bool { return o >= FlowInbound && o <= FlowLifecycle }
