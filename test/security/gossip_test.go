package security

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// keyedCluster starts n in-process nodes whose gossip is encrypted with the keys of
// keyFile (each its own copy), labelled label.
func keyedCluster(t *testing.T, n int, keyFiles []string, label string) *meshtest.Cluster {
	t.Helper()
	return meshtest.Start(t, n, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.GossipKeyFile = keyFiles[i]
		cfg.ClusterLabel = label
		cfg.ReloadInterval = -1 // the test reloads when it means to
	}})
}

func writeKeys(t *testing.T, path string, keys ...[]byte) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# gossip keys, the primary first\n")
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

func keyFiles(t *testing.T, n int, keys ...[]byte) []string {
	t.Helper()
	dir := t.TempDir()
	out := make([]string, n)
	for i := range out {
		out[i] = filepath.Join(dir, nodeID(i)+".keys")
		writeKeys(t, out[i], keys...)
	}
	return out
}

// gossipRefused is node i's count of gossip refused for reason.
func gossipRefused(c *meshtest.Cluster, i int, reason string) int64 {
	return c.Node(i).Security().Mesh.Refused["gossip."+reason]
}

// joinAttempt starts a bare mesh node that tries to join c through node 0, with keys
// and label, and returns it (stopped with the test).
func joinAttempt(t *testing.T, c *meshtest.Cluster, rid string, keys [][]byte, label string) *mesh.Node {
	t.Helper()
	n, err := mesh.Start(context.Background(), mesh.Config{RID: rid, GossipKeys: keys, ClusterLabel: label,
		Join: []string{c.Node(0).MeshAddr()}, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meshtest.KillMesh(n) })
	return n
}

// A node with another key, with no key, or with the right key but another cluster's
// label cannot join: the fleet refuses its gossip (counted by reason) and neither side
// lists the other; the fleet keeps its members.
func TestGossip_WrongKeyNoKeyOrOtherLabelCannotJoin(t *testing.T) {
	good, _ := newKey(t)
	bad, _ := newKey(t)
	c := keyedCluster(t, 2, keyFiles(t, 2, good), "prod")
	cases := []struct {
		name, reason, label string
		keys                [][]byte
	}{
		{"another key", "wrong_key", "prod", [][]byte{bad}},
		{"no key", "unencrypted", "prod", nil},
		{"another label", "label", "staging", [][]byte{good}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := gossipRefused(c, 0, tc.reason)
			n := joinAttempt(t, c, "outsider-"+tc.reason, tc.keys, tc.label)
			testkit.Eventually(t, wait, "node-0 refuses the outsider's gossip ("+tc.reason+")", func() bool { return gossipRefused(c, 0, tc.reason) > before })
			if _, ok := c.Node(0).Membership().Member(n.ID().RID); ok {
				t.Fatal("node-0 lists the outsider")
			}
			if got := len(n.Membership().Live()); got != 1 {
				t.Fatalf("the outsider sees %d members, want itself only", got)
			}
		})
	}
	for i := range 2 {
		if got := len(c.Node(i).Membership().Live()); got != 2 {
			t.Fatalf("node %d sees %d members, want 2", i, got)
		}
	}
}

// A key rotation on a live fleet: the new key is added to every node's key file, then
// made the primary, then the old one removed, each step reloaded on every node before
// the next. No member is lost on the way, and at the end a node with only the new key
// joins while one with only the old key cannot.
func TestGossip_KeyRotationWithALiveFleetLosesNoMember(t *testing.T) {
	old, _ := newKey(t)
	fresh, _ := newKey(t)
	files := keyFiles(t, 3, old)
	c := keyedCluster(t, 3, files, "")
	gens := map[string]uint64{}
	for i := range 3 {
		gens[c.Node(i).ID().RID] = c.Node(i).ID().Generation
	}
	var failed atomic.Int64
	for i := range 3 {
		unsub := c.Node(i).Membership().Subscribe(func(e mesh.MemberEvent) {
			if e.Type != mesh.EventJoined {
				failed.Add(1)
			}
		})
		defer unsub()
	}
	step := func(what string, keys [][]byte, wantPrimary []byte) {
		t.Helper()
		for i := range 3 {
			writeKeys(t, files[i], keys...)
			if err := c.Node(i).Reload(); err != nil {
				t.Fatalf("%s: node %d reload: %v", what, i, err)
			}
			g := c.Node(i).Security().Mesh.Gossip
			if g.Keys != len(keys) || g.Primary != mesh.KeyID(wantPrimary) {
				t.Fatalf("%s: node %d has %d keys, primary %s; want %d, %s", what, i, g.Keys, g.Primary, len(keys), mesh.KeyID(wantPrimary))
			}
		}
		// Gossip under the new keys reaches everyone: a full round of probes and
		// gossip must pass with every member staying alive.
		for i := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			ms := c.Node(i).Membership().Members(ctx) // probes every live member now
			cancel()
			for _, m := range ms {
				if m.State != mesh.StateAlive || gens[m.ID.RID] != m.ID.Generation {
					t.Fatalf("%s: node %d sees %s %s (generation %d)", what, i, m.ID.RID, m.State, m.ID.Generation)
				}
			}
		}
	}
	step("add the new key", [][]byte{old, fresh}, old)
	step("make it the primary", [][]byte{fresh, old}, fresh)
	step("remove the old key", [][]byte{fresh}, fresh)
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d members failed or left during the rotation", n)
	}
	before := gossipRefused(c, 0, "wrong_key")
	stale := joinAttempt(t, c, "stale", [][]byte{old}, "")
	testkit.Eventually(t, wait, "a node with only the old key is refused", func() bool { return gossipRefused(c, 0, "wrong_key") > before })
	if _, ok := c.Node(0).Membership().Member(stale.ID().RID); ok {
		t.Fatal("a node with only the old key joined")
	}
	joiner := joinAttempt(t, c, "joiner", [][]byte{fresh}, "")
	testkit.Eventually(t, wait, "a node with only the new key joins", func() bool { return c.Node(0).Membership().IsLive(joiner.ID()) })
}
