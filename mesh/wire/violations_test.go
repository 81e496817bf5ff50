package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// decodeCase is one malformed input and the class Decode must report.
type decodeCase struct {
	name  string
	in    func(t testing.TB) [][]byte
	want  ErrorClass
	field string // when set, the reported Field
}

// corrupt encodes rec and lets mutate change frame i.
func corrupt(rec func() *Record, i int, mutate func(t testing.TB, f []byte) []byte) func(t testing.TB) [][]byte {
	return func(t testing.TB) [][]byte {
		frames := cloneFrames(mustEncode(t, rec()))
		frames[i] = mutate(t, frames[i])
		return frames
	}
}

// swap replaces the one occurrence of old with new in the frame.
func swap(old, new []byte) func(t testing.TB, f []byte) []byte {
	return func(t testing.TB, f []byte) []byte { return replaceOnce(t, f, old, new) }
}

// afterText returns the offset just past the first occurrence of text s in f.
func afterText(t testing.TB, f []byte, s string) int {
	i := bytes.Index(f, []byte(s))
	if i < 0 {
		t.Fatalf("%q not in frame", s)
	}
	return i + len(s)
}

func setByte(off func(t testing.TB, f []byte) int, v byte) func(t testing.TB, f []byte) []byte {
	return func(t testing.TB, f []byte) []byte { f[off(t, f)] = v; return f }
}

func at(n int) func(testing.TB, []byte) int { return func(testing.TB, []byte) int { return n } }

func appendByte(t testing.TB, f []byte) []byte { return append(f, 0) }

func frames(fs ...[]byte) func(testing.TB) [][]byte {
	return func(testing.TB) [][]byte { return fs }
}

// reply builds a frame-0 reply by hand (the encoder refuses the invalid ones).
func replyFrame(corr uint64, result, failure uint32, tail ...byte) []byte {
	f := []byte{Magic0, Magic1, Major, byte(CmdReply), 0}
	f = binary.BigEndian.AppendUint64(f, corr)
	f = binary.BigEndian.AppendUint32(f, result)
	f = binary.BigEndian.AppendUint32(f, failure)
	return append(f, tail...)
}

func withMetadata(md Metadata) func() *Record {
	return func() *Record { r := actorSendTail(4); r.Metadata = md; return r }
}

// rawMetadata builds a metadata frame by hand.
func rawMetadata(version, count byte, entries ...string) []byte {
	f := []byte{version, count}
	for i := 0; i+1 < len(entries); i += 2 {
		f = append(f, byte(len(entries[i])))
		f = append(f, entries[i]...)
		f = binary.BigEndian.AppendUint16(f, uint16(len(entries[i+1])))
		f = append(f, entries[i+1]...)
	}
	return f
}

