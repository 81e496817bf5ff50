package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
	"unsafe"
)

// ParsePrefix reads the 6-byte prefix. b must hold at least PrefixSize bytes (it panics
// otherwise, like any slice index; Reader.PeekPrefix is the peer-facing way to get here).
func ParsePrefix(b []byte) (headerLen int, payloadLen int) {
	_ = b[5] // one bounds check instead of six
	return int(binary.BigEndian.Uint16(b)), int(binary.BigEndian.Uint32(b[2:]))
}

// AppendPrefix appends a 6-byte prefix. It is for writers that send the header and a
// large payload as separate buffers; AppendFrame is simpler otherwise. The lengths must
// fit in u16 and u32; AppendHeader output always fits u16.
func AppendPrefix(dst []byte, headerLen, payloadLen int) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(headerLen))
	return binary.BigEndian.AppendUint32(dst, uint32(payloadLen))
}

// Header byte offsets of the fixed fields.
const (
	offMarker = 0
	offKind   = 1
	offCodec  = 2
	offFlags  = 3
	offSeq    = 4
)

// layout is what the validating scan learned about a header: the fixed fields and where
// each variable field sits. It lets DecodeHeader build all strings with one allocation
// after the whole header is known to be valid.
type layout struct {
	kind    Kind
	codec   Codec
	flags   Flags
	seq     uint64
	nameOff int // first name byte
	nameLen int
	mdOff   int // first byte of the metadata block (the count byte); -1 when absent
	mdLen   int
	mdCount int
	corrOff int // first correlation byte; -1 when absent
	corrLen int
	flowOff int // first flow_id byte; -1 when absent
	origin  FlowOrigin
}

// DecodeHeader decodes exactly one header from b (b is the header_len bytes after the
// prefix) and validates every rule of digest §2.3–§2.8 and §2.10 that the header alone
// decides. It never retains b.
//
// Allocation: nothing for a header without strings (replies without metadata,
// correlation or flow) or for the known control names; otherwise one string holding all
// variable fields (Name, keys, values, CorrelationID and FlowID are substrings of it, so
// keeping any of them keeps at most one header, ≤ 1,396 bytes, alive), plus the Metadata
// slice when the block is present and non-empty.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if err := decodeHeaderTo(&h, b, false); err != nil {
		return Header{}, err
	}
	return h, nil
}

// DecodeHeaderInPlace is DecodeHeader for a header in a buffer that nothing ever
// modifies or reuses afterwards (a frame the server copied out of its read buffer for
// one packet): the strings point into b instead of a copy, so a header costs no
// allocation but its Metadata slice. b stays alive as long as any of them.
func DecodeHeaderInPlace(b []byte) (Header, error) {
	var h Header
	if err := decodeHeaderTo(&h, b, true); err != nil {
		return Header{}, err
	}
	return h, nil
}

// DecodeHeaderInPlaceTo is DecodeHeaderInPlace into *h, which it overwrites whole
// (on an error, with the zero Header). A header and its layout are over a hundred
// bytes each: returned by value, copying them was half of a header's decode time,
// and the server decodes one per packet.
func DecodeHeaderInPlaceTo(h *Header, b []byte) error {
	return decodeHeaderTo(h, b, true)
}

func decodeHeaderTo(h *Header, b []byte, inPlace bool) error {
	var l layout
	if err := scanHeader(&l, b); err != nil {
		*h = Header{}
		return err
	}
	l.build(h, b, inPlace)
	return nil
}

// scanHeader walks and validates the header into *l without allocating (except for
// errors).
func scanHeader(l *layout, b []byte) error {
	*l = layout{mdOff: -1, corrOff: -1, flowOff: -1}
	if len(b) < minHeaderLen {
		return violation(ViolationEmptyHeader, 0, fmt.Sprintf("header_len %d", len(b)))
	}
	if b[offMarker] != Marker {
		return violation(ViolationBadMarker, offMarker, fmt.Sprintf("0x%02x", b[offMarker]))
	}
	l.kind, l.codec, l.flags = Kind(b[offKind]), Codec(b[offCodec]), Flags(b[offFlags])
	if !kindValid(l.kind) {
		return violation(ViolationUnknownKind, offKind, fmt.Sprintf("%d", l.kind))
	}
	if l.codec > CodecProtobuf {
		return violation(ViolationUnknownCodec, offCodec, fmt.Sprintf("%d", l.codec))
	}
	if bad := l.flags &^ knownFlags; bad != 0 {
		return violation(ViolationUnknownFlag, offFlags, fmt.Sprintf("0x%02x", uint8(bad)))
	}
	if err := checkShape(l.kind, l.codec, l.flags, offCodec, offFlags); err != nil {
		return err
	}
	off := offSeq
	var err error
	if l.flags&FlagRequestSeq != 0 {
		if off, err = l.scanSeq(b, off); err != nil {
			return err
		}
	}
	if off, err = l.scanName(b, off); err != nil {
		return err
	}
	if l.flags&FlagMetadata != 0 {
		if off, err = l.scanMetadata(b, off); err != nil {
			return err
		}
	}
	if l.flags&FlagCorrelationID != 0 {
		if off, err = l.scanCorrelation(b, off); err != nil {
			return err
		}
	}
	if l.flags&FlagFlow != 0 {
		if off, err = l.scanFlow(b, off); err != nil {
			return err
		}
	}
	if off != len(b) {
		return violation(ViolationTrailingBytes, off, fmt.Sprintf("%d bytes", len(b)-off))
	}
	return nil
}

