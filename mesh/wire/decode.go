package wire

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decode decodes one record from its frames (the transport's routing identity frame, if
// any, must already be stripped) and checks every rule of the service wire for it: head,
// allowed flags, frame count, every field's type and range, union lengths, trailing bytes
// and the metadata and payload frames. The first violation is returned as an *Error.
//
// Checks run in this order, which decides the class when several rules are broken: head
// (length, magic, major, command, flags), frame count, frame 0 body, metadata frame,
// payload frame. Payload.Data aliases the last frame; every string is a copy.
func Decode(frames [][]byte) (*Record, error) { return decode(frames, nil) }

// Decoder decodes records one after another, as Decode does, but gives a record the
// strings of the record before it where their bytes are the same: the records of one
// stream (an Actor's messages to another, a session's relays to its Actor) repeat
// their identities, packet name and content type, and a comparison costs less than a
// copy. A record whose whole text (frame 0, metadata frame, packet name and content
// type) is the previous one's takes its strings at once; otherwise, when the record
// has no metadata frame, it is decoded comparing each text field with the previous
// record's field in the same place, and only if every one matches does it need no
// copy (else it is decoded again, as Decode does, and the Decoder stops comparing
// field by field for a few records). Records never share a string whose bytes
// differ. The zero value is ready; a Decoder is not safe for concurrent use.
type Decoder struct {
	text    string    // the previous record's whole text
	share   textShare // its text fields, in decode order, and the state of a decode
	backoff int       // records to decode without comparing field by field
	// seen: a record was decoded before. The first record's text fields are not
	// collected one by one (a Decoder often decodes one record only: a run of one),
	// so the second record can take the first's strings only whole.
	seen bool
}

// fieldBackoff is how many records a Decoder decodes without comparing field by field
// after a record whose fields did not all match.
const fieldBackoff = 8

// textShare is the field-by-field state of a Decoder's decode.
type textShare struct {
	prev, cur []string // the previous record's text fields; this record's (collecting)
	try       bool     // comparing: a field takes prev's string or marks a miss
	k         int      // the next field's index
	miss      bool
}

// Decode decodes one record (see the package function Decode).
func (d *Decoder) Decode(frames [][]byte) (*Record, error) { return decode(frames, d) }

// Reset forgets the records decoded so far (a pooled Decoder keeps no string of
// theirs alive) and keeps its buffers.
func (d *Decoder) Reset() {
	clear(d.share.prev[:cap(d.share.prev)])
	clear(d.share.cur[:cap(d.share.cur)])
	d.text, d.share.prev, d.share.cur, d.backoff, d.seen = "", d.share.prev[:0], d.share.cur[:0], 0, false
	d.share.start(false)
}

func decode(frames [][]byte, d *Decoder) (*Record, error) {
	if len(frames) == 0 {
		return nil, &Error{Class: ClassFrameCount, Field: "head", Reason: "no frames", Offset: -1}
	}
	f0 := frames[0]
	if len(f0) < HeadSize {
		return nil, &Error{Class: ClassTruncatedField, Field: "head", Reason: "shorter than 5 bytes", Offset: 0}
	}
	mine := f0[0] == MeshnodeMagic0 && f0[1] == MeshnodeMagic1
	if (f0[0] != Magic0 || f0[1] != Magic1) && !mine {
		return nil, &Error{Class: ClassInvalidMagic, Field: "magic", Offset: 0}
	}
	if f0[2] != Major {
		return nil, &Error{Class: ClassInvalidMajor, Field: "major", Reason: "wire major " + strconv.Itoa(int(f0[2])), Offset: 2}
	}
	cmd := Command(f0[3])
	sp, ok := specOf(cmd)
	if !ok || mine != meshnodeCommand(cmd) {
		// A command id counts only under the magic of its family.
		return nil, &Error{Class: ClassUnknownCommand, Command: cmd, Field: "command", Offset: 3}
	}
	flags := f0[4]
	if bad := flags &^ sp.allowed; bad != 0 {
		return nil, &Error{Class: ClassForbiddenFlag, Command: cmd, Field: "flags",
			Reason: "flag 0x" + strconv.FormatUint(uint64(bad), 16) + " not allowed", Offset: 4}
	}
	if t := flags & tailFlags; t != 0 && t != tailFlags {
		return nil, &Error{Class: ClassForbiddenFlag, Command: cmd, Field: "flags",
			Reason: "boundSession (0x02) and sourceSpotId (0x04) must be set together", Offset: 4}
	}

	// Frame layout from the head: the payload of a reply is optional, so its presence is
	// whatever frame count remains.
	mdIdx, plIdx, want := -1, -1, 1
	if flags&FlagMetadata != 0 {
		mdIdx, want = want, want+1
	}
	if sp.payload == payloadRequired || (sp.payload == payloadOptional && len(frames) > want) {
		plIdx, want = want, want+1
	}
	if len(frames) != want {
		e := &Error{Class: ClassFrameCount, Command: cmd, Frame: want, Offset: -1,
			Reason: strconv.Itoa(len(frames)) + " frames, the head implies " + strconv.Itoa(want)}
		if len(frames) < want {
			e.Frame = len(frames)
		}
		return nil, e
	}

	// One string holds every text field: frame 0, the metadata frame and the payload head
	// (packet name and content type). Field strings are substrings of it.
	var md, ph []byte
	if mdIdx >= 0 && len(frames[mdIdx]) <= MaxMetadataFrame {
		md = frames[mdIdx]
	}
	if plIdx >= 0 {
		ph = payloadHead(frames[plIdx])
	}
	var sh *textShare
	if d != nil {
		sh = &d.share
		if sameText(d.text, f0, md, ph) {
			return decodeBody(frames, d.text, len(md), cmd, flags, mdIdx, plIdx, nil)
		}
		if mdIdx < 0 && len(sh.prev) > 0 && d.backoff == 0 {
			sh.start(true)
			if rec, err := decodeBody(frames, "", 0, cmd, flags, mdIdx, plIdx, sh); err == nil && !sh.miss {
				return rec, nil
			}
			d.backoff = fieldBackoff
		} else if d.backoff > 0 {
			d.backoff--
		}
		sh.start(false)
	}
	var sb strings.Builder
	sb.Grow(len(f0) + len(md) + len(ph))
	sb.Write(f0)
	sb.Write(md)
	sb.Write(ph)
	all := sb.String()
	collect := sh
	if d != nil && !d.seen {
		collect = nil
	}
	rec, err := decodeBody(frames, all, len(md), cmd, flags, mdIdx, plIdx, collect)
	if d != nil {
		d.seen = true
		switch {
		case err != nil:
			d.text, sh.prev = "", sh.prev[:0]
		case collect == nil:
			d.text, sh.prev = all, sh.prev[:0]
		default:
			d.text = all
			sh.prev, sh.cur = sh.cur, sh.prev[:0]
		}
	}
	return rec, err
}

// start readies a decode: comparing (try) or collecting this record's fields.
func (sh *textShare) start(try bool) {
	sh.try, sh.k, sh.miss = try, 0, false
	sh.cur = sh.cur[:0]
}

// decodeBody decodes frame 0's body and the metadata and payload frames of a record
// whose head decode checked. all holds the record's text (frame 0, mdLen bytes of
// metadata frame, payload head): the decoded strings are substrings of it. sh, when
// not nil, compares fields with the previous record's (all is then empty) or collects
// them.
func decodeBody(frames [][]byte, all string, mdLen int, cmd Command, flags byte, mdIdx, plIdx int, sh *textShare) (*Record, error) {
	f0 := frames[0]
	var s0 string
	if all != "" {
		s0 = all[:len(f0)]
	}
	r := reader{b: f0, s: s0, off: HeadSize, end: len(f0), cmd: cmd, share: sh}
	// One allocation per record: a block holding the Record, its body and every optional
	// part the body or record may point to (bind tail, bound-session tail, route case,
	// payload). Unused parts cost a few bytes; separate allocations would cost more.
	var rec *Record
	var pl *Payload
	switch cmd {
	case CmdReply:
		blk := new(struct {
			rec  Record
			body Reply
			ok   BindOK
			pl   Payload
		})
		blk.body.decode(&r, &blk.ok)
		rec, pl, blk.rec.Body = &blk.rec, &blk.pl, &blk.body
	case CmdActorSend:
		blk := new(struct {
			rec  Record
			body ActorSend
			tail BoundSessionTail
			pl   Payload
		})
		if flags&tailFlags != 0 {
			blk.body.BoundSession = &blk.tail
		}
		blk.body.decode(&r)
		rec, pl, blk.rec.Body = &blk.rec, &blk.pl, &blk.body
	case CmdBoundSessionSend:
		blk := new(struct {
			rec  Record
			body BoundSessionSend
			pl   Payload
		})
		blk.body.decode(&r)
		rec, pl, blk.rec.Body = &blk.rec, &blk.pl, &blk.body
	case CmdBoundSessionBind:
		blk := new(struct {
			rec  Record
			body BoundSessionBind
		})
		blk.body.decode(&r)
		rec, blk.rec.Body = &blk.rec, &blk.body
	case CmdSessionRelocationSeal:
		blk := new(struct {
			rec  Record
			body SessionRelocationSeal
		})
		blk.body.decode(&r)
		rec, blk.rec.Body = &blk.rec, &blk.body
	case CmdSessionRelocationSealed:
		blk := new(struct {
			rec  Record
			body SessionRelocationSealed
		})
		blk.body.decode(&r)
		rec, blk.rec.Body = &blk.rec, &blk.body
	case CmdSessionRelocationRoute:
		blk := new(struct {
			rec    Record
			body   SessionRelocationRoute
			commit RouteCommit
			abort  RouteAbort
		})
		blk.body.decode(&r, &blk.commit, &blk.abort)
		rec, blk.rec.Body = &blk.rec, &blk.body
	case CmdBoundSessionReplaced:
		blk := new(struct {
			rec  Record
			body BoundSessionReplaced
		})
		blk.body.decode(&r)
		rec, blk.rec.Body = &blk.rec, &blk.body
	case CmdTopicPublish:
		blk := new(struct {
			rec  Record
			body TopicPublish
			pl   Payload
		})
		blk.body.decode(&r)
		rec, pl, blk.rec.Body = &blk.rec, &blk.pl, &blk.body
	case CmdTopicInterest:
		blk := new(struct {
			rec  Record
			body TopicInterest
		})
		blk.body.decode(&r)
		rec, blk.rec.Body = &blk.rec, &blk.body
	case CmdTopicInterestAck:
		blk := new(struct {
			rec  Record
			body TopicInterestAck
		})
		blk.body.decode(&r)
		rec, blk.rec.Body = &blk.rec, &blk.body
	}
	r.finish()
	if r.err != nil {
		return nil, r.err
	}
	if rp, ok := rec.Body.(*Reply); ok && plIdx >= 0 && rp.Result != ResultOK {
		return nil, &Error{Class: ClassFrameCount, Command: cmd, Field: "payload", Frame: plIdx, Offset: -1,
			Reason: "only an ok reply may carry a payload"}
	}

	if mdIdx >= 0 {
		m, err := decodeMetadata(frames[mdIdx], all[len(f0):len(f0)+mdLen], cmd, mdIdx)
		if err != nil {
			return nil, err
		}
		rec.Metadata = m
	}
	if plIdx >= 0 {
		var ps string
		if all != "" {
			ps = all[len(f0)+mdLen:]
		}
		if err := decodePayload(frames[plIdx], ps, cmd, plIdx, pl, sh); err != nil {
			return nil, err
		}
		rec.Payload = pl
	}
	return rec, nil
}

// sameText reports whether s is exactly a, b and c one after the other.
func sameText(s string, a, b, c []byte) bool {
	return len(s) == len(a)+len(b)+len(c) && s[:len(a)] == string(a) &&
		s[len(a):len(a)+len(b)] == string(b) && s[len(a)+len(b):] == string(c)
}

// payloadHeadAt is where a payload frame's texts start, after its version and u32 body
// length.
const payloadHeadAt = 5

// payloadHead returns the part of a payload frame that holds the packet name and content
// type (both u8-length texts), as far as the frame has it. It leaves out the version and
// body length before them, so that records whose payloads differ in size still have the
// same text (Decoder).
func payloadHead(f []byte) []byte {
	if len(f) <= payloadHeadAt {
		return nil
	}
	n := payloadHeadAt
	for range 2 {
		if n >= len(f) {
			return f[payloadHeadAt:]
		}
		n += 1 + int(f[n])
	}
	return f[payloadHeadAt:min(n, len(f))]
}

// reader walks one frame. Errors are sticky: after the first, every read returns zero
// values and the first error is what Decode reports.
type reader struct {
	b      []byte // the frame
	s      string // a copy of (a part of) b from sbase on: text fields are substrings of it
	sbase  int    // the offset in b where s starts
	share  *textShare
	off    int
	end    int // end of the current window: len(b), or the end of a union/envelope case
	window int // nesting depth of length-delimited windows
	frame  int
	cmd    Command
	path   path
	err    *Error
}

func (r *reader) failAt(off int, class ErrorClass, field, reason string) {
	if r.err == nil {
		r.err = &Error{Class: class, Command: r.cmd, Field: r.path.join(field), Reason: reason, Frame: r.frame, Offset: off}
	}
}

// need reports whether n more bytes are available for the field starting at start. Past
// the frame it is truncated-field; past a union or envelope case it is invalid-field,
// because then the case's declared length, not the frame, is what disagrees.
func (r *reader) need(start, n int, field string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > r.end-r.off { // n < 0: a u32 length that overflowed a 32-bit int
		if r.window > 0 {
			r.failAt(start, ClassInvalidField, field, reasonCaseLength)
		} else {
			r.failAt(start, ClassTruncatedField, field, "runs past the end of the frame")
		}
		return false
	}
	return true
}

func (r *reader) u8(field string) byte {
	if !r.need(r.off, 1, field) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16(field string) uint16 {
	if !r.need(r.off, 2, field) {
		return 0
	}
	v := binary.BigEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32(field string) uint32 {
	if !r.need(r.off, 4, field) {
		return 0
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64(field string) uint64 {
	if !r.need(r.off, 8, field) {
		return 0
	}
	v := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) nz(field string) uint64 {
	start := r.off
	v := r.u64(field)
	if r.err == nil {
		if reason := checkNonzero(v); reason != "" {
			r.failAt(start, ClassInvalidField, field, reason)
		}
	}
	return v
}

// str reads the n content bytes of a length-prefixed field whose length started at
// start, validating them as text when text is set.
func (r *reader) str(start, n int, field string, text bool) string {
	if !r.need(start, n, field) {
		return ""
	}
	b := r.b[r.off : r.off+n]
	if text {
		if reason := checkTextBytes(b); reason != "" {
			r.failAt(start, ClassInvalidField, field, reason)
			return ""
		}
	}
	if sh := r.share; sh != nil && sh.try {
		k := sh.k
		sh.k++
		r.off += n
		if k < len(sh.prev) && sh.prev[k] == string(b) {
			return sh.prev[k]
		}
		sh.miss = true // the record is decoded again, with its own copy
		return ""
	}
	var s string
	if at := r.off - r.sbase; at >= 0 && at+n <= len(r.s) {
		s = r.s[at : at+n]
	} else {
		s = string(b) // not reached for well-formed frames; keeps str total
	}
	r.off += n
	if r.share != nil {
		r.share.cur = append(r.share.cur, s)
	}
	return s
}

// text8 reads a u8-length text of min..255 bytes.
func (r *reader) text8(field string, min int) string {
	start := r.off
	n := int(r.u8(field))
	if r.err == nil && n < min {
		r.failAt(start, ClassInvalidField, field, reasonEmpty)
	}
	return r.str(start, n, field, true)
}

// rid reads a u8-length opaque RID of 1..255 bytes.
func (r *reader) rid(field string) string {
	start := r.off
	n := int(r.u8(field))
	if r.err == nil && n == 0 {
		r.failAt(start, ClassInvalidField, field, reasonEmpty)
	}
	return r.str(start, n, field, false)
}

// text16 reads a u16-length text of min..max bytes.
func (r *reader) text16(field string, min, max int) string {
	start := r.off
	n := int(r.u16(field))
	if r.err == nil {
		switch {
		case n < min:
			r.failAt(start, ClassInvalidField, field, reasonEmpty)
		case n > max:
			r.failAt(start, ClassInvalidField, field, reasonTooLong)
		}
	}
	return r.str(start, n, field, true)
}

// checkTextBytes returns why b is not UTF-8 without NUL, or "". Most text is ASCII, so the
// loop only hands over to utf8.Valid at the first non-ASCII byte.
func checkTextBytes(b []byte) string {
	p := plainPrefix(b)
	if p == len(b) {
		return ""
	}
	for i, c := range b[p:] {
		i += p
		if c == 0 {
			return reasonNUL
		}
		if c >= utf8.RuneSelf {
			rest := b[i:]
			if !utf8.Valid(rest) {
				return reasonNotUTF8
			}
			for _, c := range rest {
				if c == 0 {
					return reasonNUL
				}
			}
			return ""
		}
	}
	return ""
}

// openCase enters a length-delimited case of n bytes whose length field started at start.
// A length past the frame (or the enclosing case) is truncated-field.
func (r *reader) openCase(start, n int, field string) (saved int, ok bool) {
	if r.err != nil {
		return 0, false
	}
	if n < 0 || n > r.end-r.off {
		if r.window > 0 {
			r.failAt(start, ClassInvalidField, field, reasonCaseLength)
		} else {
			r.failAt(start, ClassTruncatedField, field, "declared length runs past the end of the frame")
		}
		return 0, false
	}
	saved, r.end = r.end, r.off+n
	r.window++
	return saved, true
}

// closeCase leaves a case: bytes of it left unread mean its declared length does not
// match its fields.
func (r *reader) closeCase(start, saved int, field string) {
	if r.err == nil && r.off != r.end {
		r.failAt(start, ClassInvalidField, field, reasonCaseLength)
	}
	r.end = saved
	r.window--
}

// finish reports bytes after the last field of the frame.
func (r *reader) finish() {
	if r.err == nil && r.off != len(r.b) {
		r.failAt(r.off, ClassTrailingByte, "", strconv.Itoa(len(r.b)-r.off)+" bytes after the last field")
	}
}

func (r *reader) actorRef(field string, a *ActorRef) {
	r.path.push(field)
	a.ID = r.text8("actorId", 1)
	a.Generation = r.nz("objectGeneration")
	r.path.pop()
}

func (r *reader) actorFence(field string, f *ActorRouteFence) {
	r.path.push(field)
	r.actorRef("actor", &f.Actor)
	f.TargetNodeRID = r.rid("targetNodeRid")
	f.TargetNodeGeneration = r.nz("targetNodeGeneration")
	f.ExpectedAuthorityOwnerGeneration = r.nz("expectedAuthorityOwnerGeneration")
	f.ExpectedOwnerLeaseGeneration = r.nz("expectedOwnerLeaseGeneration")
	r.path.pop()
}

func (r *reader) sessionFence(field, gen string, s *SessionFence) {
	r.path.push(field)
	s.OwnerNodeRID = r.rid("sessionOwnerNodeRid")
	s.OwnerNodeGeneration = r.nz("sessionOwnerNodeGeneration")
	s.OwnerID = r.text8("sessionOwnerId", 1)
	s.OwnerLeaseGeneration = r.nz("sessionOwnerLeaseGeneration")
	s.SessionRID = r.rid("sessionRid")
	s.BindingGeneration = r.nz(gen)
	r.path.pop()
}

func (r *reader) relocationID(id *RelocationID) {
	start := r.off
	id.High = r.u64("relocation.high")
	id.Low = r.u64("relocation.low")
	if r.err == nil && id.High == 0 && id.Low == 0 {
		r.failAt(start, ClassInvalidField, "relocation", "relocation id is zero")
	}
}

func (r *reader) coordinator(c *CoordinatorFence) {
	r.path.push("coordinator")
	c.OwnerID = r.text8("coordinatorOwnerId", 1)
	c.LeaseGeneration = r.nz("coordinatorLeaseGeneration")
	c.NodeRID = r.rid("coordinatorNodeRid")
	c.NodeGeneration = r.nz("coordinatorNodeGeneration")
	c.ExpectedAuthorityStoreVersion = r.text16("expectedAuthorityStoreVersion", 1, MaxStoreVersion)
	r.path.pop()
}

func (b *Reply) decode(r *reader, ok *BindOK) {
	b.Correlation = r.nz("correlation")
	start := r.off
	b.Result = TerminalResult(r.u32("terminalResult"))
	b.Failure = FailureCode(r.u32("failureCode"))
	if r.err == nil {
		if field, reason := checkTerminal(b.Result, b.Failure); field != "" {
			if field == "failureCode" {
				start += 4
			}
			r.failAt(start, ClassInvalidField, field, reason)
			return
		}
	}
	// The tail is either empty or, for ok, exactly a streamBind tail; anything else is
	// left for finish to report as trailing bytes.
	if r.err == nil && b.Result == ResultOK && r.end-r.off == 16 {
		r.path.push("tail")
		ok.BindingGeneration = r.nz("bindingGeneration")
		ok.AuthorityOwnerGeneration = r.nz("authorityOwnerGeneration")
		r.path.pop()
		b.BindOK = ok
	}
}

func (b *ActorSend) decode(r *reader) {
	b.Operation.High = r.u64("operation.high")
	b.Operation.Low = r.u64("operation.low")
	start := r.off
	b.HopCount = r.u8("messageFollowHopCount")
	if r.err == nil && b.HopCount > MaxHopCount {
		r.failAt(start, ClassInvalidField, "messageFollowHopCount", "above 8")
	}
	r.path.push("sourceActor")
	b.SourceActor.ID = r.text8("actorId", 0)
	if b.SourceActor.ID != "" {
		b.SourceActor.Generation = r.nz("generation")
	}
	r.path.pop()
	r.actorFence("targetActor", &b.TargetActor)
	if t := b.BoundSession; t != nil {
		r.path.push("boundSessionTail")
		t.SourceSessionRID = r.rid("sourceSessionRid")
		t.SourceBindingGeneration = r.nz("sourceBindingGeneration")
		t.SourceSessionSequence = r.nz("sourceSessionSequence")
		r.path.pop()
	}
}

func (b *BoundSessionSend) decode(r *reader) {
	r.actorFence("actor", &b.Actor)
	b.ExpectedBindingGeneration = r.nz("expectedBindingGeneration")
}

func (b *BoundSessionBind) decode(r *reader) {
	b.Correlation = r.nz("correlation")
	r.actorFence("actor", &b.Actor)
	b.SessionRID = r.rid("sessionRid")
	r.path.push("binding")
	start := r.off
	b.Binding.State = BindingState(r.u8("bindingState"))
	lenAt := r.off
	n := int(r.u16("length"))
	if saved, ok := r.openCase(lenAt, n, "length"); ok {
		switch b.Binding.State {
		case BindingActive:
			b.Binding.Generation = r.nz("bindingGeneration")
		case BindingTombstone:
			b.Binding.Generation = r.nz("retiredBindingGeneration")
		default:
			r.failAt(start, ClassInvalidField, "bindingState", "not active (1) or tombstone (2)")
		}
		r.closeCase(lenAt, saved, "length")
	}
	r.path.pop()
}

func (b *SessionRelocationSeal) decode(r *reader) {
	r.relocationID(&b.Relocation)
	r.coordinator(&b.Coordinator)
	start := r.off
	b.SenderRole = RelocationRole(r.u8("senderRole"))
	if r.err == nil && b.SenderRole != RoleSource {
		r.failAt(start, ClassInvalidField, "senderRole", "sessionRelocationSeal is sent by the source only")
	}
	r.actorFence("actor", &b.Actor)
	r.sessionFence("", "bindingGeneration", &b.Session)
}

func (b *SessionRelocationSealed) decode(r *reader) {
	r.relocationID(&b.Relocation)
	r.coordinator(&b.Coordinator)
	r.actorFence("actor", &b.Actor)
	r.sessionFence("", "bindingGeneration", &b.Session)
}

func (b *SessionRelocationRoute) decode(r *reader, commit *RouteCommit, abort *RouteAbort) {
	r.relocationID(&b.Relocation)
	r.coordinator(&b.Coordinator)
	roleAt := r.off
	b.SenderRole = RelocationRole(r.u8("senderRole"))
	r.actorRef("actor", &b.Actor)
	r.sessionFence("", "bindingGeneration", &b.Session)
	r.path.push("route")
	actionAt := r.off
	action := r.u8("action")
	lenAt := r.off
	n := int(r.u16("length"))
	if saved, ok := r.openCase(lenAt, n, "length"); ok {
		switch action {
		case actionCommit:
			commit.PreviousAuthorityOwnerGeneration = r.nz("previousAuthorityOwnerGeneration")
			at := r.off
			commit.TargetAuthorityOwnerGeneration = r.nz("targetAuthorityOwnerGeneration")
			if r.err == nil && commit.TargetAuthorityOwnerGeneration <= commit.PreviousAuthorityOwnerGeneration {
				r.failAt(at, ClassInvalidField, "targetAuthorityOwnerGeneration", "not above previousAuthorityOwnerGeneration")
			}
			commit.TargetNodeRID = r.rid("targetNodeRid")
			commit.TargetNodeGeneration = r.nz("targetNodeGeneration")
			commit.TargetOwnerLeaseGeneration = r.nz("targetOwnerLeaseGeneration")
			b.Route.Commit = commit
		case actionAbort:
			abort.CurrentAuthorityOwnerGeneration = r.nz("currentAuthorityOwnerGeneration")
			b.Route.Abort = abort
		default:
			r.failAt(actionAt, ClassInvalidField, "action", "not commit (1) or abort (2)")
		}
		r.closeCase(lenAt, saved, "length")
	}
	r.path.pop()
	// The sender role is a body field, but which role is valid depends on the action.
	switch {
	case b.Route.Commit != nil && b.SenderRole != RoleTarget:
		r.failAt(roleAt, ClassInvalidField, "senderRole", "a commit is sent by the target only")
	case b.Route.Abort != nil && b.SenderRole != RoleSource:
		r.failAt(roleAt, ClassInvalidField, "senderRole", "an abort is sent by the source only")
	}
}

func (b *BoundSessionReplaced) decode(r *reader) {
	r.actorFence("actorAuthority", &b.ActorAuthority)
	r.sessionFence("retiredSession", "retiredBindingGeneration", &b.RetiredSession)
}

// decodeMetadata decodes a metadata frame; s is its string copy (empty when the frame is
// over the size limit, which is reported before any field is read).
func decodeMetadata(f []byte, s string, cmd Command, frame int) (Metadata, error) {
	r := reader{b: f, s: s, end: len(f), frame: frame, cmd: cmd}
	r.path.push("metadata")
	if len(f) > MaxMetadataFrame {
		r.failAt(0, ClassInvalidField, "", "metadata frame over 1024 bytes")
		return nil, r.err
	}
	if v := r.u8("version"); r.err == nil && v != 1 {
		r.failAt(0, ClassInvalidField, "version", "not 1")
	}
	count := int(r.u8("count"))
	if r.err != nil {
		return nil, r.err
	}
	// Every entry takes at least 4 bytes, so a count the frame cannot hold never
	// allocates more than the frame could describe.
	md := make(Metadata, 0, min(count, (len(f)-2)/4))
	for range count {
		start := r.off
		k := r.text8("key", 1)
		v := r.text16("value", 0, MaxMetadataValue)
		if r.err != nil {
			return nil, r.err
		}
		for j := range md {
			if md[j].Key == k {
				r.failAt(start, ClassInvalidField, "key", "duplicate key "+strconv.Quote(k))
				return nil, r.err
			}
		}
		md = append(md, MetadataEntry{Key: k, Value: v})
	}
	r.finish()
	if r.err != nil {
		return nil, r.err
	}
	return md, nil
}

// decodePayload decodes application-payload-envelope-v1 into p; s is the string copy of
// the frame's head (packet name and content type).
func decodePayload(f []byte, s string, cmd Command, frame int, p *Payload, sh *textShare) error {
	r := reader{b: f, s: s, sbase: payloadHeadAt, end: len(f), frame: frame, cmd: cmd, share: sh}
	r.path.push("payload")
	if v := r.u8("version"); r.err == nil && v != 1 {
		r.failAt(0, ClassInvalidField, "version", "not 1")
	}
	lenAt := r.off
	n := r.u32("length")
	saved, ok := r.openCase(lenAt, int(n), "length")
	if !ok {
		return r.err
	}
	p.PacketName = r.text8("packetName", 1)
	p.ContentType = r.text8("contentType", 1)
	dataAt := r.off
	dn := r.u32("payload")
	if r.err == nil && dn > MaxPayloadData {
		r.failAt(dataAt, ClassInvalidField, "payload", "over 4294966774 bytes")
	}
	if r.need(dataAt, int(dn), "payload") && dn > 0 {
		p.Data = f[r.off : r.off+int(dn) : r.off+int(dn)]
		r.off += int(dn)
	}
	r.closeCase(lenAt, saved, "length")
	r.finish()
	return errOrNil(r.err)
}

// errOrNil keeps a nil *Error from becoming a non-nil error interface.
func errOrNil(e *Error) error {
	if e == nil {
		return nil
	}
	return e
}
