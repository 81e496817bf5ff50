package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// Sample values used across the tests. The marker generations are distinctive 8-byte
// patterns so that a test can find a field in encoded bytes and corrupt exactly it.
const (
	markTargetGen = 0x0102030405060708 // targetActor.targetNodeGeneration
	markExpected  = 0x1112131415161718 // expectedBindingGeneration / binding generation
	markSessSeq   = 0x2122232425262728 // boundSessionTail.sourceSessionSequence
	markCorr      = 0x3132333435363738 // correlation
)

func fenceFor(id, node string, gen uint64) ActorRouteFence {
	return ActorRouteFence{
		Actor:                            ActorRef{ID: id, Generation: 5},
		TargetNodeRID:                    node,
		TargetNodeGeneration:             gen,
		ExpectedAuthorityOwnerGeneration: 11,
		ExpectedOwnerLeaseGeneration:     13,
	}
}

func sessionFence() SessionFence {
	return SessionFence{OwnerNodeRID: "source", OwnerNodeGeneration: 2, OwnerID: "session-owner",
		OwnerLeaseGeneration: 8, SessionRID: "session", BindingGeneration: 6}
}

func coordinator() CoordinatorFence {
	return CoordinatorFence{OwnerID: "coordinator", LeaseGeneration: 3, NodeRID: "source", NodeGeneration: 2,
		ExpectedAuthorityStoreVersion: "store-v17"}
}

func payloadN(n int) *Payload {
	p := &Payload{PacketName: "chat.send", ContentType: "application/json"}
	if n > 0 { // an empty Data decodes as nil
		p.Data = bytes.Repeat([]byte{'x'}, n)
	}
	return p
}

// actorSendTail is the hot-path 24: a session relaying a packet to its bound Actor.
func actorSendTail(data int) *Record {
	return &Record{
		Body: &ActorSend{
			Operation:   OperationID{High: 0x0196_0000_0000_0001, Low: 42},
			HopCount:    0,
			TargetActor: fenceFor("room-17", "node-b", markTargetGen),
			BoundSession: &BoundSessionTail{SourceSessionRID: "sess-0001", SourceBindingGeneration: 3,
				SourceSessionSequence: markSessSeq},
		},
		Payload: payloadN(data),
	}
}

// boundSessionSend is the hot-path 36: an Actor pushing to its bound session.
func boundSessionSend(data int) *Record {
	return &Record{
		Body:    &BoundSessionSend{Actor: fenceFor("room-17", "node-b", markTargetGen), ExpectedBindingGeneration: markExpected},
		Payload: payloadN(data),
	}
}

func bindRecord(state BindingState) *Record {
	return &Record{Body: &BoundSessionBind{Correlation: markCorr, Actor: fenceFor("room-17", "node-b", markTargetGen),
		SessionRID: "sess-0001", Binding: BindingTransition{State: state, Generation: markExpected}}}
}

func routeCommit() *Record {
	return &Record{Body: &SessionRelocationRoute{Relocation: RelocationID{7, 9}, Coordinator: coordinator(),
		SenderRole: RoleTarget, Actor: ActorRef{ID: "actor-1", Generation: 5}, Session: sessionFence(),
		Route: RouteUpdate{Commit: &RouteCommit{PreviousAuthorityOwnerGeneration: 11, TargetAuthorityOwnerGeneration: 12,
			TargetNodeRID: "target", TargetNodeGeneration: 4, TargetOwnerLeaseGeneration: 5}}}}
}

func routeAbort() *Record {
	return &Record{Body: &SessionRelocationRoute{Relocation: RelocationID{7, 9}, Coordinator: coordinator(),
		SenderRole: RoleSource, Actor: ActorRef{ID: "actor-1", Generation: 5}, Session: sessionFence(),
		Route: RouteUpdate{Abort: &RouteAbort{CurrentAuthorityOwnerGeneration: 11}}}}
}

func sealRecord() *Record {
	return &Record{Body: &SessionRelocationSeal{Relocation: RelocationID{7, 9}, Coordinator: coordinator(),
		SenderRole: RoleSource, Actor: fenceFor("actor-1", "source", 2), Session: sessionFence()}}
}

func sealedRecord() *Record {
	return &Record{Body: &SessionRelocationSealed{Relocation: RelocationID{7, 9}, Coordinator: coordinator(),
		Actor: fenceFor("actor-1", "source", 2), Session: sessionFence()}}
}

func replacedRecord() *Record {
	return &Record{Body: &BoundSessionReplaced{ActorAuthority: fenceFor("actor-a", "actor-owner", 2),
		RetiredSession: SessionFence{OwnerNodeRID: "session-owner", OwnerNodeGeneration: 5, OwnerID: "session-runtime",
			OwnerLeaseGeneration: 6, SessionRID: "session-a", BindingGeneration: 7}}}
}

type namedRecord struct {
	name string
	rec  *Record
}

