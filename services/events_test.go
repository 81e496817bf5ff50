package services_test

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/wire"
)

// activeEvents waits until listener s of rig's board hears events: it emits probes
// (type "probe", n < 0) until one arrives, so that what the test emits next is emitted
// after the subscription became active.
func activeEvents(t *testing.T, b *Board, s *seen) {
	t.Helper()
	eventually(t, "the events subscription is active", func() bool {
		n := s.len()
		if _, err := b.Emit.Call(callCtx(t), BurstArgs{From: -1, Count: 1, Type: "probe"}); err != nil {
			t.Fatal(err)
		}
		return testkit.Within(200*time.Millisecond, func() bool { return s.len() > n })
	})
}

// afterProbes returns the non-probe calls of s.
func afterProbes(s *seen) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for _, v := range s.vals {
		if v >= 0 {
			out = append(out, v)
		}
	}
	return out
}

// R26: an event subscription is set up by subscribing: the listener, in the consuming
// process, gets each event emitted afterwards as an event delivery, and On filters by
// the event's type.
func TestR26_EventSubscriptionSetUp(t *testing.T) {
	for _, way := range allWays() {
		t.Run(way.name, func(t *testing.T) {
			rig := way.start(t)
			var all, special seen
			rig.board.Moves.Subscribe(all.move)
			rig.board.Moves.On("special", special.move)
			activeEvents(t, rig.board, &all)
			if _, err := rig.board.Emit.Call(callCtx(t), BurstArgs{From: 1, Count: 2}); err != nil {
				t.Fatal(err)
			}
			if _, err := rig.board.Emit.Call(callCtx(t), BurstArgs{From: 3, Count: 1, Type: "special"}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "three events", func() bool { return len(afterProbes(&all)) == 3 })
			special.waitLen(t, 1, "the special event")
			if got := afterProbes(&all); got[0] != 1 || got[1] != 2 || got[2] != 3 {
				t.Fatalf("events %v", got)
			}
			if v, kind, _, _ := special.at(0); v != 3 || kind != services.DeliveryEvent || special.len() != 1 {
				t.Fatalf("On(special) heard %d %v (%d calls)", v, kind, special.len())
			}
		})
	}
}