// need reports the field starting at off that needs n bytes but runs past the end.
func need(b []byte, off, n int, field string) error {
	if len(b)-off < n {
		return violation(ViolationTruncated, off, field)
	}
	return nil
}

func (l *layout) scanSeq(b []byte, off int) (int, error) {
	if err := need(b, off, 8, "request_seq"); err != nil {
		return off, err
	}
	l.seq = binary.BigEndian.Uint64(b[off:])
	if l.seq == 0 {
		return off, violation(ViolationZeroSeq, off, "")
	}
	return off + 8, nil
}

func (l *layout) scanName(b []byte, off int) (int, error) {
	if err := need(b, off, 1, "name_len"); err != nil {
		return off, err
	}
	n := int(b[off])
	if err := checkNameLen(l.kind, n, off); err != nil {
		return off, err
	}
	off++
	if err := need(b, off, n, "packet name"); err != nil {
		return off, err
	}
	name := b[off : off+n]
	if !utf8.Valid(name) {
		return off, violation(ViolationNameNotUTF8, off, "")
	}
	if err := checkReserved(l.kind, name, off); err != nil {
		return off, err
	}
	l.nameOff, l.nameLen = off, n
	return off + n, nil
}

func (l *layout) scanMetadata(b []byte, off int) (int, error) {
	if err := need(b, off, 2, "metadata length"); err != nil {
		return off, err
	}
	n := int(binary.BigEndian.Uint16(b[off:]))
	if n > MaxMetadataBytes {
		return off, violation(ViolationMetadataTooLarge, off, fmt.Sprintf("%d bytes", n))
	}
	off += 2
	if err := need(b, off, n, "metadata block"); err != nil {
		return off, err
	}
	count, err := scanMetadataBlock(b[off:off+n], off)
	if err != nil {
		return off, err
	}
	l.mdOff, l.mdLen, l.mdCount = off, n, count
	return off + n, nil
}

// scanMetadataBlock validates a metadata block (digest §2.7) and returns its entry count.
// base is the header offset of blk[0], for error offsets. Anything that makes the count
// disagree with the block (no count byte, an entry running past the block, bytes left
// over) is ViolationMetadataCount: the block length is authoritative, the count is not.
func scanMetadataBlock(blk []byte, base int) (int, error) {
	if len(blk) == 0 {
		return 0, violation(ViolationMetadataCount, base, "block has no count byte")
	}
	count := int(blk[0])
	p := 1
	for i := 0; i < count; i++ {
		next, err := scanEntry(blk, p, base)
		if err != nil {
			return 0, err
		}
		if dupKeyBefore(blk, i, entryKey(blk, p)) {
			return 0, violation(ViolationMetadataDuplicate, base+p, "")
		}
		p = next
	}
	if p != len(blk) {
		return 0, violation(ViolationMetadataCount, base+p,
			fmt.Sprintf("count %d leaves %d bytes", count, len(blk)-p))
	}
	return count, nil
}

// overrun is the detail for an entry that does not fit: the count claims too many.
const overrun = "entry runs past the block"

// scanEntry validates the entry starting at blk[p] and returns the offset after it.
func scanEntry(blk []byte, p, base int) (int, error) {
	if p >= len(blk) {
		return p, violation(ViolationMetadataCount, base+p, overrun)
	}
	kl := int(blk[p])
	if kl == 0 {
		return p, violation(ViolationMetadataEmptyKey, base+p, "")
	}
	p++
	if len(blk)-p < kl {
		return p, violation(ViolationMetadataCount, base+p, overrun)
	}
	if err := checkMetaText(blk[p:p+kl], base+p, "key"); err != nil {
		return p, err
	}
	p += kl
	if len(blk)-p < 2 {
		return p, violation(ViolationMetadataCount, base+p, overrun)
	}
	vl := int(binary.BigEndian.Uint16(blk[p:]))
	p += 2
	if len(blk)-p < vl {
		return p, violation(ViolationMetadataCount, base+p, overrun)
	}
	if err := checkMetaText(blk[p:p+vl], base+p, "value"); err != nil {
		return p, err
	}
	return p + vl, nil
}

