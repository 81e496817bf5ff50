package bench

import (
	"context"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// Relocation benchmarks: how long an Actor is unreachable while it moves (under load),
// and what moving a large state costs.

// relocAdd adds N to the counter; the answer is a relocCount.
type relocAdd struct{ N int }

// relocCount is the counter's answer. Node and Authority name the activation that
// answered, so the load generator can tell the first answer from the move's target:
// every move gives the Actor a new authority owner generation.
type relocCount struct {
	N         int
	Node      string
	Authority uint64
}

// relocBlobSum asks the blob Actor for the length and CRC-32 of its state.
type relocBlobSum struct{}

type relocBlobSummary struct {
	Len int
	CRC uint32
}

var relocMessages = []actor.MessageType{
	actor.MessageOf[relocAdd]("bench.reloc.add"),
	actor.MessageOf[relocCount]("bench.reloc.count"),
	actor.MessageOf[relocBlobSum]("bench.reloc.blobsum"),
	actor.MessageOf[relocBlobSummary]("bench.reloc.blobsummary"),
}

type relocCounterState struct{ N int }

// relocCounter counts what it is added; its count moves with it (Kind.State).
type relocCounter struct{ st relocCounterState }

func (c *relocCounter) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*relocAdd); ok {
		c.st.N += m.N
		self := ctx.Self()
		_ = ctx.Reply(&relocCount{N: c.st.N, Node: self.Node.RID, Authority: self.AuthorityOwnerGeneration})
	}
}

// relocBlobSize is the state of the large-state benchmark: 1 MiB.
const relocBlobSize = 1 << 20

type relocBlobState struct{ Blob []byte }

// relocBlob holds 1 MiB of state, filled at its first activation only: on the target
// of a move the restored state replaces it, so a move allocates only what it carries.
type relocBlob struct{ st relocBlobState }

func (a *relocBlob) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if !m.Moved {
			// Random bytes: nothing on the way can make them smaller than they are.
			a.st.Blob = make([]byte, relocBlobSize)
			_, _ = rand.NewChaCha8([32]byte{1}).Read(a.st.Blob)
		}
	case *relocBlobSum:
		_ = ctx.Reply(&relocBlobSummary{Len: len(a.st.Blob), CRC: crc32.ChecksumIEEE(a.st.Blob)})
	}
}

// relocNodes starts n nodes hosting the counter and blob kinds.
func relocNodes(b *testing.B, n int) (*meshtest.Cluster, []*actor.Host) {
	c := meshtest.Start(b, n, meshtest.Options{NoTap: true, Config: func(_ int, cfg *meshnode.Config) {
		cfg.Messages = relocMessages
		cfg.Kinds = []actor.Kind{
			{Name: "bench-counter", New: func() actor.Actor { return &relocCounter{} },
				State: func(a actor.Actor) any { return &a.(*relocCounter).st }},
			{Name: "bench-blob", New: func() actor.Actor { return &relocBlob{} },
				State: func(a actor.Actor) any { return &a.(*relocBlob).st }},
		}
	}})
	hosts := make([]*actor.Host, n)
	for i := range hosts {
		hosts[i] = c.Node(i).Actors()
	}
	return c, hosts
}

// Load of the pause benchmark.
const (
	relocLoadPeriod     = time.Millisecond // ~1,000 requests/s
	relocRequestTimeout = 5 * time.Second  // a request lost in a move shows as a 5 s latency and an error
	relocMaxInFlight    = 512              // past this (a stuck Actor), ticks are skipped and counted
	relocMaxRequests    = 20 * 60 * 1000   // bounds the pacer: 20 minutes at the nominal rate
	relocWarmAnswers    = 50               // answers before anything is measured
	relocSettleAnswers  = 10               // answers from the target between moves (untimed)
	relocMaxErrorTexts  = 5
)

// relocEpoch names one activation of the Actor: a node and an authority owner
// generation (new at every move).
type relocEpoch struct {
	rid       string
	authority uint64
}

// relocLoad makes paced Host.Requests to one Actor from one node, each in its own
// goroutine (a request held by a move must not hold back the ones after it, or the
// load would stop exactly when it matters), and records when each activation of the
// Actor answered first.
type relocLoad struct {
	h    *actor.Host
	addr actor.Address
	stop chan struct{}
	wg   sync.WaitGroup // the pacer and every request in flight

	mu       sync.Mutex
	first    map[relocEpoch]time.Time // the first answer of each activation, as the caller saw it
	answers  map[relocEpoch]int
	news     chan struct{} // closed (and replaced) at every answer
	from     time.Time     // requests sent before are not in reqs
	reqs     []relocReq
	sent     int
	answered int
	failed   int
	skipped  int
	errs     []string
}

