package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/services"
)

// R20: a cold replica (during setup, and a session's before its attach) has no value,
// records its listeners without calling them, and puts nothing on the wire; once its
// provider is bound it hydrates, and each recorded listener gets the hydrated value
// once, as a hydration.
func TestR20_ColdReplicatedState(t *testing.T) {
	for _, way := range serverWays() {
		t.Run(way.name, func(t *testing.T) {
			rig := way.start(t)
			var early seen
			var during bool
			rig.consumer(t, func(b *Board) {
				_, during = b.Score.Value()
				b.Score.Subscribe(early.score)
			})
			if during {
				t.Fatal("a state had a value during setup")
			}
			early.waitLen(t, 1, "the listener recorded in setup gets the hydrated value")
			if v, kind, _, _ := early.at(0); v != 0 || kind != services.DeliveryHydration {
				t.Fatalf("first call: %d %v, want the hydrated 0 as a hydration", v, kind)
			}
		})
	}
	for _, tr := range presentationTransports {
		t.Run("session-"+tr, func(t *testing.T) { coldSessionState(t, tr) })
	}
}

// coldSessionState: a presentation's session replica, on node 0 over tr, of a worker on
// node 1, is cold until the attach.
func coldSessionState(t *testing.T, tr string) {
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "cold-")
	var cold seen
	p := f.present(t, 0, tr, func(p *presentation) { p.board.Score.Subscribe(cold.score) })
	p.create(t, w)
	if _, ok := p.board.Score.Value(); ok {
		t.Fatal("a session state had a value before any attach")
	}
	if n := services.AttacherOf(f.Node(0).Services()).Stats().Subscriptions; n != 0 {
		t.Fatalf("%d session subscriptions on the wire before any attach", n)
	}
	if cold.len() != 0 {
		t.Fatal("a listener of a cold replica was called")
	}
	p.attach(t, w)
	cold.waitLen(t, 1, "the recorded listener gets the hydrated value")
	if v, kind, _, _ := cold.at(0); v != 0 || kind != services.DeliveryHydration {
		t.Fatalf("first call: %d %v", v, kind)
	}
	if v, ok := p.board.Score.Value(); !ok || v.N != 0 {
		t.Fatalf("after attach: %+v %v", v, ok)
	}
}

