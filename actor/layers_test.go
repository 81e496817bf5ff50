package actor

import (
	"bytes"
	"testing"
)

// The layers' captured state crosses nodes in a move: it round-trips by name, a
// binding snapshot alone (what a build with one layer sent) is taken as the binding's,
// and bytes that do not decode are a typed error, never a panic.
func TestMoveLayersEncoding(t *testing.T) {
	if b := encodeLayers([]string{"binding", "topic"}, [][]byte{nil, nil}); b != nil {
		t.Fatalf("nothing captured encodes as %x, want nil", b)
	}
	b := encodeLayers([]string{"binding", "topic", "empty"}, [][]byte{{1, 2, 3}, []byte("seqs"), nil})
	got, err := decodeLayers(b)
	if err != nil || len(got) != 2 || !bytes.Equal(got["binding"], []byte{1, 2, 3}) || string(got["topic"]) != "seqs" {
		t.Fatalf("round trip: %v %v", got, err)
	}
	legacy := []byte{1, 0, 5, 'a'}
	if got, err := decodeLayers(legacy); err != nil || !bytes.Equal(got["binding"], legacy) || len(got) != 1 {
		t.Fatalf("a binding snapshot alone: %v %v", got, err)
	}
	for _, bad := range [][]byte{{layersMagic}, {layersMagic, 1}, {layersMagic, 1, 3, 'a'}, {layersMagic, 1, 1, 'a', 0, 0, 0, 9, 1},
		append(bytes.Clone(b), 0)} {
		if _, err := decodeLayers(bad); err == nil {
			t.Errorf("decodeLayers(%x) succeeded", bad)
		}
	}
}

func FuzzDecodeLayers(f *testing.F) {
	f.Add(encodeLayers([]string{"binding", "topic"}, [][]byte{{1, 2, 3}, []byte("seqs")}))
	f.Add([]byte{1, 0, 5, 'a'})
	f.Add([]byte{layersMagic, 2, 1, 'a', 0, 0, 0, 1, 7, 1, 'b', 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeLayers(b)
		if err != nil {
			return
		}
		total := 0
		for _, v := range got {
			total += len(v)
		}
		if total > len(b) {
			t.Fatalf("decoded %d bytes of layers from %d", total, len(b))
		}
	})
}
