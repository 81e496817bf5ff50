package mesh

import (
	"bytes"
	"testing"
)

// Without an admin address the metadata is version 1, byte for byte what nodes that
// know no version 2 write (so they keep reading it); with one it is version 2. Both
// decode to what was encoded, and truncated or padded metadata is refused.
func TestNodeMeta_Version1WithoutAdminAddrVersion2WithIt(t *testing.T) {
	v1 := nodeMeta{RID: "a", Generation: 7, RemoteAddr: "127.0.0.1:2", AdvertiseHost: "127.0.0.1"}
	b1, err := v1.encode()
	if err != nil {
		t.Fatal(err)
	}
	// The version 1 layout: version, flags, generation, then u8-length strings.
	want := append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 7, 1, 'a', 11}, "127.0.0.1:2"...)
	want = append(append(want, 9), "127.0.0.1"...)
	if !bytes.Equal(b1, want) {
		t.Fatalf("version 1 bytes %v, want %v", b1, want)
	}
	v2 := v1
	v2.AdminAddr, v2.Leaving = "127.0.0.1:9464", true
	b2, err := v2.encode()
	if err != nil {
		t.Fatal(err)
	}
	if b2[0] != 2 {
		t.Fatalf("with an admin address: version %d, want 2", b2[0])
	}
	for _, tc := range []struct {
		b    []byte
		want nodeMeta
	}{{b1, v1}, {b2, v2}} {
		got, err := decodeMeta(tc.b)
		if err != nil || got != tc.want {
			t.Errorf("decode %v: %+v %v, want %+v", tc.b, got, err, tc.want)
		}
		if _, err := decodeMeta(tc.b[:len(tc.b)-1]); err == nil {
			t.Errorf("truncated %v decoded", tc.b)
		}
		if _, err := decodeMeta(append(bytes.Clone(tc.b), 0)); err == nil {
			t.Errorf("padded %v decoded", tc.b)
		}
	}
	// Version 1 bytes read as version 2 lack the admin field; an unknown version is refused.
	b1as2 := append([]byte{2}, b1[1:]...)
	if _, err := decodeMeta(b1as2); err == nil {
		t.Error("version 2 without its admin field decoded")
	}
	if _, err := decodeMeta(append([]byte{3}, b2[1:]...)); err == nil {
		t.Error("version 3 decoded")
	}
}