// checkMetaText applies the key/value content rules (UTF-8, no NUL) to wire bytes.
func checkMetaText(s []byte, off int, what string) error {
	if !utf8.Valid(s) {
		return violation(ViolationMetadataNotUTF8, off, what)
	}
	if hasNUL(s) {
		return violation(ViolationMetadataNUL, off, what)
	}
	return nil
}

// entryKey returns the key of the already validated entry starting at blk[p].
func entryKey(blk []byte, p int) []byte {
	kl := int(blk[p])
	return blk[p+1 : p+1+kl]
}

// entryEnd returns the offset after the already validated entry starting at blk[p].
func entryEnd(blk []byte, p int) int {
	p += 1 + int(blk[p])
	return p + 2 + int(binary.BigEndian.Uint16(blk[p:]))
}

// dupKeyBefore reports whether one of the first n (validated) entries has key. Quadratic,
// but a block holds at most 255 entries and a map would allocate on every header.
func dupKeyBefore(blk []byte, n int, key []byte) bool {
	p := 1
	for i := 0; i < n; i++ {
		if string(entryKey(blk, p)) == string(key) {
			return true
		}
		p = entryEnd(blk, p)
	}
	return false
}

func (l *layout) scanCorrelation(b []byte, off int) (int, error) {
	if err := need(b, off, 1, "correlation length"); err != nil {
		return off, err
	}
	n := int(b[off])
	if n == 0 {
		return off, violation(ViolationCorrelationID, off, "empty")
	}
	off++
	if err := need(b, off, n, "correlation id"); err != nil {
		return off, err
	}
	if !validCorrelation(b[off : off+n]) {
		return off, violation(ViolationCorrelationID, off, "not printable ASCII")
	}
	l.corrOff, l.corrLen = off, n
	return off + n, nil
}

func (l *layout) scanFlow(b []byte, off int) (int, error) {
	if err := need(b, off, FlowIDLen+1, "flow"); err != nil {
		return off, err
	}
	if !validFlowID(b[off : off+FlowIDLen]) {
		return off, violation(ViolationFlowID, off, "")
	}
	o := FlowOrigin(b[off+FlowIDLen])
	if !validOrigin(o) {
		return off, violation(ViolationFlowOrigin, off+FlowIDLen, fmt.Sprintf("%d", o))
	}
	l.flowOff, l.origin = off, o
	return off + FlowIDLen + 1, nil
}

// build turns a validated layout into a Header (see DecodeHeader for the allocations).
func (l *layout) build(h *Header, b []byte, inPlace bool) {
	*h = Header{
		Kind:       l.kind,
		Codec:      l.codec,
		Compressed: l.flags&FlagCompressed != 0,
		RequestSeq: l.seq,
		FlowOrigin: l.origin,
	}
	if l.kind == KindControl {
		// Control frames carry nothing but the name; the known ones need no allocation.
		h.Name = controlName(b[l.nameOff : l.nameOff+l.nameLen])
		return
	}
	// Every variable field lies in b[l.nameOff:], so one conversion covers them all.
	base := l.nameOff
	var s string
	if inPlace {
		if base < len(b) {
			s = unsafe.String(&b[base], len(b)-base)
		}
	} else {
		s = string(b[base:])
	}
	h.Name = s[:l.nameLen]
	if l.mdOff >= 0 {
		h.Metadata = buildMetadata(s[l.mdOff-base:l.mdOff-base+l.mdLen], l.mdCount)
	}
	if l.corrOff >= 0 {
		h.CorrelationID = s[l.corrOff-base : l.corrOff-base+l.corrLen]
	}
	if l.flowOff >= 0 {
		h.FlowID = s[l.flowOff-base : l.flowOff-base+FlowIDLen]
	}
}

// controlName returns the constant for a known control name, else a copy.
func controlName(name []byte) string {
	switch string(name) { // no allocation: the compiler compares in place
	case NameHeartbeatPing:
		return NameHeartbeatPing
	case NameHeartbeatPong:
		return NameHeartbeatPong
	case NameSessionClosing:
		return NameSessionClosing
	}
	return string(name)
}