// R27: events are never replayed: a subscriber that comes late hears only what is
// emitted after its subscription became active, and one whose connection dropped hears
// nothing of what was emitted meanwhile after it reconnects.
func TestR27_EventsAreNeverReplayed(t *testing.T) {
	for _, way := range allWays() {
		t.Run(way.name, func(t *testing.T) {
			rig := way.start(t)
			if _, err := rig.board.Emit.Call(callCtx(t), BurstArgs{From: 1, Count: 5}); err != nil {
				t.Fatal(err)
			}
			var late seen
			lb := rig.consumer(t, func(b *Board) { b.Moves.Subscribe(late.move) })
			activeEvents(t, lb, &late)
			if _, err := rig.board.Emit.Call(callCtx(t), BurstArgs{From: 6, Count: 5}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the late subscriber hears the last event", func() bool { return late.last() == 10 })
			if got := afterProbes(&late); len(got) != 5 || got[0] != 6 || got[4] != 10 {
				t.Fatalf("the late subscriber heard %v, want 6..10 only (nothing from before its subscription)", got)
			}
			if rig.drop == nil {
				return
			}
			var s seen
			rig.board.Moves.Subscribe(s.move)
			activeEvents(t, rig.board, &s)
			other := rig.consumer(t, nil)
			rig.drop()
			if _, err := other.Emit.Call(callCtx(t), BurstArgs{From: 100, Count: 3}); err != nil {
				t.Fatal(err)
			}
			rig.back()
			activeEvents(t, rig.board, &s) // active again after the reconnect
			if _, err := rig.board.Emit.Call(callCtx(t), BurstArgs{From: 200, Count: 1}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the event after the reconnect", func() bool { return s.last() == 200 })
			for _, n := range afterProbes(&s) {
				if n >= 100 && n < 200 {
					t.Fatalf("an event emitted during the disconnect was replayed: %v", afterProbes(&s))
				}
			}
		})
	}
}

// R28: events arrive in the order they were emitted, each once, with the provider's
// consecutive sequence.
func TestR28_EventsArriveInOrder(t *testing.T) {
	for _, way := range allWays() {
		t.Run(way.name, func(t *testing.T) {
			rig := way.start(t)
			var s seen
			rig.board.Moves.Subscribe(s.move)
			activeEvents(t, rig.board, &s)
			const count = 500
			if _, err := rig.board.Emit.Call(callCtx(t), BurstArgs{From: 1, Count: count}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "every event", func() bool { return s.last() == count })
			s.mu.Lock()
			defer s.mu.Unlock()
			start := len(s.vals) - count
			for i := start; i < len(s.vals); i++ {
				if s.vals[i] != i-start+1 || (i > start && s.seqs[i] != s.seqs[i-1]+1) {
					t.Fatalf("event %d: %d seq %d (previous seq %d)", i-start, s.vals[i], s.seqs[i], s.seqs[i-1])
				}
			}
		})
	}
}

// R29: event subscriptions are cleaned up: an unsubscribed listener hears nothing more,
// and closing the consuming host (its owner) or its connection ends the subscriptions
// at the provider side.
func TestR29_EventSubscriptionsAreCleanedUp(t *testing.T) {
	for _, way := range allWays() {
		t.Run(way.name, func(t *testing.T) {
			rig := way.start(t)
			var kept, gone seen
			rig.board.Moves.Subscribe(kept.move)
			stop := rig.board.Moves.Subscribe(gone.move)
			activeEvents(t, rig.board, &kept)
			activeEvents(t, rig.board, &gone)
			stop()
			if _, err := rig.board.Emit.Call(callCtx(t), BurstArgs{From: 1, Count: 3}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the kept listener hears them", func() bool { return kept.last() == 3 })
			if got := afterProbes(&gone); len(got) != 0 {
				t.Fatalf("an unsubscribed listener heard %v", got)
			}
			before := rig.subscriptions()
			if before == 0 {
				t.Fatal("no subscription at the provider side")
			}
			var s seen
			b := rig.consumer(t, func(b *Board) { b.Moves.Subscribe(s.move); b.Score.Subscribe(func(context.Context, Score) {}) })
			activeEvents(t, b, &s)
			eventually(t, "the new consumer's subscriptions are held", func() bool { return rig.subscriptions() > before })
			rig.closeNewest()
			eventually(t, "closing the consumer ends its subscriptions", func() bool { return rig.subscriptions() == before })
		})
	}
}

// Issue 28, item 2: trace metadata on every event. Each event a listener hears runs
// under a context rebuilt from its emitter's trace (a DeliveryEvent whose
// services.deliver span is a child of the rpc.server span of the call that emitted
// it), event by event: two events of one emitting call are in its trace, the event of
// another call in that call's. Over loopback and STREAM to a server's board, and from a
// presentation on node 0 over STREAM and loopback to a worker on node 1 (across the
// mesh).
func TestIssue28_EveryEventCarriesItsEmittersTrace(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			rec, tp := recordSpans(t)
			provider, err := services.NewHost(context.Background(), services.HostOptions{Name: "provider", Logger: quiet(), TracerProvider: tp}, boardFacet("p", 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = provider.Close(context.Background()) })
			conn, _ := tr.connect(t, provider)
			eventsCarryTraces(t, rec, tp, []services.Connection{conn})
		})
	}
	for _, tr := range presentationTransports {
		t.Run("session-"+tr, func(t *testing.T) {
			rec, tp := recordSpans(t)
			f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) { cfg.TracerProvider = tp })
			w := f.workerOn(t, 1, "traced-")
			p := f.connectPresentation(t, 0, tr)
			for _, m := range []string{"create", "attach"} {
				if _, err := p.server.Call(callCtx(t), services.Call{Service: services.SessionManagementToken.ID(), Member: m,
					Args: json.RawMessage(`{"session":"` + w + `"}`)}); err != nil {
					t.Fatalf("%s %s: %v", m, w, err)
				}
			}
			eventsCarryTraces(t, rec, tp, []services.Connection{p.server, p.session})
		})
	}
}

