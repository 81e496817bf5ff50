package meshtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/internal/nodert"
	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/store"
)

// Options tunes a test mesh. The zero value is fine.
type Options struct {
	// Timing is memberlist's timing (default TimingTest: fast convergence and failure
	// detection).
	Timing Timing
	// Logger receives the nodes' logs (default: discarded; many nodes logging to the
	// test log drown the failure that matters).
	Logger *slog.Logger
	// MeterProvider, per node index (nil: otel's global no-op).
	MeterProvider func(i int) metric.MeterProvider
	// Config adjusts node i's configuration before it starts (and before every
	// restart). It starts as meshnode.TestConfig(): OS-chosen ports on loopback, no
	// STREAM listener; add Kinds, Messages, Streams and Session, bounds. Its Store is
	// the cluster's (Cluster.Store): one in-memory store every node shares, as a fleet
	// shares a PostgreSQL server; set Store, StoreURL or DataDir to use another.
	Config func(i int, cfg *meshnode.Config)
	// OnStart runs after node i started (and after every restart), for what the
	// configuration cannot say (a handler on the node's records, say).
	OnStart func(i int, n *meshnode.Node)
	// ConvergeTimeout bounds Start's wait for every node to see every other (default 20 s).
	ConvergeTimeout time.Duration
	// NoTap leaves the record tap off: benchmarks send millions of records.
	NoTap bool
	// PeerWindowRecords and PeerWindowBytes set the flow-control window of every node
	// (0: the defaults).
	PeerWindowRecords int
	PeerWindowBytes   int64
}

// Timing picks the memberlist timing of a test mesh.
type Timing int

const (
	TimingTest  Timing = iota // mesh.PresetTest: fast, for tests
	TimingLocal               // mesh.PresetLocal: memberlist's DefaultLocalConfig
	TimingLAN                 // mesh.PresetLAN: the production default
)

func (t Timing) preset() mesh.Preset {
	switch t {
	case TimingLocal:
		return mesh.PresetLocal
	case TimingLAN:
		return mesh.PresetLAN
	}
	return mesh.PresetTest
}

// Cluster is a running test mesh.
type Cluster struct {
	t    testing.TB
	opts Options

	mu      sync.Mutex
	nodes   []*meshnode.Node
	running []bool
	tap     *Tap
	store   *store.Memory
}

// Store returns the in-memory store the cluster's nodes share (unless their Config
// names another): it outlives every node, so an Actor whose node was killed or
// restarted comes back with its last saved state.
func (c *Cluster) Store() *store.Memory { return c.store }

// Start starts n nodes joined through node 0 and waits until all see each other. The
// cluster stops with the test.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if opts.ConvergeTimeout == 0 {
		opts.ConvergeTimeout = 20 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{t: t, opts: opts, tap: &Tap{}, store: store.NewMemory(0)}
	c.nodes = make([]*meshnode.Node, n)
	c.running = make([]bool, n)
	t.Cleanup(c.stopAll)
	for i := 0; i < n; i++ {
		if err := c.startNode(i, "", 0, 0); err != nil {
			t.Fatalf("meshtest: start node %d: %v", i, err)
		}
	}
	if err := c.WaitConverged(opts.ConvergeTimeout); err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	return c
}

// startNode starts node i; rid and the ports are zero for a first start and the
// previous lifecycle's for a restart.
func (c *Cluster) startNode(i int, rid string, meshPort, remotePort int) error {
	cfg := meshnode.TestConfig()
	cfg.Timing = c.opts.Timing.preset()
	cfg.Logger = c.opts.Logger.With("node", i)
	cfg.NodeID, cfg.MeshPort, cfg.RemotePort = rid, meshPort, remotePort
	cfg.PeerWindowRecords, cfg.PeerWindowBytes = c.opts.PeerWindowRecords, c.opts.PeerWindowBytes
	// MESHNODE_TEST_FAST_PATHS=off runs a suite with the fast paths off (make test runs
	// the contract suites both ways): here, record coalescing between nodes and the
	// reuse of STREAM Send packets.
	cfg.NoRecordCoalescing = os.Getenv("MESHNODE_TEST_FAST_PATHS") == "off"
	cfg.NoPacketReuse = cfg.NoRecordCoalescing
	if c.opts.MeterProvider != nil {
		cfg.MeterProvider = c.opts.MeterProvider(i)
	}
	cfg.Store = c.store
	c.mu.Lock()
	for j, n := range c.nodes {
		if j != i && n != nil && c.running[j] {
			cfg.Join = append(cfg.Join, n.Mesh().MeshAddr())
			break
		}
	}
	c.mu.Unlock()
	if c.opts.Config != nil {
		c.opts.Config(i, &cfg)
	}
	n, err := meshnode.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	if !c.opts.NoTap {
		n.Mesh().Records().SetTap(c.tap.record)
	}
	if c.opts.OnStart != nil {
		c.opts.OnStart(i, n)
	}
	c.mu.Lock()
	c.nodes[i], c.running[i] = n, true
	c.mu.Unlock()
	return nil
}

// Node returns node i (its current lifecycle).
func (c *Cluster) Node(i int) *meshnode.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Len returns the number of node slots.
func (c *Cluster) Len() int { return len(c.nodes) }

// Running returns the indexes of the nodes that run.
func (c *Cluster) Running() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, r := range c.running {
		if r {
			out = append(out, i)
		}
	}
	return out
}

