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