func decodeCases() []decodeCase {
	send := func() *Record { return actorSendTail(4) }
	push := func() *Record { return boundSessionSend(4) }
	bind := func() *Record { return bindRecord(BindingActive) }
	srcActor := func() *Record {
		r := actorSendTail(4)
		r.Body.(*ActorSend).SourceActor = ActorRef{ID: "npc", Generation: markCorr}
		return r
	}
	mdRec := withMetadata(Metadata{{"trace", "abc"}, {"lang", "ko"}})
	head := func(cmd byte, flags byte) []byte { return []byte{Magic0, Magic1, Major, cmd, flags, 0, 0, 0, 0} }
	storeAt := func(t testing.TB, f []byte) int { return afterText(t, f, "store-v17") }
	// A 38's binding transition is the last 1+2+8 bytes of frame 0.
	bindLen := func(t testing.TB, f []byte) int { return len(f) - 9 } // low byte of the u16 length

	cases := []decodeCase{
		// Head.
		{"no frames", frames(), ClassFrameCount, ""},
		{"empty head", frames([]byte{}), ClassTruncatedField, "head"},
		{"4-byte head", frames([]byte("ZM\x01\x24")), ClassTruncatedField, "head"},
		{"magic byte 0", corrupt(send, 0, setByte(at(0), 0)), ClassInvalidMagic, "magic"},
		{"magic byte 1", corrupt(send, 0, setByte(at(1), 'm')), ClassInvalidMagic, "magic"},
		{"major 0", corrupt(send, 0, setByte(at(2), 0)), ClassInvalidMajor, "major"},
		{"major 2", corrupt(push, 0, setByte(at(2), 2)), ClassInvalidMajor, "major"},
		{"boundSession flag alone", corrupt(send, 0, setByte(at(4), FlagBoundSession)), ClassForbiddenFlag, "flags"},
		{"sourceSpotId flag alone", corrupt(send, 0, setByte(at(4), FlagSourceSpotID)), ClassForbiddenFlag, "flags"},
		{"sourceSpotId alone with metadata", corrupt(mdRec, 0, setByte(at(4), FlagMetadata|FlagSourceSpotID)), ClassForbiddenFlag, "flags"},
		{"extension on actorSend", corrupt(send, 0, setByte(at(4), tailFlags|FlagExtension)), ClassForbiddenFlag, "flags"},

		// Frame count.
		{"metadata frame without the flag", func(t testing.TB) [][]byte {
			fs := cloneFrames(mustEncode(t, mdRec()))
			fs[0][4] &^= FlagMetadata
			return fs
		}, ClassFrameCount, ""},
		{"metadata flag without the frame", func(t testing.TB) [][]byte {
			fs := cloneFrames(mustEncode(t, send()))
			fs[0][4] |= FlagMetadata
			return fs
		}, ClassFrameCount, ""},
		{"actorSend without payload", func(t testing.TB) [][]byte { return mustEncode(t, send())[:1] }, ClassFrameCount, ""},
		{"actorSend extra frame", func(t testing.TB) [][]byte { return append(mustEncode(t, send()), []byte{1}) }, ClassFrameCount, ""},
		{"boundSessionSend without payload", func(t testing.TB) [][]byte { return mustEncode(t, push())[:1] }, ClassFrameCount, ""},
		{"boundSessionSend extra frame", func(t testing.TB) [][]byte {
			fs := mustEncode(t, push())
			return [][]byte{fs[0], rawMetadata(1, 0), fs[1]}
		}, ClassFrameCount, ""},
		{"boundSessionBind with a payload frame", func(t testing.TB) [][]byte {
			return append(mustEncode(t, bind()), mustEncode(t, push())[1])
		}, ClassFrameCount, ""},
		{"replaced with a second frame", func(t testing.TB) [][]byte {
			return append(mustEncode(t, replacedRecord()), []byte{})
		}, ClassFrameCount, ""},
		{"reply with three frames", frames(replyFrame(1, 0, 0), []byte{1}, []byte{1}), ClassFrameCount, ""},
		{"failed reply with a payload", func(t testing.TB) [][]byte {
			return [][]byte{replyFrame(1, uint32(ResultNotFound), uint32(FailureActorSessionNotBound)), mustEncode(t, push())[1]}
		}, ClassFrameCount, "payload"},

		// Zero and out-of-range nonzero-u64.
		{"zero targetNodeGeneration", corrupt(send, 0, swap(u64be(markTargetGen), u64be(0))), ClassInvalidField, "targetActor.targetNodeGeneration"},
		{"targetNodeGeneration 2^63", corrupt(send, 0, swap(u64be(markTargetGen), u64be(1<<63))), ClassInvalidField, "targetActor.targetNodeGeneration"},
		{"zero sourceSessionSequence", corrupt(send, 0, swap(u64be(markSessSeq), u64be(0))), ClassInvalidField, "boundSessionTail.sourceSessionSequence"},
		{"zero expectedBindingGeneration", corrupt(push, 0, swap(u64be(markExpected), u64be(0))), ClassInvalidField, "expectedBindingGeneration"},
		{"bind correlation 2^64-1", corrupt(bind, 0, swap(u64be(markCorr), u64be(^uint64(0)))), ClassInvalidField, "correlation"},
		{"zero bindingGeneration", corrupt(bind, 0, swap(u64be(markExpected), u64be(0))), ClassInvalidField, "binding.bindingGeneration"},
		{"zero retiredBindingGeneration", corrupt(func() *Record { return bindRecord(BindingTombstone) }, 0,
			swap(u64be(markExpected), u64be(0))), ClassInvalidField, "binding.retiredBindingGeneration"},
		{"present sourceActor with zero generation", corrupt(srcActor, 0, swap(u64be(markCorr), u64be(0))), ClassInvalidField, "sourceActor.generation"},
		{"zero reply correlation", frames(replyFrame(0, 0, 0)), ClassInvalidField, "correlation"},
		{"zero bind tail generation", frames(replyFrame(1, 0, 0, append(u64be(0), u64be(1)...)...)), ClassInvalidField, "tail.bindingGeneration"},
		{"bind tail generation 2^63", frames(replyFrame(1, 0, 0, append(u64be(1), u64be(1<<63)...)...)), ClassInvalidField, "tail.authorityOwnerGeneration"},

		// Text and RIDs.
		{"empty actorId", corrupt(send, 0, swap([]byte("\x07room-17"), []byte{0})), ClassInvalidField, "targetActor.actor.actorId"},
		{"NUL in actorId", corrupt(send, 0, swap([]byte("\x07room-17"), []byte("\x07ro\x00m-17"))), ClassInvalidField, "targetActor.actor.actorId"},
		{"bad UTF-8 in actorId", corrupt(send, 0, swap([]byte("\x07room-17"), []byte("\x07ro\xffm-17"))), ClassInvalidField, "targetActor.actor.actorId"},
		{"truncated UTF-8 in actorId", corrupt(send, 0, swap([]byte("\x07room-17"), []byte("\x07room-1\xce"))), ClassInvalidField, "targetActor.actor.actorId"},
		{"empty targetNodeRid", corrupt(send, 0, swap([]byte("\x06node-b"), []byte{0})), ClassInvalidField, "targetActor.targetNodeRid"},
		{"empty sourceSessionRid", corrupt(send, 0, swap([]byte("\x09sess-0001"), []byte{0})), ClassInvalidField, "boundSessionTail.sourceSessionRid"},
		{"NUL in sessionOwnerId", corrupt(sealRecord, 0, swap([]byte("\x0dsession-owner"), []byte("\x0dsession\x00owner"))), ClassInvalidField, "sessionOwnerId"},
		{"empty coordinatorOwnerId", corrupt(sealRecord, 0, swap([]byte("\x0bcoordinator"), []byte{0})), ClassInvalidField, "coordinator.coordinatorOwnerId"},
		{"empty store version", corrupt(sealRecord, 0, swap([]byte("\x00\x09store-v17"), []byte{0, 0})), ClassInvalidField, "coordinator.expectedAuthorityStoreVersion"},
		{"store version 4097", corrupt(sealRecord, 0, swap([]byte("\x00\x09store-v17"), append([]byte{0x10, 0x01}, strings.Repeat("v", 4097)...))), ClassInvalidField, "coordinator.expectedAuthorityStoreVersion"},
		{"bad UTF-8 in store version", corrupt(sealRecord, 0, swap([]byte("store-v17"), []byte("store-v\xc0\xaf"))), ClassInvalidField, "coordinator.expectedAuthorityStoreVersion"},
		{"actorId past the frame", corrupt(send, 0, swap([]byte("\x07room-17"), []byte{0xff})), ClassTruncatedField, "targetActor.actor.actorId"},

		// Small enums and ranges.
		{"hop count 9", corrupt(send, 0, setByte(at(HeadSize+16), 9)), ClassInvalidField, "messageFollowHopCount"},
		{"hop count 255", corrupt(send, 0, setByte(at(HeadSize+16), 255)), ClassInvalidField, "messageFollowHopCount"},
		{"relocation id zero", corrupt(sealRecord, 0, func(t testing.TB, f []byte) []byte {
			clear(f[HeadSize : HeadSize+16])
			return f
		}), ClassInvalidField, "relocation"},
		{"seal from target", corrupt(sealRecord, 0, setByte(storeAt, byte(RoleTarget))), ClassInvalidField, "senderRole"},
		{"seal from coordinator", corrupt(sealRecord, 0, setByte(storeAt, byte(RoleCoordinator))), ClassInvalidField, "senderRole"},
		{"commit from source", corrupt(routeCommit, 0, setByte(storeAt, byte(RoleSource))), ClassInvalidField, "senderRole"},
		{"commit from coordinator", corrupt(routeCommit, 0, setByte(storeAt, byte(RoleCoordinator))), ClassInvalidField, "senderRole"},
		{"abort from target", corrupt(routeAbort, 0, setByte(storeAt, byte(RoleTarget))), ClassInvalidField, "senderRole"},
		{"commit target generation not above previous", corrupt(routeCommit, 0, swap(u64be(12), u64be(11))), ClassInvalidField, "route.targetAuthorityOwnerGeneration"},
		{"binding state 0", corrupt(bind, 0, setByte(func(t testing.TB, f []byte) int { return len(f) - 11 }, 0)), ClassInvalidField, "binding.bindingState"},
		{"binding state 3", corrupt(bind, 0, setByte(func(t testing.TB, f []byte) int { return len(f) - 11 }, 3)), ClassInvalidField, "binding.bindingState"},
		{"route action 3", corrupt(routeAbort, 0, setByte(func(t testing.TB, f []byte) int { return len(f) - 11 }, 3)), ClassInvalidField, "route.action"},

		// Union lengths.
		{"binding length 7", corrupt(bind, 0, setByte(bindLen, 7)), ClassInvalidField, "binding.bindingGeneration"},
		{"binding length 9 with a 9th byte", func(t testing.TB) [][]byte {
			fs := cloneFrames(mustEncode(t, bind()))
			fs[0][len(fs[0])-9] = 9
			fs[0] = append(fs[0], 0)
			return fs
		}, ClassInvalidField, "binding.length"},
		{"binding length past the frame", corrupt(bind, 0, setByte(bindLen, 9)), ClassTruncatedField, "binding.length"},
		{"binding length 0", corrupt(bind, 0, setByte(bindLen, 0)), ClassInvalidField, "binding.bindingGeneration"},
		{"abort length 9 with a 9th byte", func(t testing.TB) [][]byte {
			fs := cloneFrames(mustEncode(t, routeAbort()))
			fs[0][len(fs[0])-9] = 9
			fs[0] = append(fs[0], 0)
			return fs
		}, ClassInvalidField, "route.length"},
		{"commit length 40 past the frame", corrupt(routeCommit, 0, setByte(func(t testing.TB, f []byte) int { return len(f) - 40 }, 40)), ClassTruncatedField, "route.length"},
		{"abort with a byte after the case", corrupt(routeAbort, 0, appendByte), ClassTrailingByte, ""},

		// Reply result/failure pairs and tails.
		{"unknown terminal result", frames(replyFrame(1, 100, 0)), ClassInvalidField, "terminalResult"},
		{"unknown failure code 23", frames(replyFrame(1, uint32(ResultNotFound), 23)), ClassInvalidField, "failureCode"},
		{"unknown failure code 36", frames(replyFrame(1, uint32(ResultNotFound), 36)), ClassInvalidField, "failureCode"},
		{"ok with a failure code", frames(replyFrame(1, 0, uint32(FailureActorSessionNotBound))), ClassInvalidField, "failureCode"},
		{"typed result without a failure code", frames(replyFrame(1, uint32(ResultNotFound), 0)), ClassInvalidField, "failureCode"},
		{"failure code with the wrong result", frames(replyFrame(1, uint32(ResultRejected), uint32(FailureActorSessionNotBound))), ClassInvalidField, "failureCode"},
		{"boundary result with a failure code", frames(replyFrame(1, uint32(ResultTimedOut), uint32(FailureWorkerTimedOut))), ClassInvalidField, "failureCode"},
		{"bind tail on a failed reply", frames(replyFrame(1, uint32(ResultBusy), 0, append(u64be(1), u64be(1)...)...)), ClassTrailingByte, ""},
		{"8-byte reply tail", frames(replyFrame(1, 0, 0, u64be(1)...)), ClassTrailingByte, ""},
		{"17-byte reply tail", frames(replyFrame(1, 0, 0, append(append(u64be(1), u64be(1)...), 0)...)), ClassTrailingByte, ""},

		// Metadata frame.
		{"metadata version 2", corrupt(mdRec, 1, setByte(at(0), 2)), ClassInvalidField, "metadata.version"},
		{"metadata duplicate key exact", func(t testing.TB) [][]byte {
			fs := cloneFrames(mustEncode(t, mdRec()))
			fs[1] = rawMetadata(1, 2, "k", "1", "k", "2")
			return fs
		}, ClassInvalidField, "metadata.key"},
		{"metadata frame 1025 bytes", func(t testing.TB) [][]byte {
			fs := cloneFrames(mustEncode(t, mdRec()))
			fs[1] = rawMetadata(1, 1, "k", strings.Repeat("v", MaxMetadataFrame-6+1))
			return fs
		}, ClassInvalidField, "metadata"},
		{"metadata empty key", corrupt(mdRec, 1, swap([]byte("\x04lang\x00\x02ko"), []byte("\x00\x00\x02ko"))), ClassInvalidField, "metadata.key"},
		{"metadata NUL in value", corrupt(mdRec, 1, swap([]byte("ko"), []byte("k\x00"))), ClassInvalidField, "metadata.value"},
		{"metadata bad UTF-8 in key", corrupt(mdRec, 1, swap([]byte("lang"), []byte("la\xffg"))), ClassInvalidField, "metadata.key"},
		{"metadata count above entries", corrupt(mdRec, 1, setByte(at(1), 3)), ClassTruncatedField, "metadata.key"},
		{"metadata count below entries", corrupt(mdRec, 1, setByte(at(1), 1)), ClassTrailingByte, ""},
		{"metadata value past the frame", corrupt(mdRec, 1, swap([]byte("\x00\x02ko"), []byte("\x00\x03ko"))), ClassTruncatedField, "metadata.value"},
		{"metadata empty frame", func(t testing.TB) [][]byte {
			fs := cloneFrames(mustEncode(t, mdRec()))
			fs[1] = nil
			return fs
		}, ClassTruncatedField, "metadata.version"},

		// Payload envelope.
		{"payload version 0", corrupt(send, 1, setByte(at(0), 0)), ClassInvalidField, "payload.version"},
		{"payload envelope length +1", corrupt(send, 1, func(t testing.TB, f []byte) []byte {
			binary.BigEndian.PutUint32(f[1:], binary.BigEndian.Uint32(f[1:])+1)
			return f
		}), ClassTruncatedField, "payload.length"},
		{"payload envelope length -1", corrupt(send, 1, func(t testing.TB, f []byte) []byte {
			binary.BigEndian.PutUint32(f[1:], binary.BigEndian.Uint32(f[1:])-1)
			return f
		}), ClassInvalidField, "payload.payload"},
		{"payload envelope length +1 with a byte", corrupt(send, 1, func(t testing.TB, f []byte) []byte {
			binary.BigEndian.PutUint32(f[1:], binary.BigEndian.Uint32(f[1:])+1)
			return append(f, 0)
		}), ClassInvalidField, "payload.length"},
		{"payload envelope length 2^32-1", corrupt(send, 1, func(t testing.TB, f []byte) []byte {
			binary.BigEndian.PutUint32(f[1:], ^uint32(0))
			return f
		}), ClassTruncatedField, "payload.length"},
		{"payload data length past the envelope", corrupt(push, 1, func(t testing.TB, f []byte) []byte {
			binary.BigEndian.PutUint32(f[len(f)-8:], 5)
			return f
		}), ClassInvalidField, "payload.payload"},
		{"payload empty packet name", corrupt(send, 1, func(t testing.TB, f []byte) []byte {
			f = replaceOnce(t, f, []byte("\x09chat.send"), []byte("\x00"))
			binary.BigEndian.PutUint32(f[1:], binary.BigEndian.Uint32(f[1:])-9) // keep the envelope length right
			return f
		}), ClassInvalidField, "payload.packetName"},
		{"payload NUL in content type", corrupt(send, 1, swap([]byte("json"), []byte("js\x00n"))), ClassInvalidField, "payload.contentType"},
		{"payload frame 4 bytes", corrupt(send, 1, func(t testing.TB, f []byte) []byte { return f[:4] }), ClassTruncatedField, "payload.length"},
		{"payload empty frame", corrupt(push, 1, func(t testing.TB, f []byte) []byte { return nil }), ClassTruncatedField, "payload.version"},

		// meshnode's own records: each family's ids only under its own magic.
		{"meshnode command under the zlink magic", corrupt(topicPublish, 0, func(_ testing.TB, f []byte) []byte {
			f[0], f[1] = Magic0, Magic1
			return f
		}), ClassUnknownCommand, "command"},
		{"zlink command under the meshnode magic", corrupt(push, 0, func(_ testing.TB, f []byte) []byte {
			f[0], f[1] = MeshnodeMagic0, MeshnodeMagic1
			return f
		}), ClassUnknownCommand, "command"},
		{"meshnode magic byte 1", corrupt(topicPublish, 0, setByte(at(1), 'n')), ClassInvalidMagic, "magic"},
		{"topicPublish sequence 0", corrupt(topicPublish, 0, func(_ testing.TB, f []byte) []byte {
			clear(f[len(f)-8:])
			return f
		}), ClassInvalidField, "sequence"},
		{"topicPublish empty topic", corrupt(topicPublish, 0, swap([]byte("\x0aroom:lobby"), []byte("\x00"))), ClassInvalidField, "topic"},
		{"topicPublish NUL in publisher", corrupt(topicPublish, 0, swap([]byte("room-1"), []byte("ro\x00m-1"))), ClassInvalidField, "publisher"},
		{"topicPublish without payload", func(t testing.TB) [][]byte { return mustEncode(t, topicPublish())[:1] }, ClassFrameCount, ""},
		{"topicInterest unknown flag", corrupt(func() *Record { return topicInterest(1) }, 0, setByte(at(HeadSize+8), 0x80)), ClassInvalidField, "flags"},
		{"topicInterest count past the frame", corrupt(func() *Record { return topicInterest(1) }, 0, func(_ testing.TB, f []byte) []byte {
			binary.BigEndian.PutUint16(f[HeadSize+9:], 4000)
			return f
		}), ClassTruncatedField, "entries"},
		{"topicInterest count over the bound", corrupt(func() *Record { return topicInterest(0) }, 0, func(_ testing.TB, f []byte) []byte {
			binary.BigEndian.PutUint16(f[HeadSize+9:], MaxInterestEntries+1)
			return f
		}), ClassInvalidField, "entries"},
		{"topicInterest entry cut short", corrupt(func() *Record { return topicInterest(2) }, 0, func(_ testing.TB, f []byte) []byte {
			return f[:len(f)-2]
		}), ClassTruncatedField, "entries"},
		{"topicInterestAck version 0", corrupt(func() *Record { return &Record{Body: &TopicInterestAck{Version: 1}} }, 0,
			func(_ testing.TB, f []byte) []byte { clear(f[HeadSize:]); return f }), ClassInvalidField, "version"},

		// Trailing bytes, one per frame kind.
		{"trailing byte in payload frame", corrupt(send, 1, appendByte), ClassTrailingByte, ""},
		{"trailing byte in metadata frame", corrupt(mdRec, 1, appendByte), ClassTrailingByte, ""},
		{"trailing byte in push payload frame", corrupt(push, 1, appendByte), ClassTrailingByte, ""},
	}

	// Every command: unknown ids, forbidden flags, trailing byte in frame 0.
	for _, id := range []byte{0, 1, 5, 6, 7, 15, 16, 19, 21, 23, 25, 32, 35, 37, 39, 41, 45, 46, 50, 52, 53, 54, 200, 255} {
		cases = append(cases, decodeCase{fmt.Sprintf("unknown command %d", id), frames(head(id, 0)), ClassUnknownCommand, "command"})
	}
	for _, c := range roundTripRecords() {
		sp, _ := specOf(c.rec.Body.Command())
		for bit := byte(1); bit != 0; bit <<= 1 {
			if sp.allowed&bit != 0 {
				continue
			}
			cases = append(cases, decodeCase{fmt.Sprintf("flag %#x on %s", bit, c.name),
				corrupt(func() *Record { return c.rec }, 0, func(_ testing.TB, f []byte) []byte { f[4] |= bit; return f }),
				ClassForbiddenFlag, "flags"})
		}
		cases = append(cases, decodeCase{"trailing byte in frame 0 of " + c.name,
			corrupt(func() *Record { return c.rec }, 0, appendByte), ClassTrailingByte, ""})
	}
	return cases
}

