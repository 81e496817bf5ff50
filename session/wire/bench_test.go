package wire

import (
	"bytes"
	"testing"
)

// benchHeaders are the shapes the server sees most: the digest examples plus what the
// TypeScript connector actually sends (every Request with correlation id and flow).
func benchHeaders() []struct {
	name string
	h    Header
} {
	exs := examples()
	return []struct {
		name string
		h    Header
	}{
		{"request_metadata", exs[0].header},
		{"request_ts_connector", Header{Kind: KindRequest, Codec: CodecJSON, RequestSeq: 42, Name: "chat.send",
			CorrelationID: "2a", FlowID: testFlowID, FlowOrigin: FlowApplication}},
		{"response", exs[1].header},
		{"send", exs[2].header},
		{"heartbeat_ping", exs[3].header},
	}
}

func BenchmarkDecodeHeader(b *testing.B) {
	for _, bh := range benchHeaders() {
		enc, err := AppendHeader(nil, &bh.h)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bh.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := DecodeHeader(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAppendFrame(b *testing.B) {
	payload := []byte(`{"t":"hi"}`)
	dst := make([]byte, 0, 512)
	for _, bh := range benchHeaders() {
		b.Run(bh.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = AppendFrame(dst[:0], &bh.h, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReaderNext measures the read loop's per-frame cost: wait, then consume.
func BenchmarkReaderNext(b *testing.B) {
	frame := examples()[0].frame
	r := NewReader(&loopReader{data: bytes.Repeat(frame, 64)}, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if ok, err := r.WaitFrame(); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if _, _, err := r.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeHeaderInPlaceTo is the server's decode of a connector's Send (name
// and flow): into a Header it reuses, its strings in the frame's own buffer.
func BenchmarkDecodeHeaderInPlaceTo(b *testing.B) {
	in := Header{Kind: KindSend, Codec: CodecJSON, Name: "tick", FlowID: testFlowID, FlowOrigin: FlowApplication}
	enc, err := AppendHeader(nil, &in)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	var h Header
	for b.Loop() {
		if err := DecodeHeaderInPlaceTo(&h, enc); err != nil {
			b.Fatal(err)
		}
	}
}