// R21: a hydrated replica reads synchronously, and a new listener gets the current
// value at once (a current delivery) and then every later one, in order.
func TestR21_HydratedReplicatedState(t *testing.T) {
	for _, way := range allWays() {
		t.Run(way.name, func(t *testing.T) {
			rig := way.start(t)
			b := rig.board
			if _, err := b.Set.Call(callCtx(t), Score{N: 7}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the replica holds 7", func() bool { v, ok := b.Score.Value(); return ok && v.N == 7 })
			var s seen
			b.Score.Subscribe(s.score)
			s.waitLen(t, 1, "the current value at once")
			if v, kind, _, _ := s.at(0); v != 7 || kind != services.DeliveryCurrent {
				t.Fatalf("first call of a new listener: %d %v, want 7 as current", v, kind)
			}
			for n := 8; n <= 10; n++ {
				if _, err := b.Set.Call(callCtx(t), Score{N: n}); err != nil {
					t.Fatal(err)
				}
			}
			s.waitLen(t, 4, "three updates")
			for i := 1; i < 4; i++ {
				if v, kind, _, _ := s.at(i); v != 7+i || kind != services.DeliveryUpdate {
					t.Fatalf("call %d: %d %v", i, v, kind)
				}
			}
			if st := b.Score.Status(); !st.Hydrated || st.Stale {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// R22: hydration races updates without a gap or a duplicate: consumers that subscribe
// while the provider writes a long run of values each see a consecutive run after
// their first value (which may be any of them), each value once, ending at the last.
func TestR22_NoRaceBetweenSnapshotAndUpdate(t *testing.T) {
	for _, way := range allWays() {
		t.Run(way.name, func(t *testing.T) {
			rig := way.start(t)
			const first, count = 1, 600
			done := make(chan error, 1)
			go func() { _, err := rig.board.Burst.Call(callCtx(t), BurstArgs{From: first, Count: count}); done <- err }()
			var ss [3]seen
			for i := range ss {
				rig.consumer(t, func(b *Board) { b.Score.Subscribe(ss[i].score) })
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for i := range ss {
				s := &ss[i]
				eventually(t, "the consumer reaches the last value", func() bool { return s.last() == first+count-1 })
				s.mu.Lock()
				for k := 1; k < len(s.vals); k++ {
					if s.vals[k] != s.vals[k-1]+1 || s.seqs[k] != s.seqs[k-1]+1 {
						t.Errorf("consumer %d: call %d is %d (seq %d) after %d (seq %d): a gap or a duplicate",
							i, k, s.vals[k], s.seqs[k], s.vals[k-1], s.seqs[k-1])
						break
					}
				}
				s.mu.Unlock()
			}
		})
	}
}

// R23: delivery contexts: the first call after a snapshot runs under a fresh hydration
// context whose parent is the listener's subscription; the immediate call of a new
// listener of a hydrated replica under a fresh local context (a new trace); a live
// update under the context of the write that produced it (the provider's span is its
// parent, across the connection). None is the subscriber's context.
func TestR23_DeliveryContexts(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			rec, tp := recordSpans(t)
			provider, err := services.NewHost(context.Background(), services.HostOptions{Name: "provider", Logger: quiet(), TracerProvider: tp}, boardFacet("p", 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = provider.Close(context.Background()) })
			conn, _ := tr.connect(t, provider)
			var b *Board
			var hyd seen
			consumer, err := services.NewHost(context.Background(), services.HostOptions{Name: "consumer", Connections: []services.Connection{conn}, Logger: quiet(), TracerProvider: tp},
				services.Facet{ID: "ui", Setup: func(env *services.Env) {
					b = services.Use(env, BoardToken)
					b.Score.Subscribe(hyd.score)
				}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = consumer.Close(context.Background()) })
			hyd.waitLen(t, 1, "the hydration")
			var cur seen
			b.Score.Subscribe(cur.score)
			cur.waitLen(t, 1, "the current value")

			ctx, caller := tp.Tracer("test").Start(callCtx(t), "caller")
			if _, err := b.Set.Call(ctx, Score{N: 5}); err != nil {
				t.Fatal(err)
			}
			caller.End()
			hyd.waitLen(t, 2, "the update")

			hc := trace.SpanContextFromContext(hyd.ctx(0))
			if d, _ := services.DeliveryOf(hyd.ctx(0)); d.Kind != services.DeliveryHydration || !hc.IsValid() {
				t.Fatalf("hydration delivery %+v, span %v", d, hc)
			}
			cc := trace.SpanContextFromContext(cur.ctx(0))
			if d, _ := services.DeliveryOf(cur.ctx(0)); d.Kind != services.DeliveryCurrent || cc.TraceID() == hc.TraceID() {
				t.Fatalf("current delivery %+v: a fresh local context (a new trace), got the hydration's trace", d)
			}
			uc := trace.SpanContextFromContext(hyd.ctx(1))
			if d, _ := services.DeliveryOf(hyd.ctx(1)); d.Kind != services.DeliveryUpdate || uc.TraceID() != caller.SpanContext().TraceID() {
				t.Fatalf("update delivery %+v in trace %v, want the writer's trace %v", d, uc.TraceID(), caller.SpanContext().TraceID())
			}
			// The hydration's span is a child of the listener's subscription.
			if p := endedParent(t, rec, hyd.ctx(0)); p.Name() != "services.subscribe" {
				t.Errorf("the hydration's parent is %q, want the subscription's span", p.Name())
			}
			// The update's span is a child of the provider's rpc.server span of the Set.
			if p := endedParent(t, rec, hyd.ctx(1)); p.Name() != "rpc.server" {
				t.Errorf("the update's parent is %q, want the write's rpc.server span", p.Name())
			}
		})
	}
}

// recordSpans returns a tracer provider whose ended spans rec records; it shuts down
// with the test.
func recordSpans(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// endedParent returns the parent of the span of a delivery's ctx once it has ended: a
// delivery's span ends when its listener returns, its parent when its own work does
// (a Set's or an Emit's rpc.server span after its reply went), so the parent is read
// from the live span and waited for.
func endedParent(t *testing.T, rec *tracetest.SpanRecorder, ctx context.Context) sdktrace.ReadOnlySpan {
	t.Helper()
	live, ok := trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan)
	if !ok {
		t.Fatalf("the delivery's span is %T, not a recorded one", trace.SpanFromContext(ctx))
	}
	var parent sdktrace.ReadOnlySpan
	eventually(t, "the delivery's parent span to end", func() bool {
		for _, s := range rec.Ended() {
			if s.SpanContext().SpanID() == live.Parent().SpanID() {
				parent = s
				return true
			}
		}
		return false
	})
	return parent
}

// R24: a disconnect keeps the last value as stale display data; reconnecting to the
// same provider replaces it with a fresh snapshot (a hydration), including what was
// written meanwhile.
func TestR24_StaleDisplayKeptOnReconnect(t *testing.T) {
	for _, way := range serverWays() {
		t.Run(way.name, func(t *testing.T) {
			rig := way.start(t)
			b := rig.board
			var s seen
			b.Score.Subscribe(s.score)
			if _, err := b.Set.Call(callCtx(t), Score{N: 3}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "3 replicated", func() bool { return s.last() == 3 })
			// A second consumer of the same provider writes while the first is away.
			other := rig.consumer(t, nil)
			rig.drop()
			eventually(t, "the replica turns stale", func() bool { return b.Score.Status().Stale })
			if v, ok := b.Score.Value(); !ok || v.N != 3 {
				t.Fatalf("a stale replica: %+v %v, want the last value kept", v, ok)
			}
			if _, err := other.Set.Call(callCtx(t), Score{N: 4}); err != nil {
				t.Fatal(err)
			}
			n := s.len()
			rig.back()
			eventually(t, "a fresh snapshot replaces the stale value", func() bool {
				v, ok := b.Score.Value()
				return ok && v.N == 4 && !b.Score.Status().Stale
			})
			s.waitLen(t, n+1, "the listener hears the fresh snapshot")
			if v, kind, _, _ := s.at(n); v != 4 || kind != services.DeliveryHydration {
				t.Fatalf("after the reconnect: %d %v, want 4 as a hydration", v, kind)
			}
		})
	}
}

// R25: switching to another provider clears readiness: a switch to another session's
// worker makes its replica cold, then hydrated from the new worker (a hydration, never
// an update carrying the old worker's numbering), and a detach leaves it cold; a
// provider's reload installs a complete replacement snapshot on the same subscription.
func TestR25_StateClearedOnProviderSwitch(t *testing.T) {
	for _, tr := range presentationTransports {
		t.Run(tr, func(t *testing.T) {
			f := startSvcFleet(t, 2, nil)
			w1, w2 := f.workerOn(t, 1, "sw1-"), f.workerOn(t, 0, "sw2-")
			var s seen
			p := f.present(t, 0, tr, func(p *presentation) { p.board.Score.Subscribe(s.score) })
			p.create(t, w1)
			p.create(t, w2)
			p.attach(t, w2)
			if _, err := p.board.Set.Call(callCtx(t), Score{N: 20}); err != nil {
				t.Fatal(err)
			}
			p.attach(t, w1)
			for n := 1; n <= 3; n++ {
				if _, err := p.board.Set.Call(callCtx(t), Score{N: n}); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "w1's 3", func() bool { return s.last() == 3 })
			from := s.len()
			p.attach(t, w2)
			eventually(t, "w2's value", func() bool { v, ok := p.board.Score.Value(); return ok && v.N == 20 })
			s.waitLen(t, from+1, "the switch is heard")
			if v, kind, _, _ := s.at(from); v != 20 || kind != services.DeliveryHydration {
				t.Fatalf("first call after the switch: %d %v, want w2's 20 as a hydration", v, kind)
			}
			if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "detach leaves the replica cold", func() bool { _, ok := p.board.Score.Value(); return !ok })
		})
	}
	t.Run("reload", func(t *testing.T) {
		for _, tr := range transports {
			t.Run(tr.name, func(t *testing.T) {
				provider := newHost(t, "provider", nil, boardFacet("v1", 1))
				conn, _ := tr.connect(t, provider)
				var b *Board
				var s seen
				newHost(t, "consumer", []services.Connection{conn}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
					b = services.Use(env, BoardToken)
					b.Score.Subscribe(s.score)
				}})
				s.waitLen(t, 1, "hydrated")
				if err := provider.Reload(callCtx(t), boardFacet("v2", 100)); err != nil {
					t.Fatal(err)
				}
				s.waitLen(t, 2, "the replacement")
				if v, kind, _, repl := s.at(1); v != 100 || kind != services.DeliveryHydration || !repl {
					t.Fatalf("after the reload: %d %v replacement %v, want v2's 100 as a replacement", v, kind, repl)
				}
				if r, err := b.Set.Call(callCtx(t), Score{N: 101}); err != nil || r.By != "v2" {
					t.Fatalf("a write after the reload: %+v %v", r, err)
				}
				eventually(t, "v2's writes reach the same subscription", func() bool { return s.last() == 101 })
			})
		}
	})
}

// ScoreView is a consumer's contract of test.board that uses its score only (a
// consumer describes the members it uses): a facade of it has exactly one state
// member, so its subscriptions can be counted exactly.
type ScoreView struct {
	Score services.State[Score]
}

var ScoreViewToken = services.Define("test.board", func(d *services.Describer, v *ScoreView) {
	services.DescribeState(d, "score", &v.Score)
})

// gaugeOf reads an int64 gauge as the hosts of one role ("server", "worker") report
// it (-1 when there is no such series).
func gaugeOf(t *testing.T, r *sdkmetric.ManualReader, name, role string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				if host, _ := dp.Attributes.Value(attribute.Key("host")); host.AsString() == role {
					return dp.Value
				}
			}
		}
	}
	return -1
}

