package actor_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 15 * time.Second

// sink collects what recorder Actors received, per ActorId.
type sink struct {
	mu   sync.Mutex
	got  map[string][]string
	node map[string]mesh.NodeID
	cond *sync.Cond
}

func newSink() *sink {
	s := &sink{got: map[string][]string{}, node: map[string]mesh.NodeID{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *sink) waitCount(t *testing.T, id string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(wait)
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.got[id]) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s received %d of %d messages", id, len(s.got[id]), n)
		}
		s.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		s.mu.Lock()
	}
	return append([]string(nil), s.got[id]...)
}

// recorder records every message; a "relay:<n>:<target>" message makes it send n
// numbered messages to the target Actor (looked up by id).
type recorder struct{ s *sink }

func (r *recorder) Receive(ctx *actor.Context) {
	msg, ok := ctx.Message().(*actor.Message)
	if !ok {
		return
	}
	self := ctx.Self()
	r.s.mu.Lock()
	r.s.got[self.ID] = append(r.s.got[self.ID], string(msg.Data))
	r.s.node[self.ID] = self.Node
	r.s.mu.Unlock()
	if msg.Name == "relay" {
		var n int
		var target string
		fmt.Sscanf(string(msg.Data), "%d %s", &n, &target)
		to, err := ctx.Host().Lookup(ctx, "recorder", target)
		if err != nil {
			panic(err)
		}
		for i := 0; i < n; i++ {
			if err := ctx.Send(to, actor.Message{Name: "n", Data: []byte(strconv.Itoa(i))}); err != nil {
				panic(err)
			}
		}
	}
}

type cluster struct {
	*meshtest.Cluster
	sink *sink
}

func (c *cluster) host(i int) *actor.Host { return c.Node(i).Actors() }

func start(t *testing.T, n int) *cluster {
	c := &cluster{sink: newSink()}
	c.Cluster = meshtest.Start(t, n, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.Kinds = []actor.Kind{{Name: "recorder", New: func() actor.Actor { return &recorder{s: c.sink} }}}
	}})
	return c
}

// Lookups from different nodes agree on where an Actor lives and activate it once;
// placement spreads ActorIds over the nodes.
func TestDirectoryLookupAgreesAndSpreads(t *testing.T) {
	c := start(t, 3)
	ctx := context.Background()
	owners := map[string]int{}
	for i := 0; i < 30; i++ {
		id := "actor-" + strconv.Itoa(i)
		first, err := c.host(0).Lookup(ctx, "recorder", id)
		if err != nil {
			t.Fatal(err)
		}
		for j := 1; j < 3; j++ {
			again, err := c.host(j).Lookup(ctx, "recorder", id)
			if err != nil {
				t.Fatal(err)
			}
			if again != first {
				t.Fatalf("node %d sees %s, node 0 sees %s", j, again, first)
			}
		}
		owners[first.Node.RID]++
	}
	if len(owners) != 3 {
		t.Fatalf("30 Actors placed on %d nodes: %v", len(owners), owners)
	}
	total := 0
	for i := 0; i < 3; i++ {
		total += len(c.host(i).Active())
	}
	if total != 30 {
		t.Fatalf("%d activations for 30 Actors", total)
	}
}

// An Actor on one node sends to an Actor on another: record 24 carries each message,
// and they arrive in send order.
func TestActorSendAcrossNodesInOrder(t *testing.T) {
	c := start(t, 2)
	ctx := context.Background()
	var src, dst string
	var srcFence actor.RouteFence
	for i := 0; src == "" || dst == ""; i++ {
		id := "x" + strconv.Itoa(i)
		f, err := c.host(0).Lookup(ctx, "recorder", id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case f.Node == c.Node(0).ID() && src == "":
			src, srcFence = id, f
		case f.Node == c.Node(1).ID() && dst == "":
			dst = id
		}
	}
	c.Tap().Reset()
	const n = 500
	if err := c.host(0).Send(ctx, srcFence, actor.Message{Name: "relay", Data: []byte(fmt.Sprintf("%d %s", n, dst))}); err != nil {
		t.Fatal(err)
	}
	got := c.sink.waitCount(t, dst, n)
	for i, v := range got {
		if v != strconv.Itoa(i) {
			t.Fatalf("message %d is %q: order broken", i, v)
		}
	}
	cmds := c.Tap().Commands()
	if cmds[wire.CmdActorSend] != 2*n || len(cmds) != 1 {
		t.Fatalf("tap commands %v, want only %d actorSend (out+in)", cmds, 2*n)
	}
}

