package bench

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/nodert"
	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/internal/testkit"

	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

// rawEchoTarget starts two nodes and a plain protoactor actor on node 1 that answers
// every envelope with itself; it returns node 0's root context and that actor.
func rawEchoTarget(b *testing.B) (*proto.RootContext, *proto.PID) {
	return rawEchoOn(b, fleet.Start(b, 2, fleet.Options{NoTap: true}))
}

// rawEchoOn is rawEchoTarget on the nodes 0 and 1 of a fleet already started.
func rawEchoOn(b *testing.B, f *fleet.Fleet) (*proto.RootContext, *proto.PID) {
	pid, err := nodert.SystemOf(f.Node(1).Mesh()).Root.SpawnNamed(proto.PropsFromFunc(func(ctx proto.Context) {
		if m, ok := ctx.Message().(*meshpb.Envelope); ok {
			ctx.Respond(m)
		}
	}), "bench-echo")
	if err != nil {
		b.Fatal(err)
	}
	return nodert.SystemOf(f.Node(0).Mesh()).Root, proto.NewPID(f.Node(1).Mesh().RemoteAddr(), pid.Id)
}

// BenchmarkRawRemoteRequest is the baseline of the bound request benchmarks:
// protoactor-go remote request/response (RequestFuture) of a 64-byte protobuf between
// the same two nodes, one caller.
func BenchmarkRawRemoteRequest(b *testing.B) {
	root, target := rawEchoTarget(b)
	msg := &meshpb.Envelope{Frames: [][]byte{payload64}}
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		if _, err := root.RequestFuture(target, msg, benchWait).Result(); err != nil {
			b.Fatal(err)
		}
	}
}

// signalProcess is a protoactor process that only signals each message it is sent: the
// receiving end of BenchmarkRawRemotePingPong, with no mailbox and no future.
type signalProcess struct{ got chan struct{} }

func (p *signalProcess) SendUserMessage(*proto.PID, any)   { p.got <- struct{}{} }
func (p *signalProcess) SendSystemMessage(*proto.PID, any) {}
func (p *signalProcess) Stop(*proto.PID)                   {}

// BenchmarkRawRemotePingPong is the cheapest cross-node round trip protoactor remote
// offers, against which RawRemoteRequest's cost of a future shows: a one-way send to
// the echo actor on node 1 carrying a sender, and the echo's one-way send back to a
// process on node 0 that is no actor and no future (it only wakes the caller). A bound
// request's cross-node leg is two one-way records like these.
func BenchmarkRawRemotePingPong(b *testing.B) {
	root, target := rawEchoTarget(b)
	back := &signalProcess{got: make(chan struct{}, 1)}
	sender, ok := root.ActorSystem().ProcessRegistry.Add(back, "bench-ping-back")
	if !ok {
		b.Fatal("the name bench-ping-back is taken")
	}
	defer root.ActorSystem().ProcessRegistry.Remove(sender)
	msg := &meshpb.Envelope{Frames: [][]byte{payload64}}
	wait := time.NewTimer(benchWait)
	defer wait.Stop()
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		wait.Reset(benchWait)
		root.RequestWithCustomSender(target, msg, sender)
		select {
		case <-back.got:
		case <-wait.C:
			b.Fatal("no answer within the wait")
		}
	}
}

func boundClient(b *testing.B, f *fleet.Fleet, actorNode int, kind string) *connector.Connector {
	id := f.IDOn(b, kind, actorNode, "bench-")
	c := f.Connect(b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), fleet.Wait)
	defer cancel()
	var out map[string]any
	if err := c.Request(ctx, "bind", map[string]string{"actor": id, "kind": kind}, &out); err != nil {
		b.Fatal(err)
	}
	return c
}

