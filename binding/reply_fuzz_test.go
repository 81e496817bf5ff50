package binding

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/meshnode/meshnode/internal/traceprop"
	swire "github.com/meshnode/meshnode/session/wire"
)

// FuzzDecodeReply: the $zlink.reply envelope of record 36 comes from a peer node, so
// its decoder must never panic or read past the bytes, whatever a forged or truncated
// envelope says (a 0x83/0x84 kind byte whose trace-context lengths overrun, a
// malformed traceparent or tracestate inside it): it fails with errBadReply (the
// session owner then drops the reply, counted) or decodes to a Response or Error whose
// payload is the tail of the bytes and which encodes back to them. The trace context
// it yields goes through the same extraction as a client's, which starts a new root
// for a malformed one and never panics. testdata/fuzz/FuzzDecodeReply holds the seeds
// as files.
func FuzzDecodeReply(f *testing.F) {
	tp := traceprop.Fields{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
	f.Add(encodeReply(1, swire.KindResponse, []byte(`{"ok":true}`)))
	f.Add(encodeReply(2, swire.KindError, []byte(`{"code":"not_found","message":"m"}`)))
	f.Add(encodeTracedReply(3, swire.KindResponse, tp, []byte("payload")))
	f.Add(encodeTracedReply(4, swire.KindError, traceprop.Fields{Parent: tp.Parent}, nil))
	f.Add(encodeTracedReply(5, swire.KindResponse, traceprop.Fields{Parent: "zz-not-a-traceparent", State: "=,=,"}, []byte("x")))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0x83})                // flag, nothing after it
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0x84, 0xff, 'a'})     // parent length past the end
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0x83, 0, 0xff, 0xff}) // state length past the end
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0x03})                // sequence 0
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0x81, 0, 0, 0})       // traced, but not a reply kind
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		seq, kind, payload, tc, err := decodeReply(b)
		if !bytes.Equal(b, in) {
			t.Fatal("the decoder wrote into its input")
		}
		if err != nil {
			if !errors.Is(err, errBadReply) {
				t.Fatalf("error %v is not errBadReply", err)
			}
			return
		}
		if seq == 0 || (kind != swire.KindResponse && kind != swire.KindError) {
			t.Fatalf("accepted sequence %d kind %d", seq, kind)
		}
		if !bytes.HasSuffix(b, payload) {
			t.Fatal("the payload is not the tail of the envelope")
		}
		traced := b[8]&replyTraceFlag != 0
		switch {
		case !traced:
			if tc != (traceprop.Fields{}) {
				t.Fatalf("an envelope without the flag yielded a trace context %+v", tc)
			}
			if got := encodeReply(seq, kind, payload); !bytes.Equal(got, b) {
				t.Fatalf("re-encoded % x, want % x", got, b)
			}
		case tc.Parent != "":
			if got := encodeTracedReply(seq, kind, tc, payload); !bytes.Equal(got, b) {
				t.Fatalf("re-encoded % x, want % x", got, b)
			}
		}
		// What a session owner does with it: a malformed context is a new root, never
		// a panic; a valid one is a remote parent.
		if _, bad := traceprop.Extract(context.Background(), tc); bad && tc.Parent == "" {
			t.Fatal("an absent traceparent counted as malformed")
		}
	})
}