// Issue 28, item 1: one replica per (host, service, instance, member) and one remote
// subscription per connection, however many listeners: three listeners in each of two
// hosts sharing one connection make exactly one subscription at the provider side (a
// server's endpoints, meshnode.services.subscriptions; for a session's member the
// presentation's node, its Attacher's figure, and the worker,
// meshnode.services.subscriptions of host "worker"). The subscription belongs to the
// facade, not to a listener: it stays while a facade is bound (Value reads it with no
// listener left) and ends when the last host using it closes.
func TestIssue28_ListenersShareOneRemoteSubscription(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			reader, mp := metered(t)
			provider, err := services.NewHost(context.Background(), services.HostOptions{Name: "provider", Logger: quiet(), MeterProvider: mp}, boardFacet("p", 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = provider.Close(context.Background()) })
			conn, _ := tr.connect(t, provider)
			held := func() []int64 { return []int64{gaugeOf(t, reader, "meshnode.services.subscriptions", "server")} }
			listenersShareOne(t, []services.Connection{conn}, conn, held)
		})
	}
	for _, tr := range presentationTransports {
		t.Run("session-"+tr, func(t *testing.T) {
			var readers [2]*sdkmetric.ManualReader
			var mps [2]*sdkmetric.MeterProvider
			for i := range mps {
				readers[i], mps[i] = metered(t)
			}
			f := startSvcFleetWith(t, 2, nil, func(i int, cfg *meshnode.Config) { cfg.MeterProvider = mps[i] })
			w := f.workerOn(t, 1, "share-")
			p := f.connectPresentation(t, 0, tr)
			for _, m := range []string{"create", "attach"} {
				if _, err := p.server.Call(callCtx(t), services.Call{Service: services.SessionManagementToken.ID(), Member: m,
					Args: json.RawMessage(`{"session":"` + w + `"}`)}); err != nil {
					t.Fatalf("%s %s: %v", m, w, err)
				}
			}
			held := func() []int64 {
				return []int64{
					int64(services.AttacherOf(f.Node(0).Services()).Stats().Subscriptions),
					gaugeOf(t, readers[1], "meshnode.services.subscriptions", "worker"),
				}
			}
			listenersShareOne(t, []services.Connection{p.server, p.session}, p.session, held)
		})
	}
}

