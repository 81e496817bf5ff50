package wire

import "testing"

// The hot path: 24 with the bound-session tail (a session relaying a packet to its
// Actor) and 36 (an Actor pushing to its session), both with a 64-byte payload.
func benchRecords() []namedRecord {
	return []namedRecord{
		{"actorSend_tail_64B", actorSendTail(64)},
		{"boundSessionSend_64B", boundSessionSend(64)},
	}
}

func frameBytes(frames [][]byte) int64 {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	return int64(n)
}

func BenchmarkEncode(b *testing.B) {
	for _, c := range benchRecords() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(frameBytes(mustEncode(b, c.rec)))
			for b.Loop() {
				if _, err := Encode(c.rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendFrames is the allocation-free encode: buffers reused across records.
func BenchmarkAppendFrames(b *testing.B) {
	for _, c := range benchRecords() {
		b.Run(c.name, func(b *testing.B) {
			buf, frames := make([]byte, 0, 512), make([][]byte, 0, 3)
			b.ReportAllocs()
			b.SetBytes(frameBytes(mustEncode(b, c.rec)))
			for b.Loop() {
				var err error
				if buf, frames, err = AppendFrames(buf[:0], frames[:0], c.rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, c := range benchRecords() {
		frames := mustEncode(b, c.rec)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(frameBytes(frames))
			for b.Loop() {
				if _, err := Decode(frames); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
