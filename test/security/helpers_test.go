package security

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// newPKI makes a fleet CA for one test.
func newPKI(t testing.TB) *testkit.FleetPKI {
	t.Helper()
	p, err := testkit.NewFleetPKI("meshnode test fleet CA")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// issue writes a certificate for id, its key and the CA into a directory of the test's.
func issue(t testing.TB, p *testkit.FleetPKI, id string) testkit.NodeFiles {
	t.Helper()
	f, err := p.IssueFiles(t.TempDir(), id)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// newKey returns a fresh gossip key: raw, and as --gossip-key takes it.
func newKey(t testing.TB) ([]byte, string) {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k, base64.StdEncoding.EncodeToString(k)
}

// nodeID is the node id of in-process node i.
func nodeID(i int) string { return fmt.Sprintf("node-%d", i) }

// secure returns a meshtest Config hook that gives node i the id node-i, a certificate
// for it from p, and the gossip key.
func secure(t testing.TB, p *testkit.FleetPKI, key []byte) func(i int, cfg *meshnode.Config) {
	files := map[int]testkit.NodeFiles{}
	return func(i int, cfg *meshnode.Config) {
		f, ok := files[i]
		if !ok {
			f = issue(t, p, nodeID(i))
			files[i] = f
		}
		cfg.NodeID = nodeID(i)
		cfg.MeshTLSCertFile, cfg.MeshTLSKeyFile, cfg.MeshTLSCAFile = f.Cert, f.Key, f.CA
		if key != nil {
			cfg.GossipKeys = [][]byte{key}
		}
	}
}

func meshtestOptions(cfg func(i int, c *meshnode.Config)) meshtest.Options {
	return meshtest.Options{Config: cfg}
}
