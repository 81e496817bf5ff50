package wire_test

import (
	"bytes"
	"fmt"
	"io"

	"github.com/meshnode/meshnode/session/wire"
)

// A Request frame encoded with AppendFrame, then read back from a byte stream as a
// server does: Reader splits the stream into frames, DecodeHeader validates and decodes
// the header, the rest of the body is the payload.
func ExampleAppendFrame() {
	h := wire.Header{
		Kind:       wire.KindRequest,
		Codec:      wire.CodecJSON,
		RequestSeq: 1,
		Name:       "echo",
		Metadata:   wire.Metadata{{Key: "actor", Value: "lobby"}},
	}
	frame, err := wire.AppendFrame(nil, &h, []byte(`"hello"`))
	if err != nil {
		fmt.Println(err)
		return
	}

	r := wire.NewReader(bytes.NewReader(frame), 4096)
	headerLen, body, err := r.Next()
	if err != nil {
		fmt.Println(err)
		return
	}
	got, err := wire.DecodeHeader(body[:headerLen])
	if err != nil {
		fmt.Println(err)
		return
	}
	actor, _ := got.Metadata.Get("actor")
	fmt.Println(got.Kind == wire.KindRequest, got.RequestSeq, got.Name, actor, string(body[headerLen:]))

	_, _, err = r.Next()
	fmt.Println(err == io.EOF) // the stream ended at a frame boundary
	// Output:
	// true 1 echo lobby "hello"
	// true
}
