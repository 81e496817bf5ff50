package wire

import (
	"reflect"
	"testing"
	"unsafe"
)

// A Decoder decodes every record exactly as Decode does, whatever came before it:
// the records of the round-trip set, in sequence and each twice in a row.
func TestDecoder_DecodesEveryRecordAsDecodeDoes(t *testing.T) {
	var d Decoder
	for _, c := range roundTripRecords() {
		frames := mustEncode(t, c.rec)
		want, err := Decode(frames)
		if err != nil {
			t.Fatalf("%s: Decode: %v", c.name, err)
		}
		for range 2 {
			got, err := d.Decode(frames)
			if err != nil {
				t.Fatalf("%s: Decoder: %v", c.name, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: Decoder gave %+v, Decode %+v", c.name, got, want)
			}
		}
	}
}

// Consecutive records with the same text share their strings; a record whose text
// differs, even by one byte of the same length, gets its own.
func TestDecoder_SharesStringsOnlyWhenTheTextIsTheSame(t *testing.T) {
	var d Decoder
	decode := func(rec *Record) *Record {
		t.Helper()
		got, err := d.Decode(mustEncode(t, rec))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := decode(actorSendTail(10))
	again := decode(actorSendTail(20)) // other data, same text
	id := func(r *Record) *byte { return unsafe.StringData(r.Body.(*ActorSend).TargetActor.Actor.ID) }
	if id(first) != id(again) {
		t.Error("two records with the same text did not share their strings")
	}
	other := actorSendTail(10)
	other.Body.(*ActorSend).TargetActor.Actor.ID = "room-18" // same length, one byte differs
	got := decode(other)
	if got.Body.(*ActorSend).TargetActor.Actor.ID != "room-18" {
		t.Fatalf("actor id %q, want room-18", got.Body.(*ActorSend).TargetActor.Actor.ID)
	}
	if id(got) == id(again) {
		t.Error("a record whose text differs shares the previous record's strings")
	}
	if again.Body.(*ActorSend).TargetActor.Actor.ID != "room-17" || again.Payload.PacketName != "chat.send" {
		t.Error("decoding a later record changed an earlier one")
	}
}

// A session's relays differ in their sequence numbers only: their text fields are
// compared one by one and shared (from the third record: a Decoder does not collect
// the first record's fields one by one, since it often decodes a run of one); a relay
// with another session RID gets its own.
func TestDecoder_RelaysOfOneSessionShareTheirStrings(t *testing.T) {
	var d Decoder
	relay := func(seq uint64, sessionRID string) *Record {
		t.Helper()
		rec := actorSendTail(16)
		rec.Body.(*ActorSend).BoundSession.SourceSessionSequence = seq
		rec.Body.(*ActorSend).BoundSession.SourceSessionRID = sessionRID
		want, err := Decode(mustEncode(t, rec))
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.Decode(mustEncode(t, rec))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("relay %d: Decoder gave %+v, Decode %+v", seq, got, want)
		}
		return got
	}
	rid := func(r *Record) *byte { return unsafe.StringData(r.Body.(*ActorSend).BoundSession.SourceSessionRID) }
	name := func(r *Record) *byte { return unsafe.StringData(r.Payload.PacketName) }
	relay(1, "sess-0001")
	first := relay(2, "sess-0001")
	second := relay(3, "sess-0001")
	if rid(first) != rid(second) || name(first) != name(second) {
		t.Error("two relays of one session did not share their strings")
	}
	other := relay(3, "sess-0002")
	if rid(other) == rid(second) || other.Body.(*ActorSend).BoundSession.SourceSessionRID != "sess-0002" {
		t.Error("a relay of another session took the previous session's RID")
	}
	for seq := uint64(4); seq < 4+fieldBackoff+2; seq++ {
		relay(seq, "sess-0001") // after a miss: decoded whole a few times, then compared again
	}
}

// After Reset a Decoder shares nothing with the records decoded before it (a pooled
// Decoder keeps none of their strings) and decodes as a new one does.
func TestDecoder_ResetForgetsThePreviousRecords(t *testing.T) {
	var d Decoder
	rec := actorSendTail(16)
	frames := mustEncode(t, rec)
	first, err := d.Decode(frames)
	if err != nil {
		t.Fatal(err)
	}
	d.Reset()
	if d.text != "" || len(d.share.prev) != 0 || d.seen {
		t.Fatalf("state left after Reset: text %q, %d fields, seen %v", d.text, len(d.share.prev), d.seen)
	}
	again, err := d.Decode(frames)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Decode(frames)
	if !reflect.DeepEqual(again, want) {
		t.Fatalf("after Reset: %+v, want %+v", again, want)
	}
	name := func(r *Record) *byte { return unsafe.StringData(r.Payload.PacketName) }
	if name(first) == name(again) {
		t.Error("a record decoded after Reset shares a string with one decoded before")
	}
}