// Tap returns the cluster-wide record tap.
func (c *Cluster) Tap() *Tap { return c.tap }

// WaitConverged waits until every running node sees exactly the running nodes' current
// lifecycles as live members.
func (c *Cluster) WaitConverged(timeout time.Duration) error {
	return c.WaitUntil(timeout, func() bool {
		c.mu.Lock()
		var want []mesh.NodeID
		var nodes []*mesh.Node
		for i, r := range c.running {
			if r {
				want = append(want, c.nodes[i].ID())
				nodes = append(nodes, c.nodes[i].Mesh())
			}
		}
		c.mu.Unlock()
		for _, n := range nodes {
			live := n.Membership().Live()
			if len(live) != len(want) {
				return false
			}
			for _, id := range want {
				if !n.Membership().IsLive(id) {
					return false
				}
			}
		}
		return true
	})
}

// WaitUntil polls cond until it holds or timeout passes.
func (c *Cluster) WaitUntil(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop stops node i gracefully (Node.Shutdown): it drains and leaves, and the others
// see it as left.
func (c *Cluster) Stop(i int) {
	if n := c.halt(i); n != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	}
}

// Drain takes node i out of the cluster the way an operator does (Node.Drain): its
// Actors move to the other nodes, its sessions drain, it leaves. It returns how many
// Actors moved.
func (c *Cluster) Drain(i int) (int, error) {
	n := c.halt(i)
	if n == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	moved, err := n.Drain(ctx)
	if errors.Is(err, meshnode.ErrDrainIncomplete) {
		_ = n.Close() // the node kept running with what could not move: the test kit stops it
	}
	return moved, err
}

// Kill stops node i as a crash would, without leaving or draining: the others detect
// it as failed.
func (c *Cluster) Kill(i int) {
	if n := c.halt(i); n != nil {
		Kill(n)
	}
}

// halt marks node i stopped; it returns the node, or nil when it was not running.
func (c *Cluster) halt(i int) *meshnode.Node {
	c.mu.Lock()
	n, running := c.nodes[i], c.running[i]
	c.running[i] = false
	c.mu.Unlock()
	if !running {
		return nil
	}
	return n
}

// Restart starts node i again, under the same RID and a new, larger generation, joined
// to a running node. It returns the new lifecycle.
func (c *Cluster) Restart(i int) *meshnode.Node {
	c.t.Helper()
	c.mu.Lock()
	prev, running := c.nodes[i], c.running[i]
	c.mu.Unlock()
	if running {
		c.Kill(i)
	}
	// A restart is the same node: same RID, same ports, a new generation.
	rid := prev.ID().RID
	if err := c.startNode(i, rid, portOf(prev.Mesh().MeshAddr()), portOf(prev.Mesh().RemoteAddr())); err != nil {
		// Another test grabbed a freed port meanwhile: restart on new ports (the mesh
		// lets a dead node's RID come back on another address after a short while).
		c.t.Logf("meshtest: restart node %d on its ports failed (%v); using new ports", i, err)
		if err := c.startNode(i, rid, 0, 0); err != nil {
			c.t.Fatalf("meshtest: restart node %d: %v", i, err)
		}
	}
	return c.Node(i)
}

func (c *Cluster) stopAll() {
	for _, i := range c.Running() {
		c.Stop(i)
	}
}

// Tap records every record that crosses a node boundary in the cluster (both sides
// see it: one Outbound and one Inbound entry per delivered record).
type Tap struct {
	mu      sync.Mutex
	records []mesh.TapRecord
}

func (t *Tap) record(r mesh.TapRecord) {
	t.mu.Lock()
	t.records = append(t.records, r)
	t.mu.Unlock()
}

// Records returns a copy of what the tap saw.
func (t *Tap) Records() []mesh.TapRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]mesh.TapRecord(nil), t.records...)
}

// Reset forgets what the tap saw.
func (t *Tap) Reset() {
	t.mu.Lock()
	t.records = nil
	t.mu.Unlock()
}

// Commands returns the set of commands the tap saw, with counts.
func (t *Tap) Commands() map[wire.Command]int {
	out := map[wire.Command]int{}
	for _, r := range t.Records() {
		out[r.Command]++
	}
	return out
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Kill stops node n as a crash would: its mesh lifecycle ends without a leave (its
// peers detect it as failed) before its parts stop, so nothing it does afterwards
// reaches them. For tests of failure handling; a Cluster's nodes are killed with
// Cluster.Kill.
func Kill(n *meshnode.Node) { nodert.KillNode(n) }

// KillMesh stops a bare mesh node abruptly, without leaving.
func KillMesh(n *mesh.Node) { nodert.Kill(n) }

// RecordsActor is the name of every node's record receiver, the default target of
// SendEnvelope.
const RecordsActor = "$records"

// SendEnvelope sends a hand-built envelope from mesh node n (a meshnode.Node's Mesh()), as is, to the actor named
// actorName (RecordsActor for the node's record receiver) on the node at remoteAddr:
// no membership check, no flow control. For tests that play a misbehaving or stale
// peer.
func SendEnvelope(n *mesh.Node, remoteAddr, actorName string, env *meshpb.Envelope) {
	nodert.SystemOf(n).Root.Send(actor.NewPID(remoteAddr, actorName), env)
}