// buildMetadata slices the entries of a validated block out of s. A present block with
// count 0 gives a non-nil empty Metadata, so decode → encode is the identity.
func buildMetadata(blk string, count int) Metadata {
	md := make(Metadata, count)
	p := 1
	for i := range md {
		kl := int(blk[p])
		p++
		md[i].Key = blk[p : p+kl]
		p += kl
		vl := int(blk[p])<<8 | int(blk[p+1])
		p += 2
		md[i].Value = blk[p : p+vl]
		p += vl
	}
	return md
}

// ValidateHeader checks h against the same rules DecodeHeader enforces, plus the encode
// only rules (name length, metadata size).
func ValidateHeader(h *Header) error {
	_, err := validate(h)
	return err
}

// validate checks h and returns the metadata block length it will encode to.
func validate(h *Header) (mdLen int, err error) {
	if !kindValid(h.Kind) {
		return 0, violation(ViolationUnknownKind, -1, fmt.Sprintf("%d", h.Kind))
	}
	if h.Codec > CodecProtobuf {
		return 0, violation(ViolationUnknownCodec, -1, fmt.Sprintf("%d", h.Codec))
	}
	if err := checkShape(h.Kind, h.Codec, h.Flags(), -1, -1); err != nil {
		return 0, err
	}
	if err := validateName(h); err != nil {
		return 0, err
	}
	if h.Metadata != nil {
		if mdLen, err = metadataLen(h.Metadata); err != nil {
			return 0, err
		}
	}
	if h.CorrelationID != "" && !validCorrelation(h.CorrelationID) {
		return 0, violation(ViolationCorrelationID, -1, "")
	}
	if err := validateFlow(h); err != nil {
		return 0, err
	}
	return mdLen, nil
}

func validateName(h *Header) error {
	if err := checkNameLen(h.Kind, len(h.Name), -1); err != nil {
		return err
	}
	if len(h.Name) > MaxNameLen {
		return violation(ViolationNameTooLong, -1, fmt.Sprintf("%d bytes", len(h.Name)))
	}
	if !utf8.ValidString(h.Name) {
		return violation(ViolationNameNotUTF8, -1, "")
	}
	return checkReserved(h.Kind, h.Name, -1)
}

func validateFlow(h *Header) error {
	if h.FlowOrigin == 0 {
		if h.FlowID != "" {
			return violation(ViolationFlowOrigin, -1, "flow id without origin")
		}
		return nil
	}
	if !validOrigin(h.FlowOrigin) {
		return violation(ViolationFlowOrigin, -1, fmt.Sprintf("%d", h.FlowOrigin))
	}
	if !validFlowID(h.FlowID) {
		return violation(ViolationFlowID, -1, "")
	}
	return nil
}

// metadataLen validates md and returns its encoded block length (count byte included).
func metadataLen(md Metadata) (int, error) {
	// No separate check that the count fits its u8: 256 entries take at least 1,025
	// bytes, so the size rule below rejects them first.
	n := 1
	for i, e := range md {
		if err := validateEntry(md[:i], e); err != nil {
			return 0, err
		}
		// Sum per entry so the check fires before any length could overflow u16.
		n += 1 + len(e.Key) + 2 + len(e.Value)
		if n > MaxMetadataBytes {
			return 0, violation(ViolationMetadataTooLarge, -1, fmt.Sprintf("over %d bytes", MaxMetadataBytes))
		}
	}
	return n, nil
}

func validateEntry(before Metadata, e MetadataEntry) error {
	if e.Key == "" {
		return violation(ViolationMetadataEmptyKey, -1, "")
	}
	if len(e.Key) > math.MaxUint8 {
		return violation(ViolationMetadataKeyTooLong, -1, fmt.Sprintf("%d bytes", len(e.Key)))
	}
	for _, s := range [2]string{e.Key, e.Value} {
		if !utf8.ValidString(s) {
			return violation(ViolationMetadataNotUTF8, -1, "")
		}
		if hasNUL(s) {
			return violation(ViolationMetadataNUL, -1, "")
		}
	}
	if _, dup := before.Get(e.Key); dup {
		return violation(ViolationMetadataDuplicate, -1, e.Key)
	}
	return nil
}

// AppendHeader validates h and appends its encoding to dst. On error dst is returned
// unchanged. It does not allocate when dst has room for the header.
func AppendHeader(dst []byte, h *Header) ([]byte, error) {
	mdLen, err := validate(h)
	if err != nil {
		return dst, err
	}
	return appendHeader(dst, h, mdLen), nil
}

