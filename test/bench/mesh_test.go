package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/internal/nodert"
	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/internal/testkit"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// payload64 is the 64-byte application payload of the send benchmarks.
var payload64 = make([]byte, 64)

// countTo signals done when it has counted target messages.
type countTo struct {
	n, target atomic.Int64
	done      chan struct{}
}

func (c *countTo) arm(n int) {
	c.n.Store(0)
	c.target.Store(int64(n))
	c.done = make(chan struct{})
}

func (c *countTo) hit() {
	if c.n.Add(1) == c.target.Load() {
		close(c.done)
	}
}

// BenchmarkRawRemoteSend is the baseline for cross-node Actor sends: protoactor-go
// remote one-way sends of a 64-byte protobuf between the same two nodes' actor
// systems, to a plain protoactor actor.
func BenchmarkRawRemoteSend(b *testing.B) {
	rawRemoteSend(b, &meshpb.Envelope{Frames: [][]byte{payload64}})
}

// BenchmarkRawRemoteSendRecordSized is the same baseline with a message as large as
// an Actor send's envelope (RIDs and a 196-byte record): what the bytes alone cost.
func BenchmarkRawRemoteSendRecordSized(b *testing.B) {
	rawRemoteSend(b, &meshpb.Envelope{FromRid: "127.0.0.1:40000", FromGeneration: 1 << 60, ToRid: "127.0.0.1:40001",
		ToGeneration: 1 << 60, Frames: [][]byte{make([]byte, 93), make([]byte, 103)}})
}

func rawRemoteSend(b *testing.B, msg *meshpb.Envelope) {
	c := meshtest.Start(b, 2, meshtest.Options{NoTap: true})
	cnt := &countTo{}
	root, target := rawCounter(b, c, cnt)
	cnt.arm(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		root.Send(target, msg)
	}
	testkit.Await(b, cnt.done, benchWait, "every message to arrive")
}

// BenchmarkActorSendCrossNodeInterleaved measures cross-node Actor sends against raw
// protoactor remote sends in alternation: blocks of each, between the same two nodes
// (over the same remote connection), take turns, so that both see the same machine
// (run apart, the raw baseline alone swung between 730 and 1,350 ns a send). It
// reports the Actor sends' time over the raw sends' (x-raw-remote-time; the ratio of
// the cross-node send figure is its inverse); ns/op is one of each.
func BenchmarkActorSendCrossNodeInterleaved(b *testing.B) {
	actors := &countTo{}
	c := meshtest.Start(b, 2, meshtest.Options{NoTap: true, Config: func(_ int, cfg *meshnode.Config) {
		cfg.Kinds = []actor.Kind{{Name: "count", New: func() actor.Actor { return countingActor{actors} }}}
		cfg.MaxMailbox, cfg.MaxMailboxBytes = max(b.N+1, actor.DefaultMaxMailbox), 1<<40
	}})
	ctx := context.Background()
	host := c.Node(0).Actors()
	to, err := host.LookupOn(ctx, "count", "target", c.Node(1).ID().RID)
	if err != nil {
		b.Fatal(err)
	}
	msg := &actor.Message{Name: "tick", ContentType: "application/octet-stream", Data: payload64}
	rawSends := rawSendBlock(b, c)
	b.ReportAllocs()
	b.ResetTimer()
	ratio := alternate(b, 20000, func(n int) {
		actors.arm(n)
		for range n {
			if err := host.Send(ctx, to, msg); err != nil {
				b.Fatal(err)
			}
		}
		testkit.Await(b, actors.done, benchWait, "every Actor send to arrive")
	}, rawSends)
	b.ReportMetric(ratio, "x-raw-remote-time")
}

// rawSendBlock is the raw remote send baseline as a block for alternate: n sends of a
// 64-byte envelope from node 0 of c to a counting actor on node 1 (rawCounter), until
// all of them arrived.
func rawSendBlock(b *testing.B, c *meshtest.Cluster) func(n int) {
	raw := &countTo{}
	root, target := rawCounter(b, c, raw)
	msg := &meshpb.Envelope{Frames: [][]byte{payload64}}
	return func(n int) {
		raw.arm(n)
		for range n {
			root.Send(target, msg)
		}
		testkit.Await(b, raw.done, benchWait, "every raw send to arrive")
	}
}

// rawCounter spawns a plain protoactor actor on node 1 of c that counts the envelopes
// it receives into cnt, and returns node 0's root context and that actor's remote PID:
// the raw remote send baseline's two ends.
func rawCounter(b *testing.B, c *meshtest.Cluster, cnt *countTo) (*proto.RootContext, *proto.PID) {
	pid, err := nodert.SystemOf(c.Node(1).Mesh()).Root.SpawnNamed(proto.PropsFromFunc(func(ctx proto.Context) {
		if _, ok := ctx.Message().(*meshpb.Envelope); ok {
			cnt.hit()
		}
	}), "bench-raw")
	if err != nil {
		b.Fatal(err)
	}
	return nodert.SystemOf(c.Node(0).Mesh()).Root, proto.NewPID(c.Node(1).Mesh().RemoteAddr(), pid.Id)
}

type countingActor struct{ c *countTo }

