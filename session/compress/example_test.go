package compress_test

import (
	"bytes"
	"fmt"

	"github.com/meshnode/meshnode/session/compress"
)

// A payload put into the LZ4 container and taken out again. DecodeLZ4's second
// argument caps the decompressed size.
func ExampleAppendLZ4() {
	payload := bytes.Repeat([]byte("meshnode "), 100)

	packed := compress.AppendLZ4(nil, payload)
	fmt.Println(len(packed) < len(payload))

	unpacked, err := compress.DecodeLZ4(packed, 64<<10)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(bytes.Equal(unpacked, payload))

	_, err = compress.DecodeLZ4(packed, 100) // over the cap
	fmt.Println(err != nil)
	// Output:
	// true
	// true
	// true
}
