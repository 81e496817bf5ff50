package codec_test

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// A registry with the standard codecs marshals a value with the codec a frame names and
// unmarshals it back; a payload that does not decode is an ErrDecode.
func ExampleRegistry() {
	type move struct {
		X, Y int
	}
	reg := codec.NewRegistry()

	for _, id := range []wire.Codec{wire.CodecJSON, wire.CodecMsgPack} {
		b, err := reg.Marshal(id, move{X: 1, Y: 2})
		if err != nil {
			fmt.Println(err)
			return
		}
		var back move
		if err := reg.Unmarshal(id, b, &back); err != nil {
			fmt.Println(err)
			return
		}
		c, _ := reg.Lookup(id)
		fmt.Printf("%s: %+v\n", c.ContentType(), back)
	}

	var m move
	err := reg.Unmarshal(wire.CodecJSON, []byte(`{"X":`), &m)
	fmt.Println(errors.Is(err, codec.ErrDecode))
	// Output:
	// application/json: {X:1 Y:2}
	// application/x-msgpack: {X:1 Y:2}
	// true
}