func TestDecodeViolations(t *testing.T) {
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			in := c.in(t)
			rec, err := Decode(in)
			if err == nil {
				t.Fatalf("decoded %+v", rec)
			}
			e := checkError(t, err, c.want, in)
			if c.field != "" && e.Field != c.field {
				t.Fatalf("field %q, want %q: %v", e.Field, c.field, err)
			}
		})
	}
}

// encodeCase is a record Encode must refuse with a class.
type encodeCase struct {
	name  string
	rec   func() *Record
	want  ErrorClass
	field string
}

func encodeCases() []encodeCase {
	mod := func(base func() *Record, f func(r *Record)) func() *Record {
		return func() *Record { r := base(); f(r); return r }
	}
	send := func(f func(b *ActorSend)) func() *Record {
		return mod(func() *Record { return actorSendTail(4) }, func(r *Record) { f(r.Body.(*ActorSend)) })
	}
	reply := func(b Reply) func() *Record { return func() *Record { return &Record{Body: &b} } }
	route := func(base func() *Record, f func(b *SessionRelocationRoute)) func() *Record {
		return mod(base, func(r *Record) { f(r.Body.(*SessionRelocationRoute)) })
	}
	md := func(m Metadata) func() *Record {
		return mod(func() *Record { return actorSendTail(4) }, func(r *Record) { r.Metadata = m })
	}
	return []encodeCase{
		{"nil record", func() *Record { return nil }, ClassUnknownCommand, ""},
		{"nil body", func() *Record { return &Record{} }, ClassUnknownCommand, ""},
		{"typed nil body", func() *Record { return &Record{Body: (*ActorSend)(nil), Payload: payloadN(1)} }, ClassInvalidField, ""},
		{"typed nil reply", func() *Record { return &Record{Body: (*Reply)(nil)} }, ClassInvalidField, ""},
		{"metadata on boundSessionSend", mod(func() *Record { return boundSessionSend(1) }, func(r *Record) { r.Metadata = Metadata{} }), ClassForbiddenFlag, "metadata"},
		{"metadata on reply", func() *Record { return &Record{Body: &Reply{Correlation: 1}, Metadata: Metadata{{"k", "v"}}} }, ClassForbiddenFlag, "metadata"},
		{"actorSend without payload", mod(func() *Record { return actorSendTail(1) }, func(r *Record) { r.Payload = nil }), ClassFrameCount, "payload"},
		{"boundSessionSend without payload", mod(func() *Record { return boundSessionSend(1) }, func(r *Record) { r.Payload = nil }), ClassFrameCount, "payload"},
		{"payload on boundSessionBind", mod(func() *Record { return bindRecord(BindingActive) }, func(r *Record) { r.Payload = payloadN(1) }), ClassFrameCount, "payload"},
		{"payload on a failed reply", func() *Record {
			return &Record{Body: &Reply{Correlation: 1, Result: ResultBusy}, Payload: payloadN(1)}
		}, ClassFrameCount, "payload"},
		{"zero targetNodeGeneration", send(func(b *ActorSend) { b.TargetActor.TargetNodeGeneration = 0 }), ClassInvalidField, "targetActor.targetNodeGeneration"},
		{"objectGeneration 2^63", send(func(b *ActorSend) { b.TargetActor.Actor.Generation = 1 << 63 }), ClassInvalidField, "targetActor.actor.objectGeneration"},
		{"empty actorId", send(func(b *ActorSend) { b.TargetActor.Actor.ID = "" }), ClassInvalidField, "targetActor.actor.actorId"},
		{"actorId 256 bytes", send(func(b *ActorSend) { b.TargetActor.Actor.ID = strings.Repeat("a", 256) }), ClassInvalidField, "targetActor.actor.actorId"},
		{"NUL in actorId", send(func(b *ActorSend) { b.TargetActor.Actor.ID = "a\x00b" }), ClassInvalidField, "targetActor.actor.actorId"},
		{"bad UTF-8 in actorId", send(func(b *ActorSend) { b.TargetActor.Actor.ID = "a\xffb" }), ClassInvalidField, "targetActor.actor.actorId"},
		{"empty rid", send(func(b *ActorSend) { b.TargetActor.TargetNodeRID = "" }), ClassInvalidField, "targetActor.targetNodeRid"},
		{"rid 256 bytes", send(func(b *ActorSend) { b.BoundSession.SourceSessionRID = strings.Repeat("r", 256) }), ClassInvalidField, "boundSessionTail.sourceSessionRid"},
		{"hop count 9", send(func(b *ActorSend) { b.HopCount = 9 }), ClassInvalidField, "messageFollowHopCount"},
		{"source generation without id", send(func(b *ActorSend) { b.SourceActor.Generation = 4 }), ClassInvalidField, "sourceActor.generation"},
		{"source id without generation", send(func(b *ActorSend) { b.SourceActor.ID = "npc" }), ClassInvalidField, "sourceActor.generation"},
		{"zero session sequence", send(func(b *ActorSend) { b.BoundSession.SourceSessionSequence = 0 }), ClassInvalidField, "boundSessionTail.sourceSessionSequence"},
		{"reply zero correlation", reply(Reply{}), ClassInvalidField, "correlation"},
		{"reply unknown result", reply(Reply{Correlation: 1, Result: 114}), ClassInvalidField, "terminalResult"},
		{"reply unknown failure", reply(Reply{Correlation: 1, Result: ResultNotFound, Failure: 30}), ClassInvalidField, "failureCode"},
		{"reply wrong pair", reply(Reply{Correlation: 1, Result: ResultConflict, Failure: FailureActorRouteNotFound}), ClassInvalidField, "failureCode"},
		{"reply bind tail on failure", reply(Reply{Correlation: 1, Result: ResultNotFound, Failure: FailureActorSessionNotBound,
			BindOK: &BindOK{1, 1}}), ClassInvalidField, "tail"},
		{"reply zero bind tail", reply(Reply{Correlation: 1, BindOK: &BindOK{0, 1}}), ClassInvalidField, "tail.bindingGeneration"},
		{"bind state 0", mod(func() *Record { return bindRecord(BindingActive) }, func(r *Record) { r.Body.(*BoundSessionBind).Binding.State = 0 }), ClassInvalidField, "binding.bindingState"},
		{"bind zero generation", mod(func() *Record { return bindRecord(BindingTombstone) }, func(r *Record) { r.Body.(*BoundSessionBind).Binding.Generation = 0 }), ClassInvalidField, "binding.retiredBindingGeneration"},
		{"push zero expected generation", mod(func() *Record { return boundSessionSend(1) }, func(r *Record) {
			r.Body.(*BoundSessionSend).ExpectedBindingGeneration = 0
		}), ClassInvalidField, "expectedBindingGeneration"},
		{"seal relocation zero", mod(sealRecord, func(r *Record) { r.Body.(*SessionRelocationSeal).Relocation = RelocationID{} }), ClassInvalidField, "relocation"},
		{"seal from coordinator", mod(sealRecord, func(r *Record) { r.Body.(*SessionRelocationSeal).SenderRole = RoleCoordinator }), ClassInvalidField, "senderRole"},
		{"seal store version empty", mod(sealRecord, func(r *Record) { r.Body.(*SessionRelocationSeal).Coordinator.ExpectedAuthorityStoreVersion = "" }), ClassInvalidField, "coordinator.expectedAuthorityStoreVersion"},
		{"seal store version 4097", mod(sealRecord, func(r *Record) {
			r.Body.(*SessionRelocationSeal).Coordinator.ExpectedAuthorityStoreVersion = strings.Repeat("v", 4097)
		}), ClassInvalidField, "coordinator.expectedAuthorityStoreVersion"},
		{"sealed zero session owner generation", mod(sealedRecord, func(r *Record) { r.Body.(*SessionRelocationSealed).Session.OwnerNodeGeneration = 0 }), ClassInvalidField, "sessionOwnerNodeGeneration"},
		{"route neither case", route(routeCommit, func(b *SessionRelocationRoute) { b.Route.Commit = nil }), ClassInvalidField, "route.action"},
		{"route both cases", route(routeCommit, func(b *SessionRelocationRoute) { b.Route.Abort = &RouteAbort{1} }), ClassInvalidField, "route.action"},
		{"commit from source", route(routeCommit, func(b *SessionRelocationRoute) { b.SenderRole = RoleSource }), ClassInvalidField, "senderRole"},
		{"abort from target", route(routeAbort, func(b *SessionRelocationRoute) { b.SenderRole = RoleTarget }), ClassInvalidField, "senderRole"},
		{"commit target generation equal", route(routeCommit, func(b *SessionRelocationRoute) {
			b.Route.Commit.TargetAuthorityOwnerGeneration = b.Route.Commit.PreviousAuthorityOwnerGeneration
		}), ClassInvalidField, "route.targetAuthorityOwnerGeneration"},
		{"commit zero lease", route(routeCommit, func(b *SessionRelocationRoute) { b.Route.Commit.TargetOwnerLeaseGeneration = 0 }), ClassInvalidField, "route.targetOwnerLeaseGeneration"},
		{"replaced zero retired generation", mod(replacedRecord, func(r *Record) { r.Body.(*BoundSessionReplaced).RetiredSession.BindingGeneration = 0 }), ClassInvalidField, "retiredSession.retiredBindingGeneration"},
		{"metadata duplicate key", md(Metadata{{"k", "1"}, {"k", "2"}}), ClassInvalidField, "metadata.key"},
		{"metadata empty key", md(Metadata{{"", "1"}}), ClassInvalidField, "metadata.key"},
		{"metadata key 256 bytes", md(Metadata{{strings.Repeat("k", 256), ""}}), ClassInvalidField, "metadata.key"},
		{"metadata value 1025 bytes", md(Metadata{{"k", strings.Repeat("v", 1025)}}), ClassInvalidField, "metadata.value"},
		{"metadata NUL in value", md(Metadata{{"k", "a\x00"}}), ClassInvalidField, "metadata.value"},
		{"metadata frame 1025 bytes", md(append(maxMetadata()[:2:2], MetadataEntry{"c", maxMetadata()[2].Value + "3"})), ClassInvalidField, "metadata"},
		{"metadata 256 entries", md(make(Metadata, 256)), ClassInvalidField, "metadata.count"},
		{"payload empty packet name", mod(func() *Record { return boundSessionSend(1) }, func(r *Record) { r.Payload.PacketName = "" }), ClassInvalidField, "payload.packetName"},
		{"payload bad UTF-8 content type", mod(func() *Record { return boundSessionSend(1) }, func(r *Record) { r.Payload.ContentType = "\xc3" }), ClassInvalidField, "payload.contentType"},
	}
}

func TestEncodeViolations(t *testing.T) {
	for _, c := range encodeCases() {
		t.Run(c.name, func(t *testing.T) {
			frames, err := Encode(c.rec())
			if err == nil {
				t.Fatalf("encoded % x", frames)
			}
			var e *Error
			if !errors.As(err, &e) || e.Class != c.want || !errors.Is(err, &Error{Class: c.want}) {
				t.Fatalf("error %v, want class %s", err, c.want)
			}
			if e.Offset != -1 || e.Error() == "" {
				t.Fatalf("encode error with offset %d", e.Offset)
			}
			if c.field != "" && e.Field != c.field {
				t.Fatalf("field %q, want %q: %v", e.Field, c.field, err)
			}
			// AppendFrames leaves its inputs as they were.
			buf, fr, err2 := AppendFrames([]byte("ab"), [][]byte{[]byte("c")}, c.rec())
			if err2 == nil || string(buf) != "ab" || len(fr) != 1 {
				t.Fatalf("AppendFrames on error = %q, %d frames, %v", buf, len(fr), err2)
			}
		})
	}
}
