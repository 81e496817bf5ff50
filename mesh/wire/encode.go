package wire

import (
	"encoding/binary"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Encode validates rec and returns its frames. All frames share one freshly allocated
// backing array of exactly their total size (each frame is capped at its own length, so
// appending to one cannot overwrite the next). It returns an *Error for anything Decode
// would reject. For the hot path, AppendFrames reuses buffers and does not allocate.
func Encode(rec *Record) ([][]byte, error) {
	// Encode into a pooled scratch buffer and copy out, so the heap buffer is exactly the
	// record's size: the two allocations below are all the garbage an Encode leaves.
	sc := scratchPool.Get().(*scratch)
	buf, frames, err := AppendFrames(sc.buf[:0], sc.frames[:0], rec)
	if err != nil {
		scratchPool.Put(sc)
		return nil, err
	}
	out := make([][]byte, len(frames))
	all := make([]byte, len(buf))
	copy(all, buf)
	start := 0
	for i, f := range frames {
		end := start + len(f)
		out[i] = all[start:end:end]
		start = end
	}
	if cap(buf) <= maxScratch { // do not pin the buffer of one huge payload
		sc.buf, sc.frames = buf[:0], frames[:0]
		clear(sc.frames[:cap(sc.frames)]) // drop references into buf
		scratchPool.Put(sc)
	}
	return out, nil
}

type scratch struct {
	buf    []byte
	frames [][]byte
}

const maxScratch = 64 << 10

var scratchPool = sync.Pool{New: func() any {
	return &scratch{buf: make([]byte, 0, 1024), frames: make([][]byte, 0, 3)}
}}

// AppendFrames is Encode for the hot path: it appends the bytes of every frame to buf and
// the frames (subslices of the returned buffer) to frames, and returns both. With a buf of
// enough capacity and a frames slice with room for three, it does not allocate; reuse
// them as buf[:0] and frames[:0] once the previous frames have been sent. On error both
// come back at their original lengths.
func AppendFrames(buf []byte, frames [][]byte, rec *Record) ([]byte, [][]byte, error) {
	start, nframes := len(buf), len(frames)
	w := writer{buf: buf}
	w.record(rec)
	if w.err != nil {
		return buf[:start], frames[:nframes], w.err
	}
	for _, end := range w.ends[:w.nend] {
		frames = append(frames, w.buf[start:end:end])
		start = end
	}
	return w.buf, frames, nil
}

// writer appends one record. Errors are sticky: the first one is kept and the rest of the
// record is still walked (cheaply) so that the code needs no error plumbing.
type writer struct {
	buf   []byte
	cmd   Command
	frame int
	ends  [3]int // end offset in buf of each frame written
	nend  int
	path  path
	err   *Error
}

func (w *writer) fail(class ErrorClass, field, reason string) {
	if w.err == nil {
		w.err = &Error{Class: class, Command: w.cmd, Field: w.path.join(field), Reason: reason, Frame: w.frame, Offset: -1}
	}
}

func (w *writer) endFrame() {
	w.ends[w.nend] = len(w.buf)
	w.nend++
	w.frame++
}

func (w *writer) record(rec *Record) {
	if rec == nil || rec.Body == nil {
		w.fail(ClassUnknownCommand, "", "record without a body")
		return
	}
	w.cmd = rec.Body.Command()
	sp, _ := specOf(w.cmd)
	flags := rec.Body.flags()
	if rec.Metadata != nil {
		if sp.allowed&FlagMetadata == 0 {
			w.fail(ClassForbiddenFlag, "metadata", "command does not allow a metadata frame")
			return
		}
		flags |= FlagMetadata
	}
	w.frame = 1 + int(flags&FlagMetadata) // where the payload frame is (or would be)
	switch {
	case rec.Payload == nil && sp.payload == payloadRequired:
		w.fail(ClassFrameCount, "payload", "command requires a payload")
		return
	case rec.Payload != nil && sp.payload == payloadForbidden:
		w.fail(ClassFrameCount, "payload", "command does not allow a payload")
		return
	}
	if r, ok := rec.Body.(*Reply); ok && r != nil && rec.Payload != nil && r.Result != ResultOK {
		w.fail(ClassFrameCount, "payload", "only an ok reply may carry a payload")
		return
	}
	w.frame = 0
	if meshnodeCommand(w.cmd) {
		w.buf = append(w.buf, MeshnodeMagic0, MeshnodeMagic1, Major, byte(w.cmd), flags)
	} else {
		w.buf = append(w.buf, Magic0, Magic1, Major, byte(w.cmd), flags)
	}
	// A type switch rather than the interface call: through an interface method the
	// compiler must assume w escapes, which costs AppendFrames its zero allocations.
	switch b := rec.Body.(type) {
	case *Reply:
		b.appendBody(w)
	case *ActorSend:
		b.appendBody(w)
	case *BoundSessionSend:
		b.appendBody(w)
	case *BoundSessionBind:
		b.appendBody(w)
	case *SessionRelocationSeal:
		b.appendBody(w)
	case *SessionRelocationSealed:
		b.appendBody(w)
	case *SessionRelocationRoute:
		b.appendBody(w)
	case *BoundSessionReplaced:
		b.appendBody(w)
	case *TopicPublish:
		b.appendBody(w)
	case *TopicInterest:
		b.appendBody(w)
	case *TopicInterestAck:
		b.appendBody(w)
	}
	w.endFrame()
	if rec.Metadata != nil && w.err == nil {
		w.metadata(rec.Metadata)
		w.endFrame()
	}
	if rec.Payload != nil && w.err == nil { // do not copy a payload for a record already refused

		w.payload(rec.Payload)
		w.endFrame()
	}
}

func (w *writer) u8(v byte)    { w.buf = append(w.buf, v) }
func (w *writer) u16(v uint16) { w.buf = binary.BigEndian.AppendUint16(w.buf, v) }
func (w *writer) u32(v uint32) { w.buf = binary.BigEndian.AppendUint32(w.buf, v) }
func (w *writer) u64(v uint64) { w.buf = binary.BigEndian.AppendUint64(w.buf, v) }
func (w *writer) raw(s string) { w.buf = append(w.buf, s...) }

// nilBody reports a typed nil body (a nil *ActorSend in Record.Body, say).
func (w *writer) nilBody(isNil bool) bool {
	if isNil {
		w.fail(ClassInvalidField, "", "nil body")
	}
	return isNil
}

func (w *writer) nz(field string, v uint64) {
	if r := checkNonzero(v); r != "" {
		w.fail(ClassInvalidField, field, r)
	}
	w.u64(v)
}

// text appends a u8-length text of min..255 bytes (text8, optional-text8, packet name,
// content type, metadata key).
func (w *writer) text8(field, s string, min int) {
	if r := checkText(s, min, 255); r != "" {
		w.fail(ClassInvalidField, field, r)
	}
	w.u8(byte(len(s)))
	w.raw(s)
}

// rid appends a rid: 1..255 opaque bytes.
func (w *writer) rid(field, s string) {
	switch {
	case len(s) == 0:
		w.fail(ClassInvalidField, field, reasonEmpty)
	case len(s) > 255:
		w.fail(ClassInvalidField, field, reasonTooLong)
	}
	w.u8(byte(len(s)))
	w.raw(s)
}

// text16 appends a u16-length text of min..max bytes.
func (w *writer) text16(field, s string, min, max int) {
	if r := checkText(s, min, max); r != "" {
		w.fail(ClassInvalidField, field, r)
	}
	w.u16(uint16(len(s)))
	w.raw(s)
}

// checkText returns why s is not min..max bytes of UTF-8 without NUL, or "".
func checkText(s string, min, max int) string {
	switch {
	case len(s) < min:
		return reasonEmpty
	case len(s) > max:
		return reasonTooLong
	case plainPrefix(s) == len(s):
		return "" // ASCII without NUL: most text, checked a word at a time
	case strings.IndexByte(s, 0) >= 0:
		return reasonNUL
	case !utf8.ValidString(s):
		return reasonNotUTF8
	}
	return ""
}

// plainPrefix returns the length of the run of ASCII bytes other than NUL that s
// starts with, eight bytes at a time. Every record carries a few short text fields
// (actor id, packet name, content type), checked on encode and on decode: byte by
// byte, and with two passes on encode (NUL, then UTF-8), that was a quarter of a
// record's encode.
func plainPrefix[T ~string | ~[]byte](s T) int {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// A top bit set (not ASCII), or a zero byte (w-ones borrows through it).
		if w&high != 0 || (w-ones)&^w&high != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			break
		}
	}
	return i
}