// eventsCarryTraces subscribes to the board's moves in a consumer host over conns and
// checks the trace of each event of two emitting calls.
func eventsCarryTraces(t *testing.T, rec *tracetest.SpanRecorder, tp *sdktrace.TracerProvider, conns []services.Connection) {
	t.Helper()
	var b *Board
	var s seen
	consumer, err := services.NewHost(context.Background(), services.HostOptions{Name: "consumer", Connections: conns, Logger: quiet(), TracerProvider: tp},
		services.Facet{ID: "ui", Setup: func(env *services.Env) {
			b = services.Use(env, BoardToken)
			b.Moves.Subscribe(s.move)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consumer.Close(context.Background()) })
	activeEvents(t, b, &s)

	emit := func(name string, from, count int) trace.TraceID {
		ctx, span := tp.Tracer("test").Start(callCtx(t), name)
		defer span.End()
		if _, err := b.Emit.Call(ctx, BurstArgs{From: from, Count: count}); err != nil {
			t.Fatal(err)
		}
		return span.SpanContext().TraceID()
	}
	first := emit("emitter-1", 1, 2)
	second := emit("emitter-2", 3, 1)
	eventually(t, "the three events", func() bool { return len(afterProbes(&s)) == 3 })
	want := map[int]trace.TraceID{1: first, 2: first, 3: second}

	s.mu.Lock()
	type heard struct {
		n   int
		ctx context.Context
	}
	var events []heard
	for i, n := range s.vals {
		if n >= 0 {
			events = append(events, heard{n, s.ctxs[i]})
		}
	}
	s.mu.Unlock()
	deliverSpans := map[trace.SpanID]bool{}
	for _, ev := range events {
		d, _ := services.DeliveryOf(ev.ctx)
		sc := trace.SpanContextFromContext(ev.ctx)
		if d.Kind != services.DeliveryEvent || !sc.IsValid() {
			t.Fatalf("event %d: delivery %+v, span %v: want an event delivery under a span", ev.n, d, sc)
		}
		if sc.TraceID() != want[ev.n] {
			t.Fatalf("event %d heard in trace %v, want its emitter's %v", ev.n, sc.TraceID(), want[ev.n])
		}
		if deliverSpans[sc.SpanID()] {
			t.Fatalf("event %d shares its delivery span with another event", ev.n)
		}
		deliverSpans[sc.SpanID()] = true
		// The delivery's span is a child of the emitting call's rpc.server span.
		span, ok := trace.SpanFromContext(ev.ctx).(sdktrace.ReadOnlySpan)
		if !ok || span.Name() != "services.deliver" {
			t.Fatalf("event %d: the listener's span is %T, want the consumer's services.deliver span", ev.n, trace.SpanFromContext(ev.ctx))
		}
		if p := endedParent(t, rec, ev.ctx); p.Name() != "rpc.server" || p.SpanContext().TraceID() != want[ev.n] {
			t.Fatalf("event %d: its delivery's parent is %q in trace %v, want the emitting call's rpc.server", ev.n, p.Name(), p.SpanContext().TraceID())
		}
	}
}

// R30: event flow control is bounded per subscriber: a subscriber that never reads is
// dropped (flow_control, counted) once its connection's queue is full, the provider
// never waits for it, and another subscriber hears every event in order.
func TestR30_EventFlowControlIsBounded(t *testing.T) {
	const events, pad = 6000, 4 << 10 // 24 MB: past a session's queue and the kernel's buffers
	t.Run("stream", func(t *testing.T) {
		provider := newHost(t, "provider", nil, boardFacet("provider", 0))
		ep := streamEndpoint(t, provider)
		silent := rawSubscriber(t, ep, "", nil)
		_ = silent
		var good seen
		sc := services.NewStreamConnection(reconnectingConnector(t, ep))
		t.Cleanup(sc.Close)
		var b *Board
		newHost(t, "good", []services.Connection{sc}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
			b = services.Use(env, BoardToken)
			b.Moves.Subscribe(good.move)
		}})
		activeEvents(t, b, &good)
		emitKeepingUp(t, b, &good, events, pad)
		eventually(t, "the silent subscriber is dropped", func() bool { return services.SubscriptionsDropped(provider) >= 1 })
		if n := services.SubscriptionsDropped(provider); n != 1 {
			t.Fatalf("%d subscriptions dropped, want the silent one only", n)
		}
		got := afterProbes(&good)
		for i, n := range got {
			if n != i+1 {
				t.Fatalf("the good subscriber heard %d as event %d", n, i+1)
			}
		}
	})
	t.Run("loopback", func(t *testing.T) {
		// In process the bound is the consumer's replica: a listener that never returns
		// holds its replica's queue (1,024 calls); what comes past it is dropped, and the
		// listener sees the jump in the sequence once it goes on.
		provider := newHost(t, "provider", nil, boardFacet("provider", 0))
		consumer := func(setup func(b *Board)) *Board {
			l := services.NewLoopback(provider, services.Client{ID: "loop-" + t.Name()})
			t.Cleanup(l.Close)
			var b *Board
			newHost(t, "consumer", []services.Connection{l}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
				b = services.Use(env, BoardToken)
				setup(b)
			}})
			return b
		}
		var stuck, good seen
		unblock := make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(unblock) }) })
		sb := consumer(func(b *Board) {
			b.Moves.Subscribe(func(ctx context.Context, m Move) {
				stuck.move(ctx, m)
				<-unblock
			})
		})
		gb := consumer(func(b *Board) { b.Moves.Subscribe(good.move) })
		activeEvents(t, sb, &stuck) // its listener is now held in its first call
		activeEvents(t, gb, &good)
		const n = 3000
		emitKeepingUp(t, gb, &good, n, 1024) // batches of 512: within a replica's queue
		once.Do(func() { close(unblock) })
		got := afterProbes(&good)
		if len(got) != n {
			t.Fatalf("the good subscriber heard %d events, want %d", len(got), n)
		}
		for i, v := range got {
			if v != i+1 {
				t.Fatalf("the good subscriber heard %d as event %d", v, i+1)
			}
		}
		// What was emitted past its bound is gone; what is emitted once it drained its
		// queue reaches it (an event emitted while the queue is still full is dropped
		// too: one more each poll, until one is heard).
		next := n
		eventually(t, "the stuck listener drains its queue and hears the next event", func() bool {
			next++
			if _, err := gb.Emit.Call(callCtx(t), BurstArgs{From: next, Count: 1}); err != nil {
				t.Fatal(err)
			}
			return stuck.last() > n
		})
		heard := afterProbes(&stuck)
		if len(heard) > 1025+next-n {
			t.Fatalf("the stuck listener heard %d of %d events: its queue is not bounded", len(heard), n)
		}
		stuck.mu.Lock()
		jump := false
		for i := 1; i < len(stuck.seqs); i++ {
			jump = jump || stuck.seqs[i] > stuck.seqs[i-1]+1
		}
		stuck.mu.Unlock()
		if !jump {
			t.Fatal("the stuck listener sees no jump in the sequence where events were dropped")
		}
	})
	t.Run("session", func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) { cfg.MeterProvider = mp })
		w := f.workerOn(t, 1, "flood-")
		p := f.present(t, 0, "stream")
		p.create(t, w)
		rawSubscriber(t, f.Node(0).Endpoints()[0], w, nil)
		var good seen
		q := f.present(t, 0, "stream", func(p *presentation) { p.board.Moves.Subscribe(good.move) })
		q.attach(t, w)
		activeEvents(t, q.board, &good)
		emitKeepingUp(t, q.board, &good, events, pad)
		eventually(t, "the silent presentation is dropped", func() bool {
			return services.AttacherOf(f.Node(0).Services()).Stats().Dropped >= 1
		})
		if n := droppedSubs(t, reader); n != services.AttacherOf(f.Node(0).Services()).Stats().Dropped {
			t.Fatalf("meshnode.services.subscriptions.dropped is %d, want the %d the attacher dropped", n, services.AttacherOf(f.Node(0).Services()).Stats().Dropped)
		}
		got := afterProbes(&good)
		for i, n := range got {
			if n != i+1 {
				t.Fatalf("the good presentation heard %d as event %d", n, i+1)
			}
		}
	})
}