// roundTripRecords covers every command and every optional part of each.
func roundTripRecords() []namedRecord {
	withMD := actorSendTail(64)
	withMD.Metadata = Metadata{{"trace", "00-abc-01"}, {"lang", "ko"}, {"empty", ""}}
	mdNoTail := &Record{Body: &ActorSend{TargetActor: fenceFor("a", "n", 1)}, Metadata: Metadata{{"k", "v"}},
		Payload: &Payload{PacketName: "p", ContentType: "c"}}
	emptyMD := actorSendTail(0)
	emptyMD.Metadata = Metadata{}
	full := &Record{
		Body: &ActorSend{
			Operation:   OperationID{High: MaxNonzero + 5, Low: ^uint64(0)}, // operation-id is plain u64
			HopCount:    MaxHopCount,
			SourceActor: ActorRef{ID: "npc-λ", Generation: MaxNonzero},
			TargetActor: ActorRouteFence{Actor: ActorRef{ID: strings.Repeat("a", 255), Generation: 1},
				TargetNodeRID: "\x00\xff raw rid bytes", TargetNodeGeneration: 1,
				ExpectedAuthorityOwnerGeneration: MaxNonzero, ExpectedOwnerLeaseGeneration: 1},
			BoundSession: &BoundSessionTail{SourceSessionRID: strings.Repeat("r", 255), SourceBindingGeneration: 1,
				SourceSessionSequence: 1},
		},
		Metadata: maxMetadata(),
		Payload: &Payload{PacketName: strings.Repeat("p", 255), ContentType: "application/x-zlink-multipart",
			Data: []byte{0, 1, 2, 0xff}},
	}
	bigStore := sealRecord()
	bigStore.Body.(*SessionRelocationSeal).Coordinator.ExpectedAuthorityStoreVersion = strings.Repeat("v", MaxStoreVersion)
	return []namedRecord{
		{"reply/ok", &Record{Body: &Reply{Correlation: 1, Result: ResultOK}}},
		{"reply/bindOK", &Record{Body: &Reply{Correlation: markCorr, Result: ResultOK,
			BindOK: &BindOK{BindingGeneration: 6, AuthorityOwnerGeneration: 12}}}},
		{"reply/bindOK+payload", &Record{Body: &Reply{Correlation: 9, Result: ResultOK,
			BindOK: &BindOK{BindingGeneration: 1, AuthorityOwnerGeneration: MaxNonzero}}, Payload: payloadN(3)}},
		{"reply/ok+payload", &Record{Body: &Reply{Correlation: 9, Result: ResultOK}, Payload: payloadN(0)}},
		{"reply/notBound", &Record{Body: &Reply{Correlation: 2, Result: ResultNotFound, Failure: FailureActorSessionNotBound}}},
		{"reply/relocationDataLost", &Record{Body: &Reply{Correlation: 2, Result: ResultInternalError, Failure: FailureRelocationDataLost}}},
		{"reply/timedOut", &Record{Body: &Reply{Correlation: 3, Result: ResultTimedOut}}},
		{"actorSend/tail", actorSendTail(64)},
		{"actorSend/tail+metadata", withMD},
		{"actorSend/metadata-no-tail", mdNoTail},
		{"actorSend/empty-metadata-frame", emptyMD},
		{"actorSend/minimal", &Record{Body: &ActorSend{TargetActor: fenceFor("a", "n", 1)},
			Payload: &Payload{PacketName: "p", ContentType: "c"}}},
		{"actorSend/full", full},
		{"boundSessionSend", boundSessionSend(64)},
		{"boundSessionSend/empty", boundSessionSend(0)},
		{"boundSessionBind/active", bindRecord(BindingActive)},
		{"boundSessionBind/tombstone", bindRecord(BindingTombstone)},
		{"sessionRelocationSeal", sealRecord()},
		{"sessionRelocationSeal/store4096", bigStore},
		{"sessionRelocationSealed", sealedRecord()},
		{"sessionRelocationRoute/commit", routeCommit()},
		{"sessionRelocationRoute/abort", routeAbort()},
		{"boundSessionReplaced", replacedRecord()},
		{"meshnode.topicPublish", topicPublish()},
		{"meshnode.topicPublish/metadata", &Record{Body: &TopicPublish{Topic: strings.Repeat("t", 255),
			Publisher: strings.Repeat("p", MaxPublisherLen), Sequence: MaxNonzero}, Metadata: Metadata{{"traceparent", "00-ab-cd-01"}},
			Payload: &Payload{PacketName: "topic.message", ContentType: "application/json", Data: []byte(`{}`)}}},
		{"meshnode.topicInterest/changes", topicInterest(3)},
		{"meshnode.topicInterest/reset-empty", &Record{Body: &TopicInterest{Version: 1, Reset: true, Ack: true}}},
		{"meshnode.topicInterestAck", &Record{Body: &TopicInterestAck{Version: MaxNonzero}}},
	}
}

