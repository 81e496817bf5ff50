package mesh

import (
	"bytes"
	"strings"
	"testing"
)

// Without an admin address the metadata is version 1, byte for byte what nodes that
// know no version 2 write (so they keep reading it); with one it is version 2. Both
// decode to what was encoded, and truncated or padded metadata is refused.
func TestNodeMeta_Version1WithoutAdminAddrVersion2WithIt(t *testing.T) {
	v1 := nodeMeta{RID: "a", Generation: 7, RemoteAddr: "127.0.0.1:2", AdvertiseHost: "127.0.0.1"}
	b1, err := v1.encode(false)
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
	b2, err := v2.encode(false)
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
		t.Error("version 2 fields read as version 3 decoded")
	}
	if _, err := decodeMeta(append([]byte{0}, b1[1:]...)); err == nil {
		t.Error("version 0 decoded")
	}
}

// Version 3 carries the announced versions after the admin address (empty or not);
// a version 3 reader takes its fields and ignores what a later version appends, and
// reads a later version's first byte as a version 3 it extends.
func TestNodeMeta_Version3CarriesVersionsAndToleratesWhatFollows(t *testing.T) {
	vs := Versions{Build: "v1.4.0", Revision: "d8059cb2f1a7", Stream: 1, Service: 1, Meta: 3, Snapshot: 1}
	for _, admin := range []string{"", "127.0.0.1:9464"} {
		m := nodeMeta{RID: "node-a", Generation: 9, RemoteAddr: "127.0.0.1:2", AdvertiseHost: "127.0.0.1", AdminAddr: admin, Versions: vs}
		b, err := m.encode(true)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != 3 {
			t.Fatalf("version %d, want 3", b[0])
		}
		got, err := decodeMeta(b)
		if err != nil || got != m {
			t.Fatalf("decode: %+v %v, want %+v", got, err, m)
		}
		// Written as version 1 or 2, the versions are left out.
		old, err := m.encode(false)
		if err != nil {
			t.Fatal(err)
		}
		want := m
		want.Versions = Versions{}
		if got, err := decodeMeta(old); err != nil || got != want || (admin == "") != (old[0] == 1) {
			t.Errorf("encode(false): version %d, %+v %v", old[0], got, err)
		}
		// A later version: more wire versions and a field after them.
		later := append([]byte{4}, b[1:len(b)-5]...)
		later = append(later, 6, 1, 1, 4, 1, 7, 7)
		later = append(later, 3, 'x', 'y', 'z')
		got, err = decodeMeta(later)
		want = m
		want.Versions.Meta = 4
		if err != nil || got != want {
			t.Errorf("a version 4 metadata: %+v %v, want %+v", got, err, want)
		}
		for cut := 1; cut <= 5+len(vs.Revision); cut++ {
			if _, err := decodeMeta(b[:len(b)-cut]); err == nil {
				t.Errorf("version 3 cut by %d decoded", cut)
			}
		}
	}
	// The largest announced strings still fit memberlist's limit with a long RID and
	// addresses; longer ones are refused, never cut silently.
	m := nodeMeta{RID: strings.Repeat("r", 64), Generation: 1, RemoteAddr: "[2001:db8::1]:8090", AdvertiseHost: "2001:db8::1",
		AdminAddr: "[2001:db8::1]:9464", Versions: Versions{Build: strings.Repeat("v", maxBuildLen), Revision: strings.Repeat("f", maxRevisionLen)}}
	if b, err := m.encode(true); err != nil || len(b) > maxMetaSize {
		t.Errorf("largest versions: %d bytes, %v", len(b), err)
	}
	m.Versions.Build += "x"
	if _, err := m.encode(true); err == nil {
		t.Error("a build string over the bound was encoded")
	}
}