func (w *writer) actorRef(field string, a *ActorRef) {
	w.path.push(field)
	w.text8("actorId", a.ID, 1)
	w.nz("objectGeneration", a.Generation)
	w.path.pop()
}

func (w *writer) actorFence(field string, f *ActorRouteFence) {
	w.path.push(field)
	w.actorRef("actor", &f.Actor)
	w.rid("targetNodeRid", f.TargetNodeRID)
	w.nz("targetNodeGeneration", f.TargetNodeGeneration)
	w.nz("expectedAuthorityOwnerGeneration", f.ExpectedAuthorityOwnerGeneration)
	w.nz("expectedOwnerLeaseGeneration", f.ExpectedOwnerLeaseGeneration)
	w.path.pop()
}

// sessionFence appends the six session fields; gen names the last one as the schema does.
func (w *writer) sessionFence(field, gen string, s *SessionFence) {
	w.path.push(field)
	w.rid("sessionOwnerNodeRid", s.OwnerNodeRID)
	w.nz("sessionOwnerNodeGeneration", s.OwnerNodeGeneration)
	w.text8("sessionOwnerId", s.OwnerID, 1)
	w.nz("sessionOwnerLeaseGeneration", s.OwnerLeaseGeneration)
	w.rid("sessionRid", s.SessionRID)
	w.nz(gen, s.BindingGeneration)
	w.path.pop()
}

