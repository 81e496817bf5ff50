package cluster

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/test/proc"
)

// Two processes of different minor versions in one fleet (docs/upgrading.md): each
// binary says its version (meshnode version, meshnode_build_info), each node lists
// both members with the version and wire versions each announces, a session on one
// is served by a room on the other, and the room moves to the older node and back
// with its state.
func TestTwoMinorVersionsInOneFleet(t *testing.T) {
	versions := []string{"v1.3.0", "v1.4.0"}
	for _, v := range versions {
		out, err := exec.Command(proc.BinaryVersion(t, v), "version").Output()
		if err != nil || !strings.HasPrefix(string(out), "meshnode "+v+"\n") || !strings.Contains(string(out), "node metadata   3") {
			t.Fatalf("meshnode version of the %s binary: %v\n%s", v, err, out)
		}
	}
	old := proc.Start(t, proc.Config{ID: "node-old", Version: versions[0]})
	cur := proc.Start(t, proc.Config{ID: "node-new", Version: versions[1], Join: []string{old.Mesh}})
	nodes := []*proc.Node{old, cur}
	want := map[string]string{"node-old": versions[0], "node-new": versions[1]}
	for _, n := range nodes {
		proc.Eventually(t, n.ID+" lists both members with their versions", func() bool {
			ms := n.Members()
			if len(ms) != 2 {
				return false
			}
			for _, m := range ms {
				v := m.Versions
				if m.State != "alive" || v == nil || v.Build != want[m.RID] || v.Stream != 1 || v.Service != 1 || v.Meta != 3 || v.Snapshot != 1 {
					return false
				}
			}
			return true
		})
		text, err := n.Metrics()
		if err != nil || proc.Sum(text, "meshnode_build_info", "version="+want[n.ID], "node_meta=3") != 1 {
			t.Errorf("%s: no meshnode_build_info for %s", n.ID, want[n.ID])
		}
	}

	// A session on the newer node, bound to a room on the older one; the room moves to
	// the newer node and back, its count of requests served carried both ways.
	c := dial(t, cur.Endpoints["tcp"])
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var bound struct{ Node string }
	if err := c.Request(ctx, "bind", map[string]string{"actor": "upgrade-room"}, &bound); err != nil {
		t.Fatal(err)
	}
	served := int64(0)
	echo := func(node string) {
		t.Helper()
		var out struct {
			Node   string
			Served int64
		}
		if err := c.Request(ctx, "room.echo", map[string]int{"n": 1}, &out); err != nil {
			t.Fatalf("room.echo: %v", err)
		}
		served++
		if out.Node != node || out.Served != served {
			t.Fatalf("room.echo answered %+v, want node %s and served %d", out, node, served)
		}
	}
	move := func(to string) {
		t.Helper()
		out, err := exec.Command(proc.Binary(t), "relocate", "--admin", cur.Admin, "upgrade-room", to).CombinedOutput()
		if err != nil {
			t.Fatalf("relocate to %s: %v: %s", to, err, out)
		}
	}
	if bound.Node != "node-old" {
		move("node-old")
	}
	echo("node-old")
	echo("node-old")
	move("node-new")
	echo("node-new")
	move("node-old")
	echo("node-old")
	if raw, err := exec.Command(proc.Binary(t), "members", "--admin", old.Admin).Output(); err != nil ||
		!strings.Contains(string(raw), versions[0]) || !strings.Contains(string(raw), versions[1]) {
		t.Errorf("meshnode members on node-old: %v\n%s", err, raw)
	}
}
