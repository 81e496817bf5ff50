package mesh

import (
	"bytes"
	"testing"

	"github.com/meshnode/meshnode/mesh/meshpb"
)

// batchRecords decodes a batch into owned copies of its records.
func batchRecords(b []byte) ([]string, [][][]byte, error) {
	var targets []string
	var frames [][][]byte
	_, _, err := walkBatch(b, func(r *batchRecord) {
		targets = append(targets, string(r.target))
		var fs [][]byte
		for _, f := range r.frames[:r.nframe] {
			fs = append(fs, bytes.Clone(f))
		}
		frames = append(frames, fs)
	})
	return targets, frames, err
}

// FuzzWalkBatch: the decoder of coalesced envelopes never panics on a peer's bytes,
// never reads past them, and what it accepts encodes back to records that decode the
// same.
func FuzzWalkBatch(f *testing.F) {
	f.Add(appendBatchRecord(nil, "", [][]byte{[]byte("ZM\x01\x18head"), []byte("meta"), []byte("payload")}))
	f.Add(appendBatchRecord(appendBatchRecord(nil, "a/room/1", [][]byte{[]byte("one")}), "", [][]byte{[]byte("two"), []byte("2")}))
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		targets, frames, err := batchRecords(b)
		// A RunCursor reads the same records (it never panics on any bytes, and stops
		// at the first that are not a record).
		var c RunCursor
		c.Reset(&meshpb.Envelope{Batch: b})
		n := 0
		for rec, ok := c.Next(); ok; rec, ok = c.Next() {
			if err == nil && (n >= len(frames) || len(rec.Frames) != len(frames[n])) {
				t.Fatalf("cursor record %d: %d frames, walkBatch gave %v", n, len(rec.Frames), frames)
			}
			if err == nil {
				for j := range rec.Frames {
					if !bytes.Equal(rec.Frames[j], frames[n][j]) {
						t.Fatalf("cursor record %d frame %d differs", n, j)
					}
				}
			}
			n++
		}
		if err != nil {
			return
		}
		if n != len(targets) {
			t.Fatalf("cursor read %d records, walkBatch %d", n, len(targets))
		}
		var again []byte
		for i := range targets {
			if len(frames[i]) < 1 || len(frames[i]) > 3 {
				t.Fatalf("record %d has %d frames", i, len(frames[i]))
			}
			again = appendBatchRecord(again, targets[i], frames[i])
		}
		t2, f2, err := batchRecords(again)
		if err != nil {
			t.Fatalf("re-encoded batch rejected: %v", err)
		}
		if len(t2) != len(targets) {
			t.Fatalf("%d records, then %d", len(targets), len(t2))
		}
		for i := range targets {
			if t2[i] != targets[i] || len(f2[i]) != len(frames[i]) {
				t.Fatalf("record %d changed", i)
			}
			for j := range frames[i] {
				if !bytes.Equal(f2[i][j], frames[i][j]) {
					t.Fatalf("record %d frame %d changed", i, j)
				}
			}
		}
	})
}
