package mesh_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
)

const wait = 15 * time.Second

// readers gives each node index its own metric reader.
type readers struct {
	mu sync.Mutex
	r  map[int]*sdkmetric.ManualReader
}

func (rs *readers) provider(i int) metric.MeterProvider {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.r == nil {
		rs.r = map[int]*sdkmetric.ManualReader{}
	}
	r := sdkmetric.NewManualReader()
	rs.r[i] = r
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
}

// counter sums the data points of a counter whose attributes include want.
func (rs *readers) counter(t *testing.T, i int, name string, want map[string]string) int64 {
	t.Helper()
	rs.mu.Lock()
	r := rs.r[i]
	rs.mu.Unlock()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
		points:
			for _, dp := range sum.DataPoints {
				for k, v := range want {
					if got, ok := dp.Attributes.Value(attributeKey(k)); !ok || got.AsString() != v {
						continue points
					}
				}
				total += dp.Value
			}
		}
	}
	return total
}

func bindRecord(corr uint64, target mesh.NodeID) *wire.Record {
	return &wire.Record{Body: &wire.BoundSessionBind{
		Correlation: corr,
		Actor: wire.ActorRouteFence{
			Actor:                wire.ActorRef{ID: "a", Generation: 1},
			TargetNodeRID:        target.RID,
			TargetNodeGeneration: target.Generation, ExpectedAuthorityOwnerGeneration: 1, ExpectedOwnerLeaseGeneration: 1,
		},
		SessionRID: "s",
		Binding:    wire.BindingTransition{State: wire.BindingActive, Generation: 1},
	}}
}

// Three in-process nodes converge: each sees the other two alive with their current
// generations.
func TestThreeNodesConverge(t *testing.T) {
	c := meshtest.Start(t, 3, meshtest.Options{})
	for i := 0; i < 3; i++ {
		members := c.Node(i).Membership().Members(context.Background())
		if len(members) != 3 {
			t.Fatalf("node %d sees %d members", i, len(members))
		}
		for _, m := range members {
			if m.State != mesh.StateAlive {
				t.Errorf("node %d sees %s as %s", i, m.ID, m.State)
			}
		}
	}
}

// A node that joined through a seed sees the seed's members as soon as Start returns:
// a node that saw itself alone would hold every directory entry and place fresh
// activations of Actors that live elsewhere (found by the chaos suite, on a restart).
func TestStartReturnsWithTheSeedsMembersLive(t *testing.T) {
	c := meshtest.Start(t, 3, meshtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for round := 0; round < 5; round++ {
		n, err := mesh.Start(ctx, mesh.Config{Preset: mesh.PresetTest, Logger: slog.New(slog.DiscardHandler),
			Join: []string{c.Node(round % 3).Mesh().MeshAddr()}})
		if err != nil {
			t.Fatal(err)
		}
		live := n.Membership().Live()
		left := n.ID()
		_ = n.Leave(context.Background())
		if len(live) != 4 {
			t.Fatalf("round %d: Start returned seeing %d live members, want 4: %v", round, len(live), live)
		}
		// The next round joins through another seed: it must not hear of this node as
		// live from a seed that has not processed its leave yet.
		if err := c.WaitUntil(wait, func() bool {
			for i := 0; i < 3; i++ {
				if c.Node(i).Membership().IsLive(left) {
					return false
				}
			}
			return true
		}); err != nil {
			t.Fatalf("round %d: the seeds still see the node that left: %v", round, err)
		}
	}
}

// Membership events: a graceful stop is "left", a kill is "failed", and a restart
// joins under a new, larger generation.
func TestMembershipEventsLeftFailedRejoin(t *testing.T) {
	c := meshtest.Start(t, 4, meshtest.Options{})
	var mu sync.Mutex
	var events []mesh.MemberEvent
	unsub := c.Node(0).Membership().Subscribe(func(e mesh.MemberEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	defer unsub()
	has := func(typ mesh.EventType, id mesh.NodeID) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range events {
				if e.Type == typ && e.Member.ID == id {
					return true
				}
			}
			return false
		}
	}
	leaver, victim := c.Node(1).ID(), c.Node(2).ID()
	c.Stop(1)
	if err := c.WaitUntil(wait, has(mesh.EventLeft, leaver)); err != nil {
		t.Fatalf("no left event for %s: %v", leaver, err)
	}
	c.Kill(2)
	if err := c.WaitUntil(wait, has(mesh.EventFailed, victim)); err != nil {
		t.Fatalf("no failed event for %s: %v", victim, err)
	}
	if m, ok := c.Node(0).Membership().Member(victim.RID); !ok || m.State != mesh.StateDead {
		t.Fatalf("killed node state %+v", m)
	}
	reborn := c.Restart(2).ID()
	if reborn.RID != victim.RID || reborn.Generation <= victim.Generation {
		t.Fatalf("restart %s after %s: want same RID, larger generation", reborn, victim)
	}
	if err := c.WaitUntil(wait, has(mesh.EventJoined, reborn)); err != nil {
		t.Fatalf("no joined event for %s: %v", reborn, err)
	}
	if err := c.WaitConverged(wait); err != nil {
		t.Fatal(err)
	}
}

// A record travels between nodes to the registered handler, and the tap sees it leave
// one node and enter the other.
func TestRecordDeliveredAndTapped(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{})
	got := make(chan mesh.NodeID, 1)
	c.Node(1).Records().Handle(wire.CmdBoundSessionBind, func(from mesh.NodeID, rec *wire.Record) {
		if b, ok := rec.Body.(*wire.BoundSessionBind); ok && b.Correlation == 42 {
			got <- from
		}
	})
	if err := c.Node(0).Records().Send(context.Background(), c.Node(1).ID(), bindRecord(42, c.Node(1).ID())); err != nil {
		t.Fatal(err)
	}
	select {
	case from := <-got:
		if from != c.Node(0).ID() {
			t.Fatalf("from %s, want %s", from, c.Node(0).ID())
		}
	case <-time.After(wait):
		t.Fatal("record not delivered")
	}
	recs := c.Tap().Records()
	if len(recs) != 2 || recs[0].Command != wire.CmdBoundSessionBind || recs[1].Command != wire.CmdBoundSessionBind {
		t.Fatalf("tap %+v", recs)
	}
}