// A new activation of the same ActorId gets a new, larger ObjectGeneration, and a
// message to the old one is refused as stale.
func TestReactivationNewObjectGeneration(t *testing.T) {
	c := start(t, 1)
	ctx := context.Background()
	first, err := c.host(0).Lookup(ctx, "recorder", "r")
	if err != nil {
		t.Fatal(err)
	}
	c.host(0).Deactivate("r")
	second, err := c.host(0).Lookup(ctx, "recorder", "r")
	if err != nil {
		t.Fatal(err)
	}
	if second.ObjectGeneration <= first.ObjectGeneration {
		t.Fatalf("object generation %d after %d", second.ObjectGeneration, first.ObjectGeneration)
	}
	if err := c.host(0).Send(ctx, first, actor.Message{Name: "n", Data: []byte("x")}); !errors.Is(err, actor.ErrStale) {
		t.Fatalf("send to the old activation: %v", err)
	}
}

// When the owner fails, a lookup places the Actor on a survivor with a higher authority
// owner generation; a caller holding the old fence gets fault.Unavailable, never a silent
// resend elsewhere.
func TestDirectoryFailoverAfterKill(t *testing.T) {
	c := start(t, 3)
	ctx := context.Background()
	var id string
	var old actor.RouteFence
	for i := 0; ; i++ {
		id = "f" + strconv.Itoa(i)
		f, err := c.host(0).Lookup(ctx, "recorder", id)
		if err != nil {
			t.Fatal(err)
		}
		if f.Node == c.Node(2).ID() {
			old = f
			break
		}
	}
	c.Kill(2)
	if err := c.WaitUntil(wait, func() bool {
		return !c.Node(0).Membership().IsLive(old.Node) && !c.Node(1).Membership().IsLive(old.Node)
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.host(0).Send(ctx, old, actor.Message{Name: "n", Data: []byte("lost?")}); !errors.Is(err, fault.Unavailable) {
		t.Fatalf("send with the failed owner's fence: %v", err)
	}
	moved, err := c.host(1).Lookup(ctx, "recorder", id)
	if err != nil {
		t.Fatal(err)
	}
	if moved.Node == old.Node || moved.AuthorityOwnerGeneration <= old.AuthorityOwnerGeneration {
		t.Fatalf("after failover %s, before %s", moved, old)
	}
	again, err := c.host(0).Lookup(ctx, "recorder", id)
	if err != nil || again != moved {
		t.Fatalf("node 0 sees %s (%v), node 1 sees %s", again, err, moved)
	}
	if err := c.host(0).Send(ctx, moved, actor.Message{Name: "n", Data: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if got := c.sink.waitCount(t, id, 1); got[len(got)-1] != "after" {
		t.Fatalf("moved Actor got %v", got)
	}
}

// Explicit placement activates on the named node; unknown kinds are a clear error.
func TestExplicitPlacementAndUnknownKind(t *testing.T) {
	c := start(t, 2)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		f, err := c.host(0).LookupOn(ctx, "recorder", "p"+strconv.Itoa(i), c.Node(1).ID().RID)
		if err != nil {
			t.Fatal(err)
		}
		if f.Node != c.Node(1).ID() {
			t.Fatalf("explicit placement on %s landed on %s", c.Node(1).ID(), f.Node)
		}
	}
	if _, err := c.host(0).LookupOn(ctx, "nosuch", "z", c.Node(1).ID().RID); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("unknown kind remotely: %v", err)
	}
	if _, err := c.host(0).LookupOn(ctx, "nosuch", "z", c.Node(0).ID().RID); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("unknown kind locally: %v", err)
	}
}