// listenersShareOne runs the shared-subscription check over conns: writes go through
// writer (test.board's set); held reports the provider side's subscription counts.
func listenersShareOne(t *testing.T, conns []services.Connection, writer services.Connection, held func() []int64) {
	t.Helper()
	set := func(n int) {
		t.Helper()
		if _, err := writer.Call(callCtx(t), services.Call{Service: "test.board", Member: "set", Args: json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`)}); err != nil {
			t.Fatalf("set %d: %v", n, err)
		}
	}
	all := func(want int64) bool {
		for _, n := range held() {
			if n != want {
				return false
			}
		}
		return true
	}
	// What goes on the wire: the one subscription's request, and its end.
	subscribes, unsubscribes := services.CountSubscribes(writer)
	const perHost = 3
	var (
		views  [2]*ScoreView
		hosts  [2]*services.Host
		ls     [2][perHost]seen
		unsubs [2][perHost]func()
	)
	for i := range hosts {
		var err error
		hosts[i], err = services.NewHost(context.Background(), services.HostOptions{Name: "consumer-" + strconv.Itoa(i), Connections: conns, Logger: quiet()},
			services.Facet{ID: "ui", Setup: func(env *services.Env) { views[i] = services.Use(env, ScoreViewToken) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hosts[i].Close(context.Background()) })
		for j := range ls[i] {
			unsubs[i][j] = views[i].Score.Subscribe(ls[i][j].score)
		}
	}
	set(1)
	for i := range ls {
		for j := range ls[i] {
			eventually(t, "every listener hears 1", func() bool { return ls[i][j].last() == 1 })
		}
	}
	if got := held(); !all(1) {
		t.Fatalf("%d listeners in 2 hosts on one connection: the provider side holds %v subscriptions, want exactly 1", 2*perHost, got)
	}
	if n := subscribes(); n != 1 {
		t.Fatalf("%d listeners in 2 hosts on one connection sent %d subscribe requests, want 1", 2*perHost, n)
	}

	// Listeners leave: the subscription is the facade's and stays; a host with no
	// listener left still reads the value.
	for i := range unsubs {
		for j := range unsubs[i] {
			if i == 1 && j == 0 {
				continue // the last listener
			}
			unsubs[i][j]()
		}
	}
	set(2)
	eventually(t, "the last listener hears 2", func() bool { return ls[1][0].last() == 2 })
	eventually(t, "a host with no listener reads 2", func() bool { v, ok := views[0].Score.Value(); return ok && v.N == 2 })
	for i := range ls {
		for j := range ls[i] {
			if (i != 1 || j != 0) && ls[i][j].last() != 1 {
				t.Fatalf("listener %d.%d heard %d after it unsubscribed", i, j, ls[i][j].last())
			}
		}
	}
	if got := held(); !all(1) {
		t.Fatalf("after all listeners but one left: %v subscriptions, want exactly 1", got)
	}

	// The first host closes: the other still uses the subscription.
	if err := hosts[0].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	set(3)
	eventually(t, "the other host's listener hears 3", func() bool { return ls[1][0].last() == 3 })
	if got := held(); !all(1) {
		t.Fatalf("after one of the two hosts closed: %v subscriptions, want exactly 1", got)
	}
	if n := unsubscribes(); n != 0 {
		t.Fatalf("%d unsubscribe requests while a host still used the subscription, want 0", n)
	}
	// The last one closes: the subscription ends.
	if err := hosts[1].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the last host's close ends the subscription", func() bool { return all(0) })
	if s, u := subscribes(), unsubscribes(); s != 1 || u != 1 {
		t.Fatalf("%d subscribe and %d unsubscribe requests in all, want 1 and 1", s, u)
	}
}

var _ = errors.Is

// A provider may write a state from its own goroutine while the state is being
// provided: a job started before the reference to it is made (the index fixture does
// so). Making the reference reads the state's initial-value error; under -race this
// failed while that read took no lock (found by TestIssue28_ReferenceClosedByItsProvider).
func TestState_WrittenWhileItIsProvided(t *testing.T) {
	for i := 0; i < 300; i++ {
		st := services.NewState(0)
		done := make(chan struct{})
		go func() { _ = st.Set(context.Background(), 1); close(done) }()
		ref := services.NewRef(IndexJobToken, &IndexJob{Progress: st})
		<-done
		ref.Close()
	}
}
