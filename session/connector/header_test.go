package connector

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/wire"
)

// replyShapes encodes a spread of headers of every kind: the ones decodeReplyHeader
// should take and many it must leave to wire.DecodeHeader.
func replyShapes(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	flows := []struct {
		id     string
		origin wire.FlowOrigin
	}{{"", 0}, {"0192d2a4-7f3e-7a1b-8c2d-3e4f5a6b7c8d", wire.FlowApplication}, {"ffffffff-ffff-7fff-bfff-ffffffffffff", wire.FlowLifecycle}}
	for _, kind := range []wire.Kind{wire.KindSend, wire.KindRequest, wire.KindResponse, wire.KindError, wire.KindControl} {
		for _, codec := range []wire.Codec{wire.CodecRaw, wire.CodecJSON, wire.CodecMsgPack, wire.CodecProtobuf} {
			for _, seq := range []uint64{0, 1, math.MaxUint64} {
				for _, corr := range []string{"", "7", strings.Repeat("~", wire.MaxCorrelationLen)} {
					for _, fl := range flows {
						for _, md := range []wire.Metadata{nil, {}, {{Key: "k", Value: "v"}}} {
							for _, z := range []bool{false, true} {
								h := wire.Header{Kind: kind, Codec: codec, RequestSeq: seq, CorrelationID: corr,
									FlowID: fl.id, FlowOrigin: fl.origin, Metadata: md, Compressed: z}
								if kind != wire.KindResponse && kind != wire.KindError {
									h.Name = "n"
								}
								if kind == wire.KindControl {
									h = wire.Header{Kind: kind, Name: wire.NameHeartbeatPing}
								}
								if b, err := wire.AppendHeader(nil, &h); err == nil {
									out = append(out, b)
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// checkReplyAgrees is the property: whatever decodeReplyHeader accepts, DecodeHeader
// accepts too, with the same fields (the fast path skips correlation id and flow).
func checkReplyAgrees(t testing.TB, b []byte) (fast bool) {
	got, ok := decodeReplyHeader(b)
	if !ok {
		return false
	}
	want, err := wire.DecodeHeader(b)
	if err != nil {
		t.Fatalf("fast path accepted % x, DecodeHeader: %v", b, err)
	}
	want.CorrelationID, want.FlowID, want.FlowOrigin = "", "", 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("% x: fast %+v, DecodeHeader %+v", b, got, want)
	}
	return true
}

func TestDecodeReplyHeaderAgreesWithWire(t *testing.T) {
	shapes := replyShapes(t)
	fast := 0
	for _, b := range shapes {
		h, err := wire.DecodeHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if checkReplyAgrees(t, b) {
			fast++
		} else if (h.Kind == wire.KindResponse || h.Kind == wire.KindError) && h.RequestSeq != 0 && h.Metadata == nil {
			t.Fatalf("fast path refused the common reply shape %+v", h)
		}
	}
	if fast == 0 {
		t.Fatal("fast path never taken")
	}
	// Mutations: every byte set to interesting values, truncations, extensions, and
	// random multi-byte changes.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, b := range shapes {
		m := make([]byte, len(b)+1)
		for i := range b {
			for _, v := range []byte{0, 1, 2, 3, 4, 5, 0x10, 0x1f, 0x20, 0x21, '-', '7', '8', 'b', 'c', 'g', 0x7e, 0x7f, 0xf2, 0xff, b[i] ^ 1, b[i] + 1, b[i] - 1} {
				copy(m, b)
				m[i] = v
				checkReplyAgrees(t, m[:len(b)])
			}
		}
		for n := range len(b) {
			checkReplyAgrees(t, b[:n])
		}
		copy(m, b)
		m[len(b)] = 0
		checkReplyAgrees(t, m)
		for range 50 {
			copy(m, b)
			for range 1 + rng.IntN(3) {
				m[rng.IntN(len(b))] = byte(rng.Uint32())
			}
			checkReplyAgrees(t, m[:len(b)])
		}
	}
}

func FuzzDecodeReplyHeader(f *testing.F) {
	for _, b := range replyShapes(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkReplyAgrees(t, b) })
}

func TestEncodeIDs(t *testing.T) {
	for _, diagOff := range []bool{false, true} {
		c, err := New("tcp://127.0.0.1:1", Options{DiagnosticsOff: diagOff})
		if err != nil {
			t.Fatal(err)
		}
		for _, seq := range []uint64{0, 1, 9, 15, 16, 255, 256, 1 << 40, math.MaxUint64} {
			for _, md := range []bool{false, true} {
				for _, z := range []bool{false, true} {
					name := fmt.Sprintf("diagOff=%v/seq=%d/md=%v/z=%v", diagOff, seq, md, z)
					kind := wire.KindSend
					if seq > 0 {
						kind = wire.KindRequest
					}
					var opts []CallOption
					if md {
						opts = append(opts, WithMetadata("a", "b"), WithMetadata("c", "d"))
					}
					if z {
						opts = append(opts, WithCompression())
					}
					payload := bytes.Repeat([]byte("xy"), 100)
					now := time.UnixMilli(1_700_000_000_123)
					h := wire.Header{Kind: kind, Codec: wire.CodecJSON, RequestSeq: seq, Name: "some.name"}
					bp, err := c.encode(&h, payload, opts, seq, now)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					frame := *bp
					hl, pl := wire.ParsePrefix(frame)
					if wire.PrefixSize+hl+pl != len(frame) {
						t.Fatalf("%s: prefix %d+%d for %d bytes", name, hl, pl, len(frame))
					}
					got, err := wire.DecodeHeader(frame[wire.PrefixSize : wire.PrefixSize+hl])
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if seq > 0 && got.CorrelationID != fmt.Sprintf("%x", seq) || seq == 0 && got.CorrelationID != "" {
						t.Fatalf("%s: correlation id %q", name, got.CorrelationID)
					}
					if diagOff != (got.FlowOrigin == 0) || !diagOff && got.FlowOrigin != wire.FlowApplication {
						t.Fatalf("%s: flow %q/%d", name, got.FlowID, got.FlowOrigin)
					}
					if !diagOff && got.FlowID[:13] != fmt.Sprintf("%08x-%04x", uint64(now.UnixMilli())>>16, uint64(now.UnixMilli())&0xffff) {
						t.Fatalf("%s: flow %q does not carry the time", name, got.FlowID)
					}
					if got.Name != "some.name" || got.RequestSeq != seq || got.Compressed != z || (got.Metadata != nil) != md {
						t.Fatalf("%s: header %+v", name, got)
					}
					if !z && !bytes.Equal(frame[wire.PrefixSize+hl:], payload) {
						t.Fatalf("%s: payload", name)
					}
					putBuf(bp)
				}
			}
		}
	}
}

func TestFlowIDsAreValidUUIDv7(t *testing.T) {
	seen := make(map[string]bool)
	var b [wire.FlowIDLen]byte
	for range 10000 {
		now := time.Now()
		putFlowID(b[:], now)
		id := string(b[:])
		if !wire.ValidFlowID([]byte(id)) || seen[id] {
			t.Fatalf("flow id %q (seen %v)", id, seen[id])
		}
		seen[id] = true
		// The first 48 bits are the Unix milliseconds (RFC 9562 §5.7).
		if want := fmt.Sprintf("%012x", now.UnixMilli()); id[:8]+id[9:13] != want {
			t.Fatalf("flow id %q: timestamp %s, want %s", id, id[:8]+id[9:13], want)
		}
	}
}

// The connector's clock (one monotonic read per stamp) agrees with time.Now within a
// millisecond's rounding and never goes back.
func TestClockFollowsTimeNowAndNeverGoesBack(t *testing.T) {
	var c clock
	prev := c.now()
	for range 10000 {
		before := time.Now()
		got := c.now()
		after := time.Now()
		if got.Before(prev) {
			t.Fatalf("clock went back: %v after %v", got, prev)
		}
		// Wall time may differ from a fresh time.Now by the drift since the base was read.
		if got.UnixMilli() < before.UnixMilli()-1 || got.UnixMilli() > after.UnixMilli()+1 {
			t.Fatalf("clock says %v, time.Now %v..%v", got, before, after)
		}
		if got.Sub(before) < 0 || after.Sub(got) < 0 {
			t.Fatalf("monotonic reading %v is outside %v..%v", got, before, after)
		}
		prev = got
	}
}

func BenchmarkPutFlowID(b *testing.B) {
	var dst [wire.FlowIDLen]byte
	now := time.Now()
	for b.Loop() {
		putFlowID(dst[:], now)
	}
}