func boundRequest(b *testing.B, actorNode int) {
	f := fleet.Start(b, 2, fleet.Options{NoTap: true})
	c := boundClient(b, f, actorNode, "room")
	ctx := context.Background()
	payload := []byte(`{"msg":"hello mesh","n":12345678}`)
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		if _, err := c.RequestRaw(ctx, "room.echo", wire.CodecJSON, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBoundRequestCrossNode: a STREAM client's request relayed to its bound Actor
// on the other node (24) and answered back (36), end to end through the connector.
func BenchmarkBoundRequestCrossNode(b *testing.B) { boundRequest(b, 1) }

// BenchmarkBoundRequestSameNode: the same with the Actor on the session's node.
func BenchmarkBoundRequestSameNode(b *testing.B) { boundRequest(b, 0) }

// BenchmarkBoundRequestCrossNodeInterleaved is the bound request measured against raw
// remote requests in alternation: blocks of room.echo requests relayed to a room on
// node 1 and of RequestFutures to a plain actor on node 1, between the same two nodes,
// take turns, so that both see the same machine. It reports the bound requests' time
// over the raw requests' (x-raw-remote-request-time; the bound request's ratio is its
// inverse); ns/op is one of each.
func BenchmarkBoundRequestCrossNodeInterleaved(b *testing.B) {
	f := fleet.Start(b, 2, fleet.Options{NoTap: true})
	c := boundClient(b, f, 1, "room")
	root, target := rawEchoOn(b, f)
	ctx := context.Background()
	payload := []byte(`{"msg":"hello mesh","n":12345678}`)
	msg := &meshpb.Envelope{Frames: [][]byte{payload64}}
	b.ReportAllocs()
	b.ResetTimer()
	ratio := alternate(b, 200, func(n int) {
		for range n {
			if _, err := c.RequestRaw(ctx, "room.echo", wire.CodecJSON, payload); err != nil {
				b.Fatal(err)
			}
		}
	}, func(n int) {
		for range n {
			if _, err := root.RequestFuture(target, msg, benchWait).Result(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(ratio, "x-raw-remote-request-time")
}

// BenchmarkBoundRelaySendCrossNode: one-way relay throughput, client Sends relayed to
// the bound Actor on the other node, until the Actor counted all of them.
func BenchmarkBoundRelaySendCrossNode(b *testing.B) {
	f := fleet.Start(b, 2, fleet.Options{NoTap: true})
	c := boundClient(b, f, 1, "probe")
	ctx := context.Background()
	done := f.Ev.TicksReach(f.Ev.Ticks() + int64(b.N))
	envelopes := f.Node(0).Records().FlowStats().Envelopes
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		if err := c.SendRaw(ctx, "room.tick", wire.CodecJSON, payload64[:2]); err != nil {
			b.Fatal(err)
		}
	}
	testkit.Await(b, done, benchWait, "the Actor to receive every relayed Send")
	if n := f.Node(0).Records().FlowStats().Envelopes - envelopes; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "records/envelope")
	}
}

// BenchmarkBoundRelaySendCrossNodeInterleaved measures the one-way relay against raw
// protoactor remote sends in alternation: blocks of relayed Sends and of raw sends
// between the same two nodes take turns, so that both see the same machine. It
// reports the relays' time over the raw sends' (x-raw-remote-time; the relay figure's
// ratio is its inverse); ns/op is one of each.
func BenchmarkBoundRelaySendCrossNodeInterleaved(b *testing.B) {
	f := fleet.Start(b, 2, fleet.Options{NoTap: true})
	c := boundClient(b, f, 1, "probe")
	rawSends := rawSendBlock(b, f.Cluster)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	ratio := alternate(b, 20000, func(n int) {
		reached := f.Ev.TicksReach(f.Ev.Ticks() + int64(n))
		for range n {
			if err := c.SendRaw(ctx, "room.tick", wire.CodecJSON, payload64[:2]); err != nil {
				b.Fatal(err)
			}
		}
		testkit.Await(b, reached, benchWait, "the Actor to receive every relayed Send")
	}, rawSends)
	b.ReportMetric(ratio, "x-raw-remote-time")
}

// BenchmarkBindUnbind10kSessions binds and unbinds 10,000 sessions (100 at a time) to
// Actors on the other node, then reports how far the heap is from where it started
// (KiB after a GC) and that no binding state is left.
func BenchmarkBindUnbind10kSessions(b *testing.B) {
	f := fleet.Start(b, 2, fleet.Options{NoTap: true})
	ids := []string{f.IDOn(b, "probe", 1, "m-"), f.IDOn(b, "probe", 1, "n-")}
	// Warm up first (lazy protobuf descriptors, gRPC streams, pools), so the starting
	// level is the steady state, then bind and unbind 10,000 sessions per iteration.
	bindUnbind(b, f, ids, 10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		bindUnbind(b, f, ids, 100)
	}
	b.StopTimer()
	testkit.Within(fleet.Wait, func() bool { return f.Binder(0).Stats().Sessions == 0 })
	if st := f.Binder(0).Stats(); st.Sessions != 0 || st.Bindings != 0 || st.Pending != 0 {
		b.Fatalf("binding state left after unbinding: %+v", st)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024, "KiB-heap-delta")
}

// bindUnbind runs batches of 100 sessions that each bind an Actor, unbind it and close.
func bindUnbind(b *testing.B, f *fleet.Fleet, ids []string, batches int) {
	bindUnbindT(b, f, ids, batches)
}

func bindUnbindT(b testing.TB, f *fleet.Fleet, ids []string, batches int) {
	for batch := 0; batch < batches; batch++ {
		cs := make([]*connector.Connector, 100)
		for i := range cs {
			cs[i] = f.Dial(b, 0)
		}
		ctx, cancel := context.WithTimeout(context.Background(), fleet.Wait)
		for i, c := range cs {
			var out map[string]any
			if err := c.Request(ctx, "bind", map[string]string{"actor": ids[i%2], "kind": "probe"}, &out); err != nil {
				b.Fatal(err)
			}
			if err := c.Request(ctx, "unbind", map[string]string{"actor": ids[i%2]}, &out); err != nil {
				b.Fatal(err)
			}
			_ = c.Close()
		}
		cancel()
	}
}

// parallelCallers runs b.N calls spread over callers goroutines, each calling call(i)
// for its share; the first error fails the benchmark.
func parallelCallers(b *testing.B, callers int, call func(caller int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	per, extra := b.N/callers, b.N%callers
	b.ResetTimer()
	cpu := cpuPerOp(b)
	for c := range callers {
		n := per
		if c < extra {
			n++
		}
		wg.Go(func() {
			for range n {
				if err := call(c); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkRawRemoteRequest100Callers is the baseline of the 100-session bound
// request benchmark: 100 goroutines making protoactor remote RequestFutures at once.
func BenchmarkRawRemoteRequest100Callers(b *testing.B) {
	root, target := rawEchoTarget(b)
	msg := &meshpb.Envelope{Frames: [][]byte{payload64}}
	b.ReportAllocs()
	parallelCallers(b, 100, func(int) error {
		_, err := root.RequestFuture(target, msg, benchWait).Result()
		return err
	})
}

// BenchmarkBoundRequestCrossNode100Sessions: 100 sessions on node 0, each bound to its
// own room on node 1, making bound requests at once.
func BenchmarkBoundRequestCrossNode100Sessions(b *testing.B) {
	f := fleet.Start(b, 2, fleet.Options{NoTap: true})
	const sessions = 100
	cs := make([]*connector.Connector, sessions)
	for i := range cs {
		id := f.IDOn(b, "room", 1, "bench-"+strconv.Itoa(i)+"-")
		cs[i] = f.Connect(b, 0)
		ctx, cancel := context.WithTimeout(context.Background(), fleet.Wait)
		var out map[string]any
		err := cs[i].Request(ctx, "bind", map[string]string{"actor": id, "kind": "room"}, &out)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	payload := []byte(`{"msg":"hello mesh","n":12345678}`)
	ctx := context.Background()
	b.ReportAllocs()
	parallelCallers(b, sessions, func(c int) error {
		_, err := cs[c].RequestRaw(ctx, "room.echo", wire.CodecJSON, payload)
		return err
	})
}