func (w *writer) relocationID(r RelocationID) {
	if r.High == 0 && r.Low == 0 {
		w.fail(ClassInvalidField, "relocation", "relocation id is zero")
	}
	w.u64(r.High)
	w.u64(r.Low)
}

func (w *writer) coordinator(c *CoordinatorFence) {
	w.path.push("coordinator")
	w.text8("coordinatorOwnerId", c.OwnerID, 1)
	w.nz("coordinatorLeaseGeneration", c.LeaseGeneration)
	w.rid("coordinatorNodeRid", c.NodeRID)
	w.nz("coordinatorNodeGeneration", c.NodeGeneration)
	w.text16("expectedAuthorityStoreVersion", c.ExpectedAuthorityStoreVersion, 1, MaxStoreVersion)
	w.path.pop()
}

// union writes a conditional-union head (u8 discriminator, u16 length placeholder) and
// returns where the case starts; endUnion patches the length.
func (w *writer) union(disc byte) int {
	w.u8(disc)
	w.u16(0)
	return len(w.buf)
}

func (w *writer) endUnion(caseStart int) {
	binary.BigEndian.PutUint16(w.buf[caseStart-2:], uint16(len(w.buf)-caseStart))
}

func (w *writer) metadata(md Metadata) {
	start := len(w.buf)
	w.path.push("metadata")
	defer w.path.pop()
	if len(md) > 255 {
		w.fail(ClassInvalidField, "count", "more than 255 entries")
		return
	}
	w.u8(1)
	w.u8(byte(len(md)))
	for i := range md {
		w.text8("key", md[i].Key, 1)
		w.text16("value", md[i].Value, 0, MaxMetadataValue)
		for j := range i {
			if md[j].Key == md[i].Key {
				w.fail(ClassInvalidField, "key", "duplicate key "+strconv.Quote(md[i].Key))
			}
		}
	}
	if len(w.buf)-start > MaxMetadataFrame {
		w.fail(ClassInvalidField, "", "metadata frame over 1024 bytes")
	}
}

func (w *writer) payload(p *Payload) {
	w.path.push("payload")
	defer w.path.pop()
	if uint64(len(p.Data)) > MaxPayloadData { // uint64: the bound does not fit a 32-bit int
		w.fail(ClassInvalidField, "payload", "over 4294966774 bytes")
		return
	}
	w.u8(1)
	w.u32(0)
	bodyStart := len(w.buf)
	w.text8("packetName", p.PacketName, 1)
	w.text8("contentType", p.ContentType, 1)
	w.u32(uint32(len(p.Data)))
	w.buf = append(w.buf, p.Data...)
	binary.BigEndian.PutUint32(w.buf[bodyStart-4:], uint32(len(w.buf)-bodyStart))
}

func (b *Reply) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.nz("correlation", b.Correlation)
	if field, reason := checkTerminal(b.Result, b.Failure); field != "" {
		w.fail(ClassInvalidField, field, reason)
	}
	w.u32(uint32(b.Result))
	w.u32(uint32(b.Failure))
	if b.BindOK != nil {
		if b.Result != ResultOK {
			w.fail(ClassInvalidField, "tail", "a bind tail needs terminal result ok")
		}
		w.path.push("tail")
		w.nz("bindingGeneration", b.BindOK.BindingGeneration)
		w.nz("authorityOwnerGeneration", b.BindOK.AuthorityOwnerGeneration)
		w.path.pop()
	}
}