// emitKeepingUp emits events of pad bytes in batches that fit a session's queue
// (512 KiB), each emitted in one call that must not wait for any subscriber, and waits
// for good to hear each batch before the next: good keeps up, a subscriber that does
// not read falls behind by every byte.
func emitKeepingUp(t *testing.T, b *Board, good *seen, events, pad int) {
	t.Helper()
	batch := (512 << 10) / pad
	for from := 1; from <= events; from += batch {
		n := min(batch, events-from+1)
		start := time.Now()
		if _, err := b.Emit.Call(callCtx(t), BurstArgs{From: from, Count: n, Pad: pad}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("emitting %d events took %v: the provider waited for a subscriber", n, d)
		}
		eventually(t, "the good subscriber hears the batch", func() bool { return good.last() == from+n-1 })
	}
}

// rawSubscriber subscribes a raw STREAM client at endpoint to the board's moves (of
// session's worker, after creating nothing and attaching to it, when session is set)
// and never reads again.
func rawSubscriber(t *testing.T, endpoint, session string, _ any) *testkit.RawConn {
	t.Helper()
	c, err := testkit.Dial(endpoint[len("tcp://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// A small receive buffer: the kernel holds little of what the server writes to a
	// client that does not read, whatever its autotuning allows.
	_ = c.Conn.(*net.TCPConn).SetReadBuffer(16 << 10)
	seq := uint64(0)
	req := func(name string, md wire.Metadata, payload string) {
		seq++
		if err := c.WriteAll(testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: seq, Name: name, Metadata: md}, []byte(payload)), wait); err != nil {
			t.Fatal(err)
		}
		for {
			f, err := c.ReadFrame(wait)
			if err != nil {
				t.Fatal(err)
			}
			if f.Header.Kind == wire.KindError {
				t.Fatalf("%s: %s", name, f.Payload)
			}
			if f.Header.Kind == wire.KindResponse && f.Header.RequestSeq == seq {
				return
			}
		}
	}
	md := wire.Metadata{{Key: "svc", Value: "test.board"}, {Key: "member", Value: "moves"}}
	if session != "" {
		args, _ := json.Marshal(services.AttachArgs{Session: session})
		req(services.NameCall, wire.Metadata{{Key: "svc", Value: "meshnode.session-management"}, {Key: "member", Value: "attach"}, {Key: "rid", Value: "1"}}, string(args))
		md = append(md, wire.MetadataEntry{Key: "scope", Value: "session"})
	}
	req(services.NameSubscribe, md, "")
	return c
}
