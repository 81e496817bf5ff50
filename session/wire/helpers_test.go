package wire

import (
	"encoding/hex"
	"strings"
	"testing"
)

// hx decodes hex written the way the digest writes it: byte pairs separated by spaces
// and '|' group marks.
func hx(s string) []byte {
	s = strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		panic("bad hex in test: " + err.Error())
	}
	return b
}

// cat concatenates hex fragments ([]byte) and literal text (string).
func cat(parts ...any) []byte {
	var out []byte
	for _, p := range parts {
		switch v := p.(type) {
		case []byte:
			out = append(out, v...)
		case string:
			out = append(out, v...)
		case byte:
			out = append(out, v)
		default:
			panic("cat: unsupported part")
		}
	}
	return out
}

// Valid field values used across the tests.
const (
	testFlowID = "01890a5d-ac96-774b-bcce-b302099a8057"
	testCorr   = "a1"
)

// example is one worked example of digest §2.14.
type example struct {
	name    string
	frame   []byte
	header  Header
	payload []byte
}

// examples are the five frames of digest §2.14, transcribed byte for byte. The
// arithmetic checks out: 0x24 = 4 fixed + 8 seq + 1+9 name + 2+12 metadata, 0x0d = 4 +
// 8 + 1, 0x0d = 4 + 1+8, 0x1a = 4 + 1+21, 0x14 = 4 + 1+15.
func examples() []example {
	return []example{
		{
			name: "request",
			frame: cat(hx("00 24 | 00 00 00 0a | f2 02 01 03 | 00 00 00 00 00 00 00 07 | 09"), "chat.send",
				hx("00 0c 01 06"), "locale", hx("00 02"), "ko", `{"t":"hi"}`),
			header: Header{Kind: KindRequest, Codec: CodecJSON, RequestSeq: 7, Name: "chat.send",
				Metadata: Metadata{{Key: "locale", Value: "ko"}}},
			payload: []byte(`{"t":"hi"}`),
		},
		{
			name:    "response",
			frame:   cat(hx("00 0d 00 00 00 0b f2 03 01 01 00 00 00 00 00 00 00 07 00"), `{"ok":true}`),
			header:  Header{Kind: KindResponse, Codec: CodecJSON, RequestSeq: 7},
			payload: []byte(`{"ok":true}`),
		},
		{
			name:    "send",
			frame:   cat(hx("00 0d 00 00 00 02 f2 01 01 00 08"), "chat.msg", hx("7b 7d")),
			header:  Header{Kind: KindSend, Codec: CodecJSON, Name: "chat.msg"},
			payload: []byte("{}"),
		},
		{
			name:    "heartbeat ping",
			frame:   cat(hx("00 1a 00 00 00 00 f2 05 00 00 15"), "$zlink.heartbeat.ping"),
			header:  Header{Kind: KindControl, Codec: CodecRaw, Name: NameHeartbeatPing},
			payload: []byte{},
		},
		{
			name:    "session-closing",
			frame:   cat(hx("00 14 00 00 00 04 f2 05 00 00 0f"), "session-closing", hx("01 04 00 00")),
			header:  Header{Kind: KindControl, Codec: CodecRaw, Name: NameSessionClosing},
			payload: hx("01 04 00 00"),
		},
	}
}

// headerOf returns the header bytes of a whole frame, trusting its prefix.
func headerOf(t testing.TB, frame []byte) []byte {
	t.Helper()
	hl, pl := ParsePrefix(frame)
	if PrefixSize+hl+pl != len(frame) {
		t.Fatalf("prefix says %d+%d but frame has %d bytes after the prefix", hl, pl, len(frame)-PrefixSize)
	}
	return frame[PrefixSize : PrefixSize+hl]
}