// topicPublish is a meshnode topicPublish record.
func topicPublish() *Record {
	return &Record{Body: &TopicPublish{Topic: "room:lobby", Publisher: "a:room-1@7", Sequence: 42},
		Payload: &Payload{PacketName: "room.said", ContentType: "application/json", Data: []byte(`{"n":1}`)}}
}

// topicInterest is a meshnode topicInterest record with n changes.
func topicInterest(n int) *Record {
	ti := &TopicInterest{Version: 9, Ack: true}
	for i := 0; i < n; i++ {
		ti.Entries = append(ti.Entries, TopicCount{Topic: "t" + strings.Repeat("x", i), Subscribers: uint32(i)})
	}
	return &Record{Body: ti}
}

// maxMetadata is a metadata frame of exactly MaxMetadataFrame bytes.
func maxMetadata() Metadata {
	// 2 header bytes + 3 entries of (1+1 key + 2+v value): 2 + 3*4 + values = 1024.
	md := Metadata{{"a", strings.Repeat("1", 300)}, {"b", strings.Repeat("2", 300)}, {"c", ""}}
	md[2].Value = strings.Repeat("3", MaxMetadataFrame-2-3*4-600)
	return md
}

func mustEncode(t testing.TB, rec *Record) [][]byte {
	t.Helper()
	frames, err := Encode(rec)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return frames
}

// cloneFrames deep-copies frames so a test can corrupt them.
func cloneFrames(frames [][]byte) [][]byte {
	out := make([][]byte, len(frames))
	for i, f := range frames {
		out[i] = append([]byte(nil), f...)
	}
	return out
}

func u64be(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// replaceOnce replaces the single occurrence of old in b; it fails the test if old is not
// there exactly once (so that a corruption cannot land on the wrong field).
func replaceOnce(t testing.TB, b, old, new []byte) []byte {
	t.Helper()
	if n := bytes.Count(b, old); n != 1 {
		t.Fatalf("pattern % x occurs %d times, want 1", old, n)
	}
	return bytes.Replace(b, old, new, 1)
}

// checkError asserts err is a well-formed *Error of class want for these frames.
func checkError(t testing.TB, err error, want ErrorClass, frames [][]byte) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *Error", err, err)
	}
	if e.Class != want {
		t.Fatalf("class %s, want %s: %v", e.Class, want, err)
	}
	if !errors.Is(err, &Error{Class: want}) {
		t.Fatalf("errors.Is does not match its own class: %v", err)
	}
	checkErrorShape(t, e, frames)
	return e
}

// checkErrorShape asserts the frame index and offset of a decode error point into the input.
func checkErrorShape(t testing.TB, e *Error, frames [][]byte) {
	t.Helper()
	if e.Class == ClassFrameCount {
		if e.Frame < 0 || e.Frame > len(frames) || e.Offset != -1 {
			t.Fatalf("frame-count error points at frame %d offset %d of %d frames: %v", e.Frame, e.Offset, len(frames), e)
		}
		return
	}
	if e.Frame < 0 || e.Frame >= len(frames) {
		t.Fatalf("error in frame %d of %d: %v", e.Frame, len(frames), e)
	}
	if e.Offset < 0 || e.Offset > len(frames[e.Frame]) {
		t.Fatalf("offset %d outside the %d-byte frame %d: %v", e.Offset, len(frames[e.Frame]), e.Frame, e)
	}
	if e.Error() == "" {
		t.Fatal("empty message")
	}
}

// Fuzz input format: byte 0 picks the frame count (1 + b%3), then two u16 lengths of
// frames 0 and 1 (clamped to what is left), then the frame bytes; the last frame takes
// the rest. joinFrames is the inverse, used to turn known records into seeds.
func splitFrames(data []byte) [][]byte {
	if len(data) < 5 {
		return [][]byte{data}
	}
	n := 1 + int(data[0])%3
	l0, l1 := int(binary.BigEndian.Uint16(data[1:])), int(binary.BigEndian.Uint16(data[3:]))
	rest := data[5:]
	if n == 1 {
		return [][]byte{rest}
	}
	l0 = min(l0, len(rest))
	f0, rest := rest[:l0], rest[l0:]
	if n == 2 {
		return [][]byte{f0, rest}
	}
	l1 = min(l1, len(rest))
	return [][]byte{f0, rest[:l1], rest[l1:]}
}

func joinFrames(frames [][]byte) []byte {
	if len(frames) == 0 || len(frames) > 3 {
		panic("joinFrames: 1..3 frames")
	}
	out := []byte{byte(len(frames) - 1), 0, 0, 0, 0}
	if len(frames) > 1 {
		binary.BigEndian.PutUint16(out[1:], uint16(len(frames[0])))
	}
	if len(frames) > 2 {
		binary.BigEndian.PutUint16(out[3:], uint16(len(frames[1])))
	}
	for _, f := range frames {
		out = append(out, f...)
	}
	return out
}