// relocReq is one measured request: when it was sent and answered.
type relocReq struct{ start, end time.Time }

func startRelocLoad(h *actor.Host, addr actor.Address) *relocLoad {
	l := &relocLoad{h: h, addr: addr, stop: make(chan struct{}), first: map[relocEpoch]time.Time{},
		answers: map[relocEpoch]int{}, news: make(chan struct{}), from: time.Now()}
	l.wg.Go(l.pace)
	return l
}

func (l *relocLoad) pace() {
	tick := time.NewTicker(relocLoadPeriod)
	defer tick.Stop()
	inFlight := make(chan struct{}, relocMaxInFlight)
	for range relocMaxRequests {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		select {
		case inFlight <- struct{}{}:
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
			continue
		}
		l.wg.Go(func() {
			defer func() { <-inFlight }()
			l.request()
		})
	}
}

func (l *relocLoad) request() {
	ctx, cancel := context.WithTimeout(context.Background(), relocRequestTimeout)
	defer cancel()
	start := time.Now()
	l.mu.Lock()
	l.sent++
	l.mu.Unlock()
	v, err := l.h.Request(ctx, l.addr, &relocAdd{N: 1})
	end := time.Now()
	c, ok := v.(*relocCount)
	if err == nil && !ok {
		err = fmt.Errorf("unexpected answer %T", v)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !start.Before(l.from) {
		l.reqs = append(l.reqs, relocReq{start, end})
	}
	if err != nil {
		l.failed++
		if len(l.errs) < relocMaxErrorTexts {
			l.errs = append(l.errs, fmt.Sprintf("request sent at +%v failed after %v: %v", start.Sub(l.from).Round(time.Microsecond), end.Sub(start).Round(time.Microsecond), err))
		}
		return
	}
	l.answered++
	e := relocEpoch{c.Node, c.Authority}
	if t, seen := l.first[e]; !seen || end.Before(t) {
		l.first[e] = end
	}
	l.answers[e]++
	close(l.news)
	l.news = make(chan struct{})
}

// measureFrom starts the measured phase: only requests sent from now on are kept.
func (l *relocLoad) measureFrom() {
	l.mu.Lock()
	l.from, l.reqs = time.Now(), l.reqs[:0]
	l.mu.Unlock()
}

// await waits until activation e has answered n requests and returns when it answered
// the first; false when timeout passes first.
func (l *relocLoad) await(e relocEpoch, n int, timeout time.Duration) (time.Time, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		first, got, news := l.first[e], l.answers[e], l.news
		l.mu.Unlock()
		if got >= n {
			return first, true
		}
		select {
		case <-news:
		case <-deadline.C:
			return time.Time{}, false
		}
	}
}

// awaitTotal waits until n requests in all have been answered.
func (l *relocLoad) awaitTotal(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		got, news := l.answered, l.news
		l.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-news:
		case <-deadline.C:
			return false
		}
	}
}