// appendHeader encodes a validated header.
func appendHeader(dst []byte, h *Header, mdLen int) []byte {
	dst = append(dst, Marker, byte(h.Kind), byte(h.Codec), byte(h.Flags()))
	if h.RequestSeq != 0 {
		dst = binary.BigEndian.AppendUint64(dst, h.RequestSeq)
	}
	dst = append(dst, byte(len(h.Name)))
	dst = append(dst, h.Name...)
	if h.Metadata != nil {
		dst = binary.BigEndian.AppendUint16(dst, uint16(mdLen))
		dst = append(dst, byte(len(h.Metadata)))
		for _, e := range h.Metadata {
			dst = append(dst, byte(len(e.Key)))
			dst = append(dst, e.Key...)
			dst = binary.BigEndian.AppendUint16(dst, uint16(len(e.Value)))
			dst = append(dst, e.Value...)
		}
	}
	if h.CorrelationID != "" {
		dst = append(dst, byte(len(h.CorrelationID)))
		dst = append(dst, h.CorrelationID...)
	}
	if h.FlowOrigin != 0 {
		dst = append(dst, h.FlowID...)
		dst = append(dst, byte(h.FlowOrigin))
	}
	return dst
}

// AppendFrame validates h and appends prefix + header + payload to dst. On error dst is
// returned unchanged. It does not allocate when dst has room for the frame.
func AppendFrame(dst []byte, h *Header, payload []byte) ([]byte, error) {
	mdLen, err := validate(h)
	if err != nil {
		return dst, err
	}
	if uint64(len(payload)) > math.MaxUint32 {
		return dst, violation(ViolationPayloadTooLarge, -1, fmt.Sprintf("%d bytes", len(payload)))
	}
	start := len(dst)
	// Reserve the prefix and fill header_len in once the header is written, which saves
	// computing the header size twice.
	dst = AppendPrefix(dst, 0, len(payload))
	dst = appendHeader(dst, h, mdLen)
	binary.BigEndian.PutUint16(dst[start:], uint16(len(dst)-start-PrefixSize))
	return append(dst, payload...), nil
}

// Session-closing payload layout (digest §2.10).
const (
	closingVersion   = 1
	closingFixedSize = 4 // version, close_reason, diag_len
)

// AppendSessionClosing appends the session-closing payload (digest §2.10). On error dst
// is returned unchanged.
func AppendSessionClosing(dst []byte, sc SessionClosing) ([]byte, error) {
	if !sc.Reason.Valid() {
		return dst, violation(ViolationCloseReason, -1, fmt.Sprintf("%d", sc.Reason))
	}
	if len(sc.Diagnostic) > MaxDiagnosticLen {
		return dst, violation(ViolationDiagnostic, -1, fmt.Sprintf("%d bytes", len(sc.Diagnostic)))
	}
	if !utf8.ValidString(sc.Diagnostic) {
		return dst, violation(ViolationDiagnostic, -1, "not UTF-8")
	}
	dst = append(dst, closingVersion, byte(sc.Reason))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(sc.Diagnostic)))
	return append(dst, sc.Diagnostic...), nil
}

// DecodeSessionClosing decodes a session-closing payload. FrameError offsets are payload
// offsets. It never retains b.
func DecodeSessionClosing(b []byte) (SessionClosing, error) {
	if len(b) < 1 {
		return SessionClosing{}, violation(ViolationTruncated, 0, "version")
	}
	if b[0] != closingVersion {
		return SessionClosing{}, violation(ViolationClosingVersion, 0, fmt.Sprintf("%d", b[0]))
	}
	if len(b) < 2 {
		return SessionClosing{}, violation(ViolationTruncated, 1, "close_reason")
	}
	reason := CloseReason(b[1])
	if !reason.Valid() {
		return SessionClosing{}, violation(ViolationCloseReason, 1, fmt.Sprintf("%d", b[1]))
	}
	if len(b) < closingFixedSize {
		return SessionClosing{}, violation(ViolationTruncated, 2, "diag_len")
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	if n > MaxDiagnosticLen {
		return SessionClosing{}, violation(ViolationDiagnostic, 2, fmt.Sprintf("diag_len %d", n))
	}
	diag := b[closingFixedSize:]
	if n != len(diag) {
		return SessionClosing{}, violation(ViolationDiagnostic, 2,
			fmt.Sprintf("diag_len %d but %d bytes remain", n, len(diag)))
	}
	if !utf8.Valid(diag) {
		return SessionClosing{}, violation(ViolationDiagnostic, closingFixedSize, "not UTF-8")
	}
	return SessionClosing{Reason: reason, Diagnostic: string(diag)}, nil
}
