package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, c := range roundTripRecords() {
		t.Run(c.name, func(t *testing.T) {
			frames := mustEncode(t, c.rec)
			want := 1
			if c.rec.Metadata != nil {
				want++
			}
			if c.rec.Payload != nil {
				want++
			}
			if len(frames) != want {
				t.Fatalf("%d frames, want %d", len(frames), want)
			}
			for i, f := range frames {
				if cap(f) != len(f) {
					t.Fatalf("frame %d has spare capacity %d: appending to it would overwrite the next", i, cap(f)-len(f))
				}
			}
			if got, wantFlags := frames[0][4], flagsOf(c.rec); got != wantFlags {
				t.Fatalf("flags %#x, want %#x", got, wantFlags)
			}
			got, err := Decode(frames)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, c.rec) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, c.rec)
			}
			again := mustEncode(t, got)
			if !reflect.DeepEqual(again, frames) {
				t.Fatalf("re-encode differs:\n got % x\nwant % x", again, frames)
			}

			// AppendFrames appends after existing content and leaves it alone.
			prefix := []byte("keep")
			buf, fr, err := AppendFrames(append([]byte(nil), prefix...), [][]byte{[]byte("x")}, c.rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(buf, prefix) || len(fr) != len(frames)+1 || !reflect.DeepEqual(fr[1:], frames) {
				t.Fatalf("AppendFrames = %q, % x", buf, fr)
			}
		})
	}
}

func flagsOf(rec *Record) byte {
	f := rec.Body.flags()
	if rec.Metadata != nil {
		f |= FlagMetadata
	}
	return f
}

func TestRecordCommand(t *testing.T) {
	for _, c := range roundTripRecords() {
		got, err := Decode(mustEncode(t, c.rec))
		if err != nil {
			t.Fatal(err)
		}
		if got.Command() != c.rec.Body.Command() || got.Command().String() == "" {
			t.Fatalf("%s: Command() = %v", c.name, got.Command())
		}
	}
	var nilRec *Record
	if nilRec.Command() != 0 || (&Record{}).Command() != 0 {
		t.Fatal("Command of an empty record is not 0")
	}
	if s := Command(7).String(); s != "command(7)" {
		t.Fatalf("String = %q", s)
	}
}

// TestDecodeAliasing pins down the documented memory contract: Payload.Data aliases the
// payload frame, every string is a copy.
func TestDecodeAliasing(t *testing.T) {
	frames := mustEncode(t, actorSendTail(8))
	rec, err := Decode(frames)
	if err != nil {
		t.Fatal(err)
	}
	body := rec.Body.(*ActorSend)
	id, rid := body.TargetActor.Actor.ID, body.BoundSession.SourceSessionRID
	for i := range frames[0] {
		frames[0][i] = '#'
	}
	last := frames[len(frames)-1]
	last[len(last)-1] = 'Q'
	if body.TargetActor.Actor.ID != id || body.BoundSession.SourceSessionRID != rid || rec.Payload.PacketName != "chat.send" {
		t.Fatal("decoded strings changed with the input frame")
	}
	if rec.Payload.Data[len(rec.Payload.Data)-1] != 'Q' {
		t.Fatal("Payload.Data does not alias the payload frame")
	}
	if cap(rec.Payload.Data) != len(rec.Payload.Data) {
		t.Fatal("Payload.Data has capacity past the payload")
	}
}

func TestMetadataGet(t *testing.T) {
	md := Metadata{{"a", "1"}, {"b", ""}}
	if v, ok := md.Get("b"); !ok || v != "" {
		t.Fatal("Get(b)")
	}
	if _, ok := md.Get("c"); ok {
		t.Fatal("Get(c)")
	}
}

func TestEnumStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{ResultOK.String(), "ok"}, {ResultBackpressured.String(), "backpressured"},
		{TerminalResult(100).String(), "terminalResult(100)"},
		{FailureNone.String(), "none"}, {FailureRelocationDataLost.String(), "relocationDataLost"},
		{FailureCode(23).String(), "failureCode(23)"},
		{RoleCoordinator.String(), "coordinator"}, {RelocationRole(4).String(), "relocationRole(4)"},
		{BindingTombstone.String(), "tombstone"}, {BindingState(3).String(), "bindingState(3)"},
		{ClassFrameCount.String(), "frame-count"},
	} {
		if c.got != c.want {
			t.Errorf("String = %q, want %q", c.got, c.want)
		}
	}
	if FailureActorSessionNotBound.Result() != ResultNotFound || FailureCode(40).Result() != ResultOK {
		t.Error("FailureCode.Result")
	}
}

func TestErrorMessageAndIs(t *testing.T) {
	frames := mustEncode(t, boundSessionSend(1))
	frames[0] = replaceOnce(t, frames[0], u64be(markExpected), u64be(0))
	_, err := Decode(frames)
	e := checkError(t, err, ClassInvalidField, frames)
	if e.Field != "expectedBindingGeneration" || e.Command != CmdBoundSessionSend || e.Frame != 0 {
		t.Fatalf("error fields: %+v", e)
	}
	msg := err.Error()
	for _, part := range []string{"invalid-field", "boundSessionSend", "expectedBindingGeneration", "zero", "frame 0, offset"} {
		if !strings.Contains(msg, part) {
			t.Errorf("message %q lacks %q", msg, part)
		}
	}
	if !errors.Is(err, ErrInvalidField) || errors.Is(err, ErrTruncatedField) {
		t.Fatal("errors.Is against the sentinels")
	}
	for _, s := range []*Error{ErrInvalidMagic, ErrInvalidMajor, ErrUnknownCommand, ErrForbiddenFlag, ErrFrameCount,
		ErrInvalidField, ErrTruncatedField, ErrTrailingByte} {
		if !errors.Is(s, &Error{Class: s.Class}) || s.Error() == "" {
			t.Fatalf("sentinel %v", s)
		}
	}
	// Nested fields are reported by their schema path.
	frames = mustEncode(t, actorSendTail(1))
	frames[0] = replaceOnce(t, frames[0], []byte("\x07room-17"), []byte("\x07roo\x00-17"))
	_, err = Decode(frames)
	if e := checkError(t, err, ClassInvalidField, frames); e.Field != "targetActor.actor.actorId" || e.Reason != reasonNUL {
		t.Fatalf("nested field: %+v", e)
	}
}

// TestTruncatedPrefixes: every strict prefix of frame 0 (head included) fails as
// truncated-field. Replies with a bind tail are left out: a prefix that ends after
// failureCode is a complete reply without a tail, by design.
func TestTruncatedPrefixes(t *testing.T) {
	for _, c := range roundTripRecords() {
		if r, ok := c.rec.Body.(*Reply); ok && r.BindOK != nil {
			continue
		}
		frames := mustEncode(t, c.rec)
		for n := range len(frames[0]) {
			in := cloneFrames(frames)
			in[0] = in[0][:n]
			_, err := Decode(in)
			var e *Error
			if !errors.As(err, &e) || e.Class != ClassTruncatedField {
				t.Fatalf("%s: prefix %d/%d: %v", c.name, n, len(frames[0]), err)
			}
			checkErrorShape(t, e, in)
		}
	}
}
