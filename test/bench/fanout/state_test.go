package fanout

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

// Tick is the ticker's state: when it was set (unix nanos, the first member, which the
// readers parse) and padding to the size of the topic benchmark's payload.
type Tick struct {
	T   int64  `json:"t"`
	Pad string `json:"pad"`
}

// Ticker is the session service of the benchmark's worker: one replicated state.
type Ticker struct {
	Value services.State[Tick]
}

// TickerToken names Ticker.
var TickerToken = services.Define("bench.ticker", func(d *services.Describer, t *Ticker) {
	services.DescribeState(d, "value", &t.Value)
})

const (
	// statePresentations is how many presentations the state is fanned out to.
	statePresentations = 1000
	// maxStateUpdates bounds b.N: each update and its baseline is one round to every
	// presentation (tens of ms), and the readers keep every latency.
	maxStateUpdates = 10000
	// tickPad makes a Tick's JSON 64 bytes, the topic benchmark's payload.
	tickPad = 35
)

// BenchmarkServiceStateFanOut fans a session worker's replicated state out to 1,000
// presentations over STREAM, spread evenly over three nodes (the worker on the first),
// their clients in a second process (raw STREAM clients that attach and subscribe as a
// presentation's host does, and parse only the send time of each value). Each update
// reaches every presentation before the next, in alternation with a baseline that
// pushes the same JSON to the same server-side sessions with a plain Send from a loop
// (no worker, no mesh). An operation is one update and one push to every presentation.
// It reports updates per second of each, their time ratio (x-baseline-time), the
// latency from Set (or the push) to delivery over every delivery (p50, p99), and the
// servers' heap per subscription (HeapAlloc after a GC once it settled, before and
// after the 1,000 subscribe, over 1,000). The baseline's Send encodes a frame per
// session, as a plain push does; the worker's publication is encoded once per node.
func BenchmarkServiceStateFanOut(b *testing.B) {
	if b.N > maxStateUpdates {
		b.Fatalf("b.N %d over the bound of %d updates: run with -benchtime Nx, N <= %d", b.N, maxStateUpdates, maxStateUpdates)
	}
	var (
		mu     sync.Mutex
		peers  = map[*session.Peer]bool{}
		ticker atomic.Pointer[services.MutableState[Tick]]
	)
	f := fleet.Start(b, 3, fleet.Options{NoTap: true, Config: func(cfg *meshnode.Config) {
		cfg.MaxConnections = statePresentations + 16
		cfg.Session = func(n *meshnode.Node) session.SessionType {
			m := session.NewMux("bench").OnConnect(func(_ context.Context, p *session.Peer) {
				mu.Lock()
				peers[p] = true
				mu.Unlock()
			}).OnDisconnect(func(_ context.Context, p *session.Peer, _ wire.CloseReason) {
				mu.Lock()
				delete(peers, p)
				mu.Unlock()
			})
			return n.ServeServices(m).Type()
		}
		cfg.ServiceWorker = &meshnode.ServiceWorker{Kind: sampleapp.WorkerKind, Facets: []services.Facet{{ID: "bench.ticker",
			Setup: func(env *services.Env) {
				st := services.NewState(Tick{})
				services.Provide(env, TickerToken, &Ticker{Value: st})
				ticker.Store(st)
			}}}}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)

	// The session, its worker on node 0, created by a client of the bench's own.
	sid := f.IDOn(b, sampleapp.WorkerKind, 0, "ticker-")
	ctl := services.NewStreamConnection(f.Connect(b, 0))
	b.Cleanup(ctl.Close)
	mgmt, err := services.Dial(ctx, ctl, services.SessionManagementToken)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := mgmt.Create.Call(ctx, services.CreateArgs{Session: sid}); err != nil {
		b.Fatal(err)
	}
	testkit.Eventually(b, fleet.Wait, "the worker's state", func() bool { return ticker.Load() != nil })
	state := ticker.Load()
	mu.Lock()
	own := map[*session.Peer]bool{}
	for p := range peers {
		own[p] = true
	}
	mu.Unlock()

	var endpoints []string
	for i := 0; i < 3; i++ {
		endpoints = append(endpoints, f.Node(i).Endpoints()[0])
	}
	rd := startReaders(b, endpoints, statePresentations, modeState, sid)
	b.Cleanup(rd.stop)
	// The presentations' sessions: every one but the bench's own.
	var subs []*session.Peer
	mu.Lock()
	for p := range peers {
		if !own[p] {
			subs = append(subs, p)
		}
	}
	mu.Unlock()
	if len(subs) != statePresentations {
		b.Fatalf("%d presentation sessions on the servers, want %d", len(subs), statePresentations)
	}

	// The servers' heap once it settled: what the attaches and the subscribes leave
	// behind them (the sessions directory's updates, the subscribe's replies) takes a
	// few hundred ms to go.
	heap := func() uint64 {
		read := func() uint64 {
			var ms runtime.MemStats
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		h := read()
		for range 10 {
			time.Sleep(200 * time.Millisecond)
			next := read()
			if settled := max(h, next)-min(h, next) < 64<<10; settled {
				return next
			}
			h = next
		}
		return h
	}
	before := heap()
	rd.subscribe()
	after := heap()

	pad := strings.Repeat("x", tickPad)
	var stateTime, baseTime time.Duration
	round := func(statePhase, basePhase string) {
		rd.phase(statePhase)
		start := time.Now()
		if err := state.Set(ctx, Tick{T: start.UnixNano(), Pad: pad}); err != nil {
			b.Fatal(err)
		}
		stateTime += rd.await(statePresentations).Sub(start)

		rd.phase(basePhase)
		start = time.Now()
		raw, err := json.Marshal(Tick{T: start.UnixNano(), Pad: pad})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range subs {
			if err := p.Send(ctx, "bench.push", wire.CodecJSON, raw); err != nil {
				b.Fatal(err)
			}
		}
		baseTime += rd.await(statePresentations).Sub(start)
	}
	round("warm", "warm") // the first update goes through paths not yet warm: not measured
	stateTime, baseTime = 0, 0
	b.ResetTimer()
	for done := 0; done < b.N; done++ {
		round("state", "base")
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/stateTime.Seconds(), "updates/s")
	b.ReportMetric(float64(b.N)/baseTime.Seconds(), "baseline-updates/s")
	b.ReportMetric(stateTime.Seconds()/baseTime.Seconds(), "x-baseline-time")
	sp50, sp99 := rd.stats("state")
	bp50, bp99 := rd.stats("base")
	b.ReportMetric(sp50.Seconds()*1000, "p50-ms")
	b.ReportMetric(sp99.Seconds()*1000, "p99-ms")
	b.ReportMetric(bp50.Seconds()*1000, "baseline-p50-ms")
	b.ReportMetric(bp99.Seconds()*1000, "baseline-p99-ms")
	b.ReportMetric((float64(after)-float64(before))/statePresentations/1024, "KiB-heap/subscription")
}