func (b *ActorSend) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.u64(b.Operation.High)
	w.u64(b.Operation.Low)
	if b.HopCount > MaxHopCount {
		w.fail(ClassInvalidField, "messageFollowHopCount", "above 8")
	}
	w.u8(b.HopCount)
	w.path.push("sourceActor")
	w.text8("actorId", b.SourceActor.ID, 0)
	if b.SourceActor.ID != "" {
		w.nz("generation", b.SourceActor.Generation)
	} else if b.SourceActor.Generation != 0 {
		w.fail(ClassInvalidField, "generation", "generation without an actor id")
	}
	w.path.pop()
	w.actorFence("targetActor", &b.TargetActor)
	if t := b.BoundSession; t != nil {
		w.path.push("boundSessionTail")
		w.rid("sourceSessionRid", t.SourceSessionRID)
		w.nz("sourceBindingGeneration", t.SourceBindingGeneration)
		w.nz("sourceSessionSequence", t.SourceSessionSequence)
		w.path.pop()
	}
}

func (b *BoundSessionSend) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.actorFence("actor", &b.Actor)
	w.nz("expectedBindingGeneration", b.ExpectedBindingGeneration)
}

func (b *BoundSessionBind) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.nz("correlation", b.Correlation)
	w.actorFence("actor", &b.Actor)
	w.rid("sessionRid", b.SessionRID)
	w.path.push("binding")
	switch b.Binding.State {
	case BindingActive, BindingTombstone:
	default:
		w.fail(ClassInvalidField, "bindingState", "not active (1) or tombstone (2)")
	}
	cs := w.union(byte(b.Binding.State))
	if b.Binding.State == BindingTombstone {
		w.nz("retiredBindingGeneration", b.Binding.Generation)
	} else {
		w.nz("bindingGeneration", b.Binding.Generation)
	}
	w.endUnion(cs)
	w.path.pop()
}

func (b *SessionRelocationSeal) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.relocationID(b.Relocation)
	w.coordinator(&b.Coordinator)
	if b.SenderRole != RoleSource {
		w.fail(ClassInvalidField, "senderRole", "sessionRelocationSeal is sent by the source only")
	}
	w.u8(byte(b.SenderRole))
	w.actorFence("actor", &b.Actor)
	w.sessionFence("", "bindingGeneration", &b.Session)
}

func (b *SessionRelocationSealed) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.relocationID(b.Relocation)
	w.coordinator(&b.Coordinator)
	w.actorFence("actor", &b.Actor)
	w.sessionFence("", "bindingGeneration", &b.Session)
}

func (b *SessionRelocationRoute) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.relocationID(b.Relocation)
	w.coordinator(&b.Coordinator)
	w.u8(byte(b.SenderRole))
	w.actorRef("actor", &b.Actor)
	w.sessionFence("", "bindingGeneration", &b.Session)
	c, a := b.Route.Commit, b.Route.Abort
	switch {
	case c != nil && a == nil && b.SenderRole != RoleTarget:
		w.fail(ClassInvalidField, "senderRole", "a commit is sent by the target only")
	case a != nil && c == nil && b.SenderRole != RoleSource:
		w.fail(ClassInvalidField, "senderRole", "an abort is sent by the source only")
	}
	w.path.push("route")
	switch {
	case (c == nil) == (a == nil):
		w.fail(ClassInvalidField, "action", "exactly one of commit and abort must be set")
	case c != nil:
		if c.TargetAuthorityOwnerGeneration <= c.PreviousAuthorityOwnerGeneration {
			w.fail(ClassInvalidField, "targetAuthorityOwnerGeneration", "not above previousAuthorityOwnerGeneration")
		}
		cs := w.union(actionCommit)
		w.nz("previousAuthorityOwnerGeneration", c.PreviousAuthorityOwnerGeneration)
		w.nz("targetAuthorityOwnerGeneration", c.TargetAuthorityOwnerGeneration)
		w.rid("targetNodeRid", c.TargetNodeRID)
		w.nz("targetNodeGeneration", c.TargetNodeGeneration)
		w.nz("targetOwnerLeaseGeneration", c.TargetOwnerLeaseGeneration)
		w.endUnion(cs)
	default:
		cs := w.union(actionAbort)
		w.nz("currentAuthorityOwnerGeneration", a.CurrentAuthorityOwnerGeneration)
		w.endUnion(cs)
	}
	w.path.pop()
}

func (b *BoundSessionReplaced) appendBody(w *writer) {
	if w.nilBody(b == nil) {
		return
	}
	w.actorFence("actorAuthority", &b.ActorAuthority)
	w.sessionFence("retiredSession", "retiredBindingGeneration", &b.RetiredSession)
}