// Sending to a node lifecycle that is not a live member fails at once with
// fault.Unavailable; nothing is sent.
func TestSendToDeadNodeIsUnavailable(t *testing.T) {
	c := meshtest.Start(t, 3, meshtest.Options{})
	dead := c.Node(2).ID()
	c.Kill(2)
	if err := c.WaitUntil(wait, func() bool { return !c.Node(0).Membership().IsLive(dead) }); err != nil {
		t.Fatal(err)
	}
	c.Tap().Reset()
	err := c.Node(0).Records().Send(context.Background(), dead, bindRecord(1, dead))
	if !errors.Is(err, fault.Unavailable) {
		t.Fatalf("send to dead node: %v", err)
	}
	if n := len(c.Tap().Records()); n != 0 {
		t.Fatalf("tap saw %d records", n)
	}
}

// Bad input from a peer is dropped before any handler and counted by reason: a record
// for an earlier generation of the receiver (stale_target), from a sender that is not
// a member (stale_target), a malformed record (decode_error), a command with no handler
// (no_handler).
func TestBadRecordsDroppedAndCounted(t *testing.T) {
	rs := &readers{}
	c := meshtest.Start(t, 3, meshtest.Options{MeterProvider: rs.provider})
	handled := make(chan uint64, 16)
	register := func(n *mesh.Node) {
		n.Records().Handle(wire.CmdBoundSessionBind, func(_ mesh.NodeID, rec *wire.Record) {
			handled <- rec.Body.(*wire.BoundSessionBind).Correlation
		})
	}
	register(c.Node(1).Mesh())
	old := c.Node(2).ID()
	reborn := c.Restart(2)
	register(reborn.Mesh())
	if err := c.WaitConverged(wait); err != nil {
		t.Fatal(err)
	}
	from := c.Node(0).ID()
	good, _ := wire.Encode(bindRecord(1, reborn.ID()))
	stale := &meshpb.Envelope{FromRid: from.RID, FromGeneration: from.Generation, ToRid: old.RID, ToGeneration: old.Generation, Frames: good}
	meshtest.SendEnvelope(c.Node(0).Mesh(), reborn.Mesh().RemoteAddr(), meshtest.RecordsActor, stale)
	stranger := &meshpb.Envelope{FromRid: "stranger", FromGeneration: 7, ToRid: reborn.ID().RID, ToGeneration: reborn.ID().Generation, Frames: good}
	meshtest.SendEnvelope(c.Node(0).Mesh(), reborn.Mesh().RemoteAddr(), meshtest.RecordsActor, stranger)
	malformed := &meshpb.Envelope{FromRid: from.RID, FromGeneration: from.Generation, ToRid: reborn.ID().RID, ToGeneration: reborn.ID().Generation, Frames: [][]byte{{'Z', 'M', 1, 38, 0, 0}}}
	meshtest.SendEnvelope(c.Node(0).Mesh(), reborn.Mesh().RemoteAddr(), meshtest.RecordsActor, malformed)
	// Node 0 has no handler for 38.
	if err := c.Node(1).Records().Send(context.Background(), from, bindRecord(2, from)); err != nil {
		t.Fatal(err)
	}
	// A good record last: it arrives after the bad ones (one sender, one stream).
	ok := &meshpb.Envelope{FromRid: from.RID, FromGeneration: from.Generation, ToRid: reborn.ID().RID, ToGeneration: reborn.ID().Generation, Frames: good}
	meshtest.SendEnvelope(c.Node(0).Mesh(), reborn.Mesh().RemoteAddr(), meshtest.RecordsActor, ok)
	select {
	case corr := <-handled:
		if corr != 1 {
			t.Fatalf("handler saw correlation %d", corr)
		}
	case <-time.After(wait):
		t.Fatal("good record not delivered")
	}
	const dropped = "zlink.mesh_node.messages.dropped"
	if n := rs.counter(t, 2, dropped, map[string]string{"reason": mesh.DropStaleTarget}); n != 2 {
		t.Errorf("stale_target drops on the restarted node: %d, want 2", n)
	}
	if n := rs.counter(t, 2, dropped, map[string]string{"reason": mesh.DropDecodeError}); n != 1 {
		t.Errorf("decode_error drops: %d, want 1", n)
	}
	if err := c.WaitUntil(wait, func() bool {
		return rs.counter(t, 0, dropped, map[string]string{"reason": mesh.DropNoHandler}) == 1
	}); err != nil {
		t.Errorf("no_handler drop on node 0 not counted: %v", err)
	}
	select {
	case corr := <-handled:
		t.Fatalf("a dropped record reached the handler (correlation %d)", corr)
	default:
	}
	if n := rs.counter(t, 2, "meshnode.mesh.records", map[string]string{"command": "boundSessionBind", "direction": "in"}); n != 1 {
		t.Errorf("records in on node 2: %d, want 1", n)
	}
}