// halt stops the pacer and waits for every request in flight (each ends within
// relocRequestTimeout). It may be called more than once.
func (l *relocLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// percentile returns the nearest-rank p-th percentile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkRelocationPause: three nodes; one counter Actor (its count moves with it)
// answers about 1,000 requests/s made from node 0 through its Address (so through the
// route cache and Message Follow, as an application would). Each iteration moves it to
// the next node (1 -> 2 -> 0 -> 1 ...) and waits for the first request the target
// answers: the pause is from the call to Relocate (the seal follows at once) to that
// answer, as the caller sees it. Between moves, untimed, the target answers a few more
// so each move starts under steady load. Reported: the pause's p50 and p99 over the
// moves, the longest latency of a request in flight during a pause, the p99 latency of
// every request, and moves/s (move plus pause). Any failed request fails the
// benchmark: a move must lose nothing.
func BenchmarkRelocationPause(b *testing.B) {
	c, hosts := relocNodes(b, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	addr := actor.Address{Kind: "bench-counter", ID: "reloc-pause"}
	if _, err := hosts[0].LookupOn(ctx, addr.Kind, addr.ID, c.Node(1).ID().RID); err != nil {
		b.Fatal(err)
	}
	load := startRelocLoad(hosts[0], addr)
	defer load.halt()
	if !load.awaitTotal(relocWarmAnswers, benchWait) {
		b.Fatalf("the counter answered fewer than %d requests in %v", relocWarmAnswers, benchWait)
	}
	cur := 1
	type pause struct{ t0, first time.Time }
	move := func(i int) pause {
		next := (cur + 1) % len(hosts)
		t0 := time.Now()
		f, err := hosts[cur].Relocate(ctx, addr.ID, c.Node(next).ID().RID)
		if err != nil {
			b.Fatalf("move %d, node %d to %d: %v", i, cur, next, err)
		}
		e := relocEpoch{f.Node.RID, f.AuthorityOwnerGeneration}
		first, ok := load.await(e, 1, benchWait)
		if !ok {
			b.Fatalf("move %d, node %d to %d: the target answered nothing within %v", i, cur, next, benchWait)
		}
		cur = next
		b.StopTimer()
		if _, ok := load.await(e, relocSettleAnswers, benchWait); !ok {
			b.Fatalf("move %d: the target answered fewer than %d requests within %v", i, relocSettleAnswers, benchWait)
		}
		b.StartTimer()
		return pause{t0, first}
	}
	// One untimed round first, so that each pair of nodes a move uses has carried a
	// move (streams, lazy state) before one is measured.
	for i := range hosts {
		move(-1 - i)
	}
	load.measureFrom()
	pauses := make([]pause, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pauses = append(pauses, move(i))
	}
	b.StopTimer()
	elapsed := b.Elapsed()
	load.halt()

	load.mu.Lock()
	defer load.mu.Unlock()
	for _, e := range load.errs {
		b.Error(e)
	}
	if load.failed > 0 {
		b.Errorf("%d of %d requests failed during the moves (first %d above)", load.failed, load.sent, len(load.errs))
	}
	v, err := hosts[0].Request(ctx, addr, &relocAdd{N: 0})
	if err != nil {
		b.Fatalf("the count after the moves: %v", err)
	}
	// Every answered request counted once, on whichever node; a failed one may or may
	// not have been counted. Less means state was lost in a move, more counted twice.
	if n := v.(*relocCount).N; n < load.answered || n > load.sent {
		b.Errorf("count %d after the moves: %d requests answered, %d sent", n, load.answered, load.sent)
	}
	sorted := make([]time.Duration, len(pauses))
	var worst time.Duration // the longest request latency overlapping a pause
	for i, p := range pauses {
		sorted[i] = p.first.Sub(p.t0)
		for _, r := range load.reqs {
			if !r.start.After(p.first) && !r.end.Before(p.t0) {
				worst = max(worst, r.end.Sub(r.start))
			}
		}
	}
	slices.Sort(sorted)
	lat := make([]time.Duration, len(load.reqs))
	for i, r := range load.reqs {
		lat[i] = r.end.Sub(r.start)
	}
	slices.Sort(lat)
	b.ReportMetric(ms(percentile(sorted, 50)), "pause-p50-ms")
	b.ReportMetric(ms(percentile(sorted, 99)), "pause-p99-ms")
	b.ReportMetric(ms(worst), "inflight-max-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "req-p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "moves/s")
	if load.skipped > 0 {
		b.ReportMetric(float64(load.skipped), "skipped-ticks")
	}
}

// BenchmarkRelocation1MiBState moves an Actor holding 1 MiB of state (a []byte in its
// Kind.State) back and forth between two nodes: one move per iteration, Relocate
// called on the source and returning once the target committed. MB/s is state moved;
// allocations are both nodes' (one process). The state is checked intact at the end.
func BenchmarkRelocation1MiBState(b *testing.B) {
	c, hosts := relocNodes(b, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	addr := actor.Address{Kind: "bench-blob", ID: "reloc-blob"}
	if _, err := hosts[0].LookupOn(ctx, addr.Kind, addr.ID, c.Node(0).ID().RID); err != nil {
		b.Fatal(err)
	}
	sum := func() relocBlobSummary {
		v, err := hosts[0].Request(ctx, addr, &relocBlobSum{})
		if err != nil {
			b.Fatal(err)
		}
		return *v.(*relocBlobSummary)
	}
	want := sum()
	if want.Len != relocBlobSize {
		b.Fatalf("the Actor holds %d bytes, want %d", want.Len, relocBlobSize)
	}
	cur := 0
	move := func(i int) {
		next := 1 - cur
		if _, err := hosts[cur].Relocate(ctx, addr.ID, c.Node(next).ID().RID); err != nil {
			b.Fatalf("move %d, node %d to %d: %v", i, cur, next, err)
		}
		cur = next
	}
	// A round trip first: the first move on a pair of nodes sets up what later ones reuse.
	move(-1)
	move(-2)
	b.SetBytes(relocBlobSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		move(i)
	}
	b.StopTimer()
	if got := sum(); got != want {
		b.Fatalf("state after %d moves: %d bytes, CRC %08x; want %d bytes, CRC %08x", b.N+2, got.Len, got.CRC, want.Len, want.CRC)
	}
}
