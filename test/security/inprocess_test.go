package security

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/test/fleet"
)

// A fleet with mutual TLS and encrypted gossip works as one without: a client bound
// to an Actor on the other node gets its answers.
func TestMeshTLS_SecuredFleetServesCrossNode(t *testing.T) {
	p := newPKI(t)
	key, _ := newKey(t)
	f := fleet.Start(t, 2, fleet.Options{Mesh: meshtestOptions(secure(t, p, key))})
	id := f.IDOn(t, "room", 1, "tls-")
	c := f.Connect(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out map[string]any
	if err := c.Request(ctx, "bind", map[string]string{"actor": id}, &out); err != nil {
		t.Fatal(err)
	}
	if err := c.Request(ctx, "room.echo", map[string]string{"x": "y"}, &out); err != nil {
		t.Fatal(err)
	}
	if out["node"] != nodeID(1) {
		t.Fatalf("answered by %v, want %s", out["node"], nodeID(1))
	}
	for i := range 2 {
		st := f.Node(i).Security()
		if st.Mesh.TLS == nil || !st.Mesh.Gossip.Encrypted {
			t.Fatalf("node %d security: %+v", i, st)
		}
	}
}
