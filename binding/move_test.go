package binding

import (
	"errors"
	"testing"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
)

func TestBindingSnapshot_RoundTrip(t *testing.T) {
	for _, snap := range []bindingSnapshot{
		{owner: mesh.NodeID{RID: "owner", Generation: 7}, sessionRid: "s12", gen: 3, consumed: 40, owed: 2},
		{owner: mesh.NodeID{RID: "owner", Generation: 7}, sessionRid: "s12", gen: 3, sealed: true,
			relocation:  wire.RelocationID{High: 1, Low: 2},
			coordinator: wire.CoordinatorFence{OwnerID: "meshnode", LeaseGeneration: 5, NodeRID: "src", NodeGeneration: 9, ExpectedAuthorityStoreVersion: "v1"}},
	} {
		got, err := decodeBindingSnapshot(snap.encode())
		if err != nil {
			t.Fatal(err)
		}
		if got != snap {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, snap)
		}
	}
}

func TestBindingSnapshot_MalformedIsProtocolError(t *testing.T) {
	good := (&bindingSnapshot{owner: mesh.NodeID{RID: "owner", Generation: 7}, sessionRid: "s12", gen: 3}).encode()
	bad := map[string][]byte{
		"truncated":         good[:len(good)-1],
		"trailing byte":     append(append([]byte(nil), good...), 0),
		"unknown version":   append([]byte{2}, good[1:]...),
		"unknown flag":      append([]byte{1, 0x80}, good[2:]...),
		"zero binding gen":  (&bindingSnapshot{owner: mesh.NodeID{RID: "owner", Generation: 7}, sessionRid: "s12"}).encode(),
		"no session owner":  (&bindingSnapshot{sessionRid: "s12", gen: 3}).encode(),
		"no session rid":    (&bindingSnapshot{owner: mesh.NodeID{RID: "owner", Generation: 7}, gen: 3}).encode(),
		"zero relocation":   (&bindingSnapshot{owner: mesh.NodeID{RID: "owner", Generation: 7}, sessionRid: "s12", gen: 3, sealed: true}).encode(),
		"sealed, truncated": append([]byte{1, 1}, good[2:]...),
	}
	for name, data := range bad {
		if _, err := restoredBinding(data); !errors.Is(err, fault.ProtocolError) {
			t.Errorf("%s: %v, want a ProtocolError", name, err)
		}
	}
	cur, err := restoredBinding(good)
	if err != nil || cur.arriving == nil || cur.gen != 3 {
		t.Fatalf("restored %+v, %v: want the binding, waiting for its commit", cur, err)
	}
}

func TestParseSessionRID(t *testing.T) {
	if id, ok := parseSessionRID(sessionRID(42)); !ok || id != 42 {
		t.Fatalf("%v %v", id, ok)
	}
	for _, rid := range []string{"", "s", "x42", "s-1", "s4294967296", "s+1"} {
		if _, ok := parseSessionRID(rid); ok {
			t.Errorf("%q parsed", rid)
		}
	}
}
