package actor_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/store"
)

// The store envelope never panics on any input, refuses what it cannot vouch for with
// store.ErrCorrupt, and what it accepts encodes back to the same bytes.
func FuzzDecodeStateEnvelope(f *testing.F) {
	f.Add(actor.EncodeStateEnvelope(1, []byte{0x81, 0xa1, 'N', 0x05}))
	f.Add(actor.EncodeStateEnvelope(2, []byte("snapshot")))
	f.Add([]byte("MS"))
	f.Add([]byte{'M', 'S', 2, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		enc, payload, err := actor.DecodeStateEnvelope(b)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("error %v does not match store.ErrCorrupt", err)
			}
			return
		}
		if again := actor.EncodeStateEnvelope(enc, payload); !bytes.Equal(again, b) {
			t.Fatalf("accepted % x, encodes back to % x", b, again)
		}
	})
}
