package binding

import (
	"bytes"
	"testing"

	"github.com/meshnode/meshnode/internal/traceprop"
	swire "github.com/meshnode/meshnode/session/wire"
)

// TestTraceReplyEnvelope: a traced $zlink.reply decodes to the same sequence, kind and
// payload as the plain one, plus the trace context; without one, the envelope is the
// plain layout byte for byte; a flagged envelope cut short is malformed.
func TestTraceReplyEnvelope(t *testing.T) {
	payload := []byte(`{"ok":true}`)
	plain := encodeReply(7, swire.KindResponse, payload)
	if want := append([]byte{0, 0, 0, 0, 0, 0, 0, 7, 3}, payload...); !bytes.Equal(plain, want) {
		t.Fatalf("plain envelope % x, want % x", plain, want)
	}
	if got := encodeTracedReply(7, swire.KindResponse, traceprop.Fields{}, payload); !bytes.Equal(got, plain) {
		t.Errorf("no trace context must give the plain envelope: % x", got)
	}
	f := traceprop.Fields{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
	for _, kind := range []swire.Kind{swire.KindResponse, swire.KindError} {
		traced := encodeTracedReply(9, kind, f, payload)
		if traced[8] != byte(kind)|0x80 {
			t.Errorf("kind byte %#x", traced[8])
		}
		seq, k, p, tc, err := decodeReply(traced)
		if err != nil || seq != 9 || k != kind || !bytes.Equal(p, payload) || tc != f {
			t.Errorf("decoded %d %d %q %+v %v", seq, k, p, tc, err)
		}
		for cut := 9; cut < 9+1+len(f.Parent)+2; cut++ {
			if _, _, _, _, err := decodeReply(traced[:cut]); err == nil {
				t.Errorf("a traced envelope cut at %d decoded", cut)
			}
		}
	}
	seq, k, p, tc, err := decodeReply(plain)
	if err != nil || seq != 7 || k != swire.KindResponse || !bytes.Equal(p, payload) || tc != (traceprop.Fields{}) {
		t.Errorf("plain decoded %d %d %q %+v %v", seq, k, p, tc, err)
	}
}