func (a countingActor) Receive(ctx *actor.Context) {
	if _, ok := ctx.Message().(*actor.Message); ok {
		a.c.hit()
	}
}

// BenchmarkActorSendCrossNode: Actor-to-Actor one-way sends to an Actor on the other
// node, each carried by a service-wire record 24 in a protobuf envelope. The message
// is built once and sent by pointer, as its baseline sends its protobuf.
func BenchmarkActorSendCrossNode(b *testing.B) { actorSendCrossNode(b, true) }

// BenchmarkActorSendCrossNodeByValue is the same with the message passed by value:
// what boxing it into the any parameter (and copying it) costs the caller.
func BenchmarkActorSendCrossNodeByValue(b *testing.B) { actorSendCrossNode(b, false) }

func actorSendCrossNode(b *testing.B, byPointer bool) {
	cnt := &countTo{}
	c := meshtest.Start(b, 2, meshtest.Options{NoTap: true, Config: func(_ int, cfg *meshnode.Config) {
		cfg.Kinds = []actor.Kind{{Name: "count", New: func() actor.Actor { return countingActor{cnt} }}}
		// One-way sends are at most once: past its mailbox bound a slower receiver
		// drops them. This measures the transport, so the mailbox holds the whole run.
		cfg.MaxMailbox, cfg.MaxMailboxBytes = max(b.N+1, actor.DefaultMaxMailbox), 1<<40
	}})
	hosts := []*actor.Host{c.Node(0).Actors(), c.Node(1).Actors()}
	ctx := context.Background()
	to, err := hosts[0].LookupOn(ctx, "count", "target", c.Node(1).ID().RID)
	if err != nil {
		b.Fatal(err)
	}
	msg := actor.Message{Name: "tick", ContentType: "application/octet-stream", Data: payload64}
	var send any = msg
	if byPointer {
		send = &msg
	}
	cnt.arm(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		if byPointer {
			err = hosts[0].Send(ctx, to, send)
		} else {
			err = hosts[0].Send(ctx, to, msg)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	testkit.Await(b, cnt.done, benchWait, "every message to arrive")
}

// convergence starts n in-process nodes with the given timing and reports the seconds
// until every node sees every other: the fastest of the iterations. Converging waits
// on gossip rounds and on free CPU (n nodes share the process's cores); on a shared
// machine other tenants only ever add to it (30 nodes: 0.65 to 3.2 s in five runs of
// the last iteration), so the fastest is the figure of the code.
func convergence(b *testing.B, n int, timing meshtest.Timing) {
	var fastest time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		c := meshtest.Start(b, n, meshtest.Options{Timing: timing, NoTap: true, ConvergeTimeout: 90 * time.Second})
		if d := time.Since(start); i == 0 || d < fastest {
			fastest = d
		}
		b.StopTimer()
		for j := 0; j < n; j++ {
			c.Kill(j)
		}
		b.StartTimer()
	}
	b.ReportMetric(fastest.Seconds(), "s/converge")
}

func BenchmarkConvergence10NodesLAN(b *testing.B)   { convergence(b, 10, meshtest.TimingLAN) }
func BenchmarkConvergence30NodesLAN(b *testing.B)   { convergence(b, 30, meshtest.TimingLAN) }
func BenchmarkConvergence10NodesLocal(b *testing.B) { convergence(b, 10, meshtest.TimingLocal) }
func BenchmarkConvergence30NodesLocal(b *testing.B) { convergence(b, 30, meshtest.TimingLocal) }
func BenchmarkConvergence10NodesTest(b *testing.B)  { convergence(b, 10, meshtest.TimingTest) }
func BenchmarkConvergence30NodesTest(b *testing.B)  { convergence(b, 30, meshtest.TimingTest) }

// BenchmarkFailureDetectionTest is the same with the test timing meshtest uses.
func BenchmarkFailureDetectionTest(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := meshtest.Start(b, 3, meshtest.Options{})
		b.StartTimer()
		failureDetection(b, c)
	}
}

// BenchmarkFailureDetectionLAN reports the seconds from killing one of three nodes to
// the survivors marking it failed, with the production (LAN) timing.
func BenchmarkFailureDetectionLAN(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := meshtest.Start(b, 3, meshtest.Options{Timing: meshtest.TimingLAN, ConvergeTimeout: 60 * time.Second})
		b.StartTimer()
		failureDetection(b, c)
	}
}

func failureDetection(b *testing.B, c *meshtest.Cluster) {
	victim := c.Node(2).ID()
	failed := make(chan time.Duration, 2)
	start := time.Now()
	for _, i := range []int{0, 1} {
		unsub := c.Node(i).Membership().Subscribe(func(e mesh.MemberEvent) {
			if e.Type == mesh.EventFailed && e.Member.ID == victim {
				failed <- time.Since(start)
			}
		})
		defer unsub()
	}
	start = time.Now()
	c.Kill(2)
	var worst time.Duration
	for k := 0; k < 2; k++ {
		select {
		case d := <-failed:
			worst = max(worst, d)
		case <-time.After(60 * time.Second):
			b.Fatal("a survivor never marked the killed node failed within 60 s")
		}
	}
	b.ReportMetric(worst.Seconds(), "s/detect")
}
