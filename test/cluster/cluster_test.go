// Package cluster tests meshnode fleets of real processes (test/proc): three processes
// joined by gossip, one killed with SIGKILL and restarted; bindings across processes;
// the flow control toward a peer that stopped reading.
package cluster

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/test/proc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proc.Cleanup()
	os.Exit(code)
}

const wait = proc.Wait

var staleDrops = regexp.MustCompile(`zlink_mesh_node_messages_dropped_total\{[^}]*reason="stale_target"[^}]*\} (\d+)`)

func staleCount(n *proc.Node) int {
	text, err := n.Metrics()
	if err != nil {
		return -1
	}
	m := staleDrops.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

func find(ms []proc.Member, rid string) (proc.Member, bool) {
	for _, m := range ms {
		if m.RID == rid {
			return m, true
		}
	}
	return proc.Member{}, false
}

// startFleet starts n processes node-0..node-(n-1) joined through node-0, on ports
// chosen up front (so that a restarted process takes its addresses back), and waits
// until each sees all alive.
func startFleet(t *testing.T, n int, timing string) []*proc.Node {
	t.Helper()
	nodes := make([]*proc.Node, n)
	for i := range nodes {
		cfg := proc.Config{
			ID:      fmt.Sprintf("node-%d", i),
			Admin:   fmt.Sprintf("127.0.0.1:%d", proc.FreePort(t)),
			Mesh:    fmt.Sprintf("127.0.0.1:%d", proc.FreePort(t)),
			Remote:  fmt.Sprintf("127.0.0.1:%d", proc.FreePort(t)),
			Streams: []string{fmt.Sprintf("tcp://127.0.0.1:%d", proc.FreePort(t))},
			Timing:  timing,
		}
		if i > 0 {
			cfg.Join = []string{nodes[0].Mesh}
		}
		nodes[i] = proc.Start(t, cfg)
	}
	for _, p := range nodes {
		proc.Eventually(t, p.ID+" sees every member alive", func() bool { return p.Alive() == n })
	}
	return nodes
}

// Three processes join; one is killed with SIGKILL and the others mark it failed; it
// restarts under a new generation and rejoins; a record addressed to its old
// generation is rejected as stale.
func TestThreeProcessesKillRestartStaleRecord(t *testing.T) {
	procs := startFleet(t, 3, "test")
	before, _ := find(procs[0].Members(), "node-2")

	procs[2].Kill()
	for _, p := range procs[:2] {
		proc.Eventually(t, p.ID+" marks node-2 failed", func() bool {
			m, ok := find(p.Members(), "node-2")
			return ok && m.State == "dead" && m.Generation == before.Generation
		})
	}

	procs[2] = proc.Start(t, procs[2].Config)
	var after proc.Member
	proc.Eventually(t, "node-0 sees node-2 alive under a new generation", func() bool {
		m, ok := find(procs[0].Members(), "node-2")
		after = m
		return ok && m.State == "alive" && m.Generation > before.Generation
	})

	// An in-process node joins the fleet and plays a peer that still addresses node-2's
	// previous lifecycle.
	peer, err := mesh.Start(context.Background(), mesh.Config{Join: []string{procs[0].Mesh}, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatal(err)
	}
	defer meshtest.KillMesh(peer)
	proc.Eventually(t, "peer sees node-2's new lifecycle", func() bool {
		return peer.Membership().IsLive(mesh.NodeID{RID: "node-2", Generation: after.Generation})
	})
	frames, err := wire.Encode(&wire.Record{Body: &wire.BoundSessionReplaced{
		ActorAuthority: wire.ActorRouteFence{Actor: wire.ActorRef{ID: "a", Generation: 1}, TargetNodeRID: peer.ID().RID,
			TargetNodeGeneration: peer.ID().Generation, ExpectedAuthorityOwnerGeneration: 1, ExpectedOwnerLeaseGeneration: 1},
		RetiredSession: wire.SessionFence{OwnerNodeRID: "node-2", OwnerNodeGeneration: before.Generation, OwnerID: "s",
			OwnerLeaseGeneration: 1, SessionRID: "s", BindingGeneration: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n := staleCount(procs[2]); n != 0 {
		t.Fatalf("stale drops before the record: %d", n)
	}
	id := peer.ID()
	meshtest.SendEnvelope(peer, procs[2].Remote, meshtest.RecordsActor, &meshpb.Envelope{FromRid: id.RID, FromGeneration: id.Generation,
		ToRid: "node-2", ToGeneration: before.Generation, Frames: frames})
	proc.Eventually(t, "node-2 counts the record to its old generation as stale", func() bool { return staleCount(procs[2]) == 1 })
}