// A node whose seed is not there yet keeps retrying and joins once the seed comes up.
func TestJoinRetriesUntilSeedAppears(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	seedAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	a, err := mesh.Start(context.Background(), mesh.Config{Join: []string{seedAddr}, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatalf("start with an absent seed: %v", err)
	}
	defer meshtest.KillMesh(a)
	b, err := mesh.Start(context.Background(), mesh.Config{MeshPort: port, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatal(err)
	}
	defer meshtest.KillMesh(b)
	select {
	case <-a.Membership().Joined():
	case <-time.After(wait):
		t.Fatal("node did not join the seed once it appeared")
	}
	if !a.Membership().IsLive(b.ID()) {
		t.Fatal("seed not live in the joiner's view")
	}
}

// Suspicions are counted: a killed node is declared suspect by a survivor before it is
// marked failed, and the survivors, alive all along, refute nothing.
func TestSuspicionsAreCounted(t *testing.T) {
	c := meshtest.Start(t, 3, meshtest.Options{})
	for i := range 3 {
		if s, r := c.Node(i).Membership().Suspicions(); s != 0 || r != 0 {
			t.Fatalf("node %d before the kill: %d suspected, %d refuted", i, s, r)
		}
	}
	dead := c.Node(2).ID()
	c.Kill(2)
	if err := c.WaitUntil(wait, func() bool { return !c.Node(0).Membership().IsLive(dead) && !c.Node(1).Membership().IsLive(dead) }); err != nil {
		t.Fatal(err)
	}
	s0, r0 := c.Node(0).Membership().Suspicions()
	s1, r1 := c.Node(1).Membership().Suspicions()
	if s0+s1 == 0 {
		t.Error("no survivor counted a suspicion of the killed node")
	}
	if r0+r1 != 0 {
		t.Errorf("survivors refuted %d suspicions of themselves", r0+r1)
	}
}
