// Package abuse is the load-and-abuse suite: hostile and careless clients against real
// meshnode processes on loopback. Each scenario is bounded and stops by itself, and
// asserts that well-behaved clients keep their latency (p99 within a stated factor of
// the baseline measured in the same run), that the server's memory stays under a
// stated bound, and that no reply is lost, duplicated or misdelivered. `make test`
// runs the short form; `make abuse` the full one (MESHNODE_ABUSE=full), whose FIGURE
// lines are the figures reported in the issue notes.
package abuse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/proc"
)

func TestMain(m *testing.M) {
	code := func() int {
		defer proc.Cleanup()
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Latency bound: a well-behaved client's p99 under attack stays within latencyFactor
// times its p99 alone, measured in the same run just before, with no allowance added:
// a client the attack held would wait hundreds of milliseconds or seconds, against a
// p99 alone of 0.1-1.8 ms. Measured on the project's 2-core machine, shared, without
// -race: under attack the p99 was 0.6-4.5 times the p99 alone (short form, three runs:
// clients that do not read 0.7-1.0x, the slow reader 2.1-4.5x, the stalled peer
// 0.6-1.4x; full form 2.0x, 1.7x, 0.7x). Under -race the hostile clients, which run in
// this process, slowed the well-behaved one's goroutine so much that its p99 under
// attack was 27-132 times its p99 alone with no change in the server: the race
// detector's figure, not the server's. So the suite measures without it (make test
// runs it so), and fails when built with -race.
const latencyFactor = 10

func checkLatency(t *testing.T, base, under latencies) {
	t.Helper()
	bound := latencyFactor * base.p(0.99)
	figure(t, "well-behaved alone: %s", base)
	figure(t, "well-behaved under attack: %s (p99 %.1fx alone; bound %dx: %v)", under, float64(under.p(0.99))/float64(base.p(0.99)), latencyFactor, bound)
	if raceEnabled {
		t.Errorf("the abuse suite measures latencies: run it without -race (the race detector slows its own clients tens of times)")
	}
	if under.p(0.99) > bound {
		t.Errorf("well-behaved p99 %v under attack, bound %v (%d x %v alone)", under.p(0.99), bound, latencyFactor, base.p(0.99))
	}
	if under.lost != 0 || base.lost != 0 {
		t.Errorf("well-behaved client lost %d replies", base.lost+under.lost)
	}
}

// Memory bounds, a few times the peaks measured (short form under -race and not, full
// form): the bounds of a scenario hold in both forms, since memory that stays flat does
// not grow with the attack's length.
const (
	// Clients that do not read: peak RSS 30-32 MiB (short), 39 MiB (full); heap in
	// use 6-7 MiB, 11 MiB.
	deafRSS, deafHeap = 100 * mib, 32 * mib
	// The slow reader of relayed replies, on both nodes: peak RSS 33-41 MiB, heap
	// 6-13 MiB in either form. Without the write queue's bound node a reached 244 and
	// 316 MiB (heap 187 and 183 MiB) in the short form's 3 s, in two runs.
	slowRSS, slowHeap = 100 * mib, 32 * mib
	// A connection that announced a 65,000-byte frame and sent 100 bytes: heap +5-9
	// KiB, RSS +10-16 KiB each; a trickling one RSS +15-18 KiB each.
	announcedHeap, announcedRSS, tricklingRSS = 24 << 10, 48 << 10, 48 << 10
	// How long after the frame timeout a trickling connection is closed: at most 51 ms
	// (short form, 2 s timeout) and 22 ms (full form, 10 s).
	closeSlack = 200 * time.Millisecond
)

// One client stalls the whole node: clients that pipeline echo requests and never read
// the replies (reconnecting when closed) must stall only themselves.
func TestAbuse_ClientsThatDoNotReadStallOnlyThemselves(t *testing.T) {
	sc := suiteScale()
	n := proc.Start(t, proc.Config{ID: "deaf"})
	good := dial(t, n.Endpoints["tcp"])
	base := wellBehaved(t, good, "echo", sc.baseline, echoed)

	payload := []byte(`"` + strings.Repeat("x", 1000) + `"`)
	var frames atomic.Int64
	h := startHostiles(sc.hostile, func(stop <-chan struct{}) {
		c, err := dialRaw(n.Endpoints["tcp"])
		if err != nil {
			return
		}
		defer c.Close()
		for {
			// Blocks while the server does not pull (this client stalls, as it should);
			// fails when the server closes it (send timeout): then it reconnects.
			if err := c.writeAll(c.request("echo", payload, nil), stop); err != nil {
				return
			}
			frames.Add(1)
			// The hostiles share this test process with the well-behaved client, which
			// real attackers on other machines do not: 50 goroutines writing in a loop
			// competed with its goroutine for a processor (its worst request took up to
			// 660 ms, 70-90 ms once they yield). Yielding after each request rotates them.
			runtime.Gosched()
		}
	})
	mem := watchMemory(t, n)
	under := wellBehaved(t, good, "echo", sc.attack, echoed)
	permits := n.Metric("zlink_host_application_job_queue_jobs", `state=in_use`)
	h.end()
	rss, heap := mem.end()
	checkLatency(t, base, under)
	figure(t, "%d hostile connections wrote %d requests and never read; permits in use at the end %v; peak RSS %d MiB, heap %d MiB",
		sc.hostile, frames.Load(), permits, rss/mib, heap/mib)
	if rss > deafRSS || heap > deafHeap {
		t.Errorf("peak RSS %d MiB, heap %d MiB; bounds %d and %d MiB", rss/mib, heap/mib, deafRSS/mib, deafHeap/mib)
	}
}

// One client grows the server's memory without bound: a client pipelining room.echo to
// a room on another node while reading slowly (about 2 MB/s) must leave memory flat.
func TestAbuse_SlowReaderOfRelayedRepliesKeepsMemoryFlat(t *testing.T) {
	sc := suiteScale()
	// The production (lan) timing: the load must raise no false suspicion with it.
	a := proc.Start(t, proc.Config{ID: "a", Timing: "lan"})
	b := proc.Start(t, proc.Config{ID: "b", Timing: "lan", Join: []string{a.Mesh}})
	proc.Eventually(t, "two members", func() bool { return a.Alive() == 2 && b.Alive() == 2 })

	good := dial(t, a.Endpoints["tcp"])
	bindRoomOn(t, good, "good-room", "b")
	base := wellBehaved(t, good, "room.echo", sc.baseline, roomEchoed)

	slow := dial(t, a.Endpoints["tcp"]) // binds with the connector, then goes raw
	room := bindRoomOn(t, slow, "slow-room", "b")
	_ = slow
	rc, err := dialRaw(a.Endpoints["tcp"])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	bindFrame := rc.request("bind", []byte(`{"actor":"`+room+`"}`), nil)
	if _, err := rc.Write(bindFrame); err != nil {
		t.Fatal(err)
	}
	if h, _, err := rc.readFrame(); err != nil || h.Kind != wire.KindResponse {
		t.Fatalf("raw bind: %v %v", h.Kind, err)
	}
	payload := []byte(`"` + strings.Repeat("y", 4000) + `"`)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var written, read atomic.Int64
	wg.Add(2)
	go func() { // writer: as fast as the server pulls
		defer wg.Done()
		for {
			if err := rc.writeAll(rc.request("room.echo", payload, nil), stop); err != nil {
				return
			}
			written.Add(1)
		}
	}()
	go func() { // reader: about 2 MB/s
		defer wg.Done()
		buf := make([]byte, 20<<10)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			_ = rc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := rc.br.Read(buf)
			read.Add(int64(n))
			if err != nil {
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					return
				}
			}
		}
	}()
	memA, memB := watchMemory(t, a), watchMemory(t, b)
	under := wellBehaved(t, good, "room.echo", sc.attack, roomEchoed)
	close(stop)
	_ = rc.Close()
	wg.Wait()
	rssA, heapA := memA.end()
	rssB, heapB := memB.end()
	checkLatency(t, base, under)
	figure(t, "slow reader wrote %d relayed requests of 4 KB and read %d MiB; peak RSS a %d MiB (heap %d), b %d MiB (heap %d)",
		written.Load(), read.Load()/mib, rssA/mib, heapA/mib, rssB/mib, heapB/mib)
	for _, m := range []struct {
		node      string
		rss, heap int64
	}{{"a", rssA, heapA}, {"b", rssB, heapB}} {
		if m.rss > slowRSS || m.heap > slowHeap {
			t.Errorf("node %s: peak RSS %d MiB, heap %d MiB; bounds %d and %d MiB", m.node, m.rss/mib, m.heap/mib, slowRSS/mib, slowHeap/mib)
		}
	}
	noFalseSuspicions(t, a, b)
}

// Actors are never collected: binding then unbinding many distinct rooms leaves them
// to idle collection, and one session cannot bind more than the bound.
func TestAbuse_BindChurnLeavesNoActivationsAndBindingsAreBounded(t *testing.T) {
	sc := suiteScale()
	n := proc.Start(t, proc.Config{ID: "churn", Args: []string{"--actor-idle-timeout", "1s", "--max-bindings-per-session", "100"}})
	c := dial(t, n.Endpoints["tcp"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	before := n.RSS(t)
	start := time.Now()
	const workers = 8
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := c
			if w > 0 {
				cl = dial(t, n.Endpoints["tcp"])
			}
			for i := w; i < sc.churn; i += workers {
				room := fmt.Sprintf("churn-%d", i)
				if err := cl.Request(ctx, "bind", map[string]string{"actor": room}, nil); err != nil {
					failed.Add(1)
					continue
				}
				if err := cl.Request(ctx, "unbind", map[string]string{"actor": room}, nil); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d binds or unbinds failed", f)
	}
	peak := n.Actors()
	churnTime := time.Since(start)
	proc.Eventually(t, "idle rooms collected", func() bool { return n.Actors() == 0 })
	collected := time.Since(start) - churnTime
	rss, heap := n.RSS(t), n.HeapInUse(t)
	figure(t, "%d rooms bound and unbound in %v (%d activations at the end of the churn); all collected %v later; RSS %d -> %d MiB, heap in use %d MiB",
		sc.churn, churnTime.Round(time.Millisecond), peak, collected.Round(time.Millisecond), before/mib, rss/mib, heap/mib)
	if rss > before+sc.churnRSS || heap > sc.churnHeap {
		t.Errorf("RSS grew from %d to %d MiB (bound +%d MiB), heap in use %d MiB (bound %d MiB)",
			before/mib, rss/mib, sc.churnRSS/mib, heap/mib, sc.churnHeap/mib)
	}
	// One session, many rooms: refused past the bound with capacity_exceeded.
	greedy := dial(t, n.Endpoints["tcp"])
	for i := range 100 {
		if err := greedy.Request(ctx, "bind", map[string]string{"actor": fmt.Sprintf("greedy-%d", i)}, nil); err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
	}
	err := greedy.Request(ctx, "bind", map[string]string{"actor": "greedy-100"}, nil)
	var re *connector.RemoteError
	if !asRemote(err, &re) || re.Code != fault.CapacityExceeded.Code() {
		t.Fatalf("bind past --max-bindings-per-session: %v, want capacity_exceeded", err)
	}
}

// Requests in flight when a node dies: with the room's node killed (SIGKILL), every
// relayed request waiting on it gets unavailable as soon as membership declares the
// node failed; none waits for its own deadline.
func TestAbuse_NodeDeathFailsInFlightRequestsAtOnce(t *testing.T) {
	sc := suiteScale()
	timing := "test"
	if sc.full {
		timing = "lan" // the production default: the window documented in docs/binding.md
	}
	a := proc.Start(t, proc.Config{ID: "a", Timing: timing, Args: []string{"--relay-timeout", "5m"}})
	b := proc.Start(t, proc.Config{ID: "b", Timing: timing, Join: []string{a.Mesh}})
	proc.Eventually(t, "two members", func() bool { return a.Alive() == 2 && b.Alive() == 2 })
	const clients, perClient = 8, 16 // connections, and requests in flight on each
	type result struct {
		err error
		at  time.Time
	}
	results := make(chan result, 1<<16)
	var killedAt atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range clients {
		c := dial(t, a.Endpoints["tcp"])
		bindRoomOn(t, c, fmt.Sprintf("doomed-%d", i), "b")
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					err := c.Request(ctx, "room.echo", map[string]string{"v": "x"}, nil)
					cancel()
					results <- result{err: err, at: time.Now()}
					if err != nil && killedAt.Load() != 0 {
						return // the binding is gone: this client is done
					}
				}
			}()
		}
	}
	// Let requests flow, then kill the room's node.
	for range clients * 20 {
		if r := <-results; r.err != nil {
			t.Fatalf("before the kill: %v", r.err)
		}
	}
	killedAt.Store(time.Now().UnixNano())
	b.Kill()
	wg.Wait()
	close(stop)
	close(results)
	kill := time.Unix(0, killedAt.Load())
	var first, last time.Duration
	var unavailable, other int
	for r := range results {
		if r.err == nil || r.at.Before(kill) {
			continue
		}
		var re *connector.RemoteError
		if asRemote(r.err, &re) && re.Code == fault.Unavailable.Code() {
			unavailable++
			if d := r.at.Sub(kill); first == 0 || d < first {
				first = d
			}
		} else {
			other++
		}
		last = max(last, r.at.Sub(kill))
	}
	figure(t, "timing %s: %d relayed requests failed unavailable; first %v, last %v after SIGKILL (%d other errors)",
		timing, unavailable, first.Round(time.Millisecond), last.Round(time.Millisecond), other)
	if unavailable == 0 {
		t.Fatal("no request in flight failed with unavailable")
	}
	if v := a.Metric("meshnode_binding_relayed_requests_failed_total", "reason=node_failed"); v < float64(unavailable) {
		t.Errorf("node_failed failures counted %v, clients saw %d", v, unavailable)
	}
	// Failed once the survivor declares the node failed: the last 0.62-1.02 s after
	// the kill with the test timing, 1.95 s with the lan timing.
	bound := 3 * time.Second
	if timing == "lan" {
		bound = 6 * time.Second
	}
	if last > bound {
		t.Errorf("the last request waited %v after the kill, bound %v", last, bound)
	}
}

// No timeouts by default: connections that trickle a frame are closed by the frame
// timeout, on tcp and on ws; connections that announce a large frame cost what they
// sent, not what they announced.
func TestAbuse_TricklingAndAnnouncingConnectionsAreBounded(t *testing.T) {
	sc := suiteScale()
	frameTimeout := 2 * time.Second
	args := []string{"--frame-timeout", frameTimeout.String()}
	if sc.full {
		frameTimeout = 10 * time.Second // the default
		args = nil
	}
	n := proc.Start(t, proc.Config{ID: "trickle", Args: args})
	good := dial(t, n.Endpoints["tcp"])
	heapBefore, rssBefore := n.HeapInUse(t), n.RSS(t)

	// Announcers: a prefix for a 65,000-byte frame and 100 bytes of it.
	h := wire.Header{Kind: wire.KindSend, Codec: wire.CodecRaw, Name: "big"}
	big, _ := wire.AppendFrame(nil, &h, make([]byte, 65000-20))
	var announcers []net.Conn
	for range sc.announced {
		c, err := net.Dial("tcp", strings.TrimPrefix(n.Endpoints["tcp"], "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(big[:100]); err != nil {
			t.Fatal(err)
		}
		announcers = append(announcers, c)
	}
	proc.Eventually(t, "announcers connected", func() bool {
		return n.Metric("zlink_stream_connections_active", "transport=tcp") >= float64(sc.announced+1)
	})
	heapAnn, rssAnn := n.HeapInUse(t), n.RSS(t)
	perConnHeap := (heapAnn - heapBefore) / int64(sc.announced)
	figure(t, "%d connections announcing 65,000-byte frames: heap +%d KiB each, RSS +%d KiB each",
		sc.announced, perConnHeap>>10, (rssAnn-rssBefore)/int64(sc.announced)>>10)
	if perConnRSS := (rssAnn - rssBefore) / int64(sc.announced); perConnHeap > announcedHeap || perConnRSS > announcedRSS {
		t.Errorf("heap %d KiB and RSS %d KiB per connection that announced a 65,000-byte frame and sent 100 bytes; bounds %d and %d KiB",
			perConnHeap>>10, perConnRSS>>10, announcedHeap>>10, announcedRSS>>10)
	}

	// Tricklers: one byte every interval, on tcp and ws. Each must be closed by the
	// frame timeout timed from its first byte: never before it (the server starts the
	// timer when it reads that byte, after the client wrote it), and at most
	// closeSlack after it.
	interval := 200 * time.Millisecond
	if sc.full {
		interval = 3 * time.Second
	}
	frame := mustFrame(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 1, Name: "echo"}, []byte(`"trickle"`))
	giveUp := frameTimeout + 20*time.Second
	type trickler struct{ began, closed time.Time } // closed: zero while the server has not closed it
	ts := make([]trickler, 2*sc.trickle)
	var wg sync.WaitGroup
	for i := range sc.trickle {
		c, err := net.Dial("tcp", strings.TrimPrefix(n.Endpoints["tcp"], "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		tr := &ts[2*i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			var buf [256]byte
			for k := 0; ; k++ {
				at := time.Now()
				if k == 0 {
					tr.began = at
				}
				if _, err := c.Write(frame[k%len(frame) : k%len(frame)+1]); err != nil {
					tr.closed = time.Now()
					return
				}
				// Read (the session-closing, then EOF) until the next byte is due: the
				// close shows at once.
				_ = c.SetReadDeadline(at.Add(interval))
				for {
					if _, err := c.Read(buf[:]); err != nil {
						if !isTimeout(err) {
							tr.closed = time.Now()
							return
						}
						break
					}
				}
				if time.Since(tr.began) > giveUp {
					return
				}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ws, _, err := websocket.Dial(ctx, n.Endpoints["ws"], nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		wtr := &ts[2*i+1]
		var readEnded time.Time // written before wsClosed is closed
		wsClosed := make(chan struct{})
		go func() { // reads until the connection closes: the close shows at once
			defer close(wsClosed)
			for {
				if _, _, err := ws.Read(context.Background()); err != nil {
					readEnded = time.Now()
					return
				}
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			gaveUp := false
		trickle:
			for k := 0; ; k++ {
				if k == 0 {
					wtr.began = time.Now()
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := ws.Write(ctx, websocket.MessageBinary, frame[k%len(frame):k%len(frame)+1])
				cancel()
				if err != nil {
					break
				}
				select {
				case <-wsClosed:
					break trickle
				case <-time.After(interval):
				}
				if gaveUp = time.Since(wtr.began) > giveUp; gaveUp {
					break
				}
			}
			_ = ws.CloseNow()
			<-wsClosed
			if !gaveUp {
				wtr.closed = readEnded
			}
		}()
	}
	rssTrickle := n.RSS(t)
	wg.Wait()
	var open int
	var first, last time.Duration
	for _, tr := range ts {
		if tr.closed.IsZero() {
			open++
			continue
		}
		d := tr.closed.Sub(tr.began)
		if first == 0 || d < first {
			first = d
		}
		last = max(last, d)
	}
	figure(t, "%d tcp + %d ws connections trickling 1 byte every %v: closed %v to %v after their first byte (frame timeout %v, bound %v later); RSS +%d KiB each while open",
		sc.trickle, sc.trickle, interval, first.Round(time.Millisecond), last.Round(time.Millisecond), frameTimeout, closeSlack,
		(rssTrickle-rssAnn)/int64(2*sc.trickle)>>10)
	if open != 0 {
		t.Errorf("%d of %d trickling connections not closed by the server within %v", open, 2*sc.trickle, giveUp)
	}
	if perConn := (rssTrickle - rssAnn) / int64(2*sc.trickle); perConn > tricklingRSS {
		t.Errorf("RSS %d KiB per trickling connection, bound %d KiB", perConn>>10, tricklingRSS>>10)
	}
	if open < len(ts) && (first < frameTimeout || last > frameTimeout+closeSlack) {
		t.Errorf("trickling connections closed %v to %v after their first byte; the frame timeout is %v (and %v for the close itself)",
			first, last, frameTimeout, closeSlack)
	}
	// Every announcer and every trickler had a frame begun and never completed.
	if v, want := n.Metric("meshnode_stream_frame_timeouts_total"), sc.announced+2*sc.trickle; v != float64(want) {
		t.Errorf("frame timeouts counted %v, want %d (%d announcers, %d tricklers)", v, want, sc.announced, 2*sc.trickle)
	}
	var out json.RawMessage
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := good.Request(ctx, "echo", map[string]string{"v": "still"}, &out); err != nil || echoed(out) != "still" {
		t.Fatalf("well-behaved client after the trickle: %s %v", out, err)
	}
	for _, c := range announcers {
		_ = c.Close()
	}
}

// At the file-descriptor limit: past --max-connections new connections are refused
// cleanly (session-closing ServerDrain), the admin endpoint keeps answering, and the
// connections already open keep working. The limit is the default one, the open-files
// limit less its reserve, so exactly the connections past it are refused.
func TestAbuse_ConnectionLimitRefusesCleanlyAndAdminStaysUp(t *testing.T) {
	const openFiles = 600
	// session.DefaultMaxConnections: the open-files limit less a reserve of a tenth of
	// it, at least 256 descriptors.
	const admitted = openFiles - 256
	n := proc.Start(t, proc.Config{ID: "fd", OpenFiles: openFiles, Streams: []string{"tcp://127.0.0.1:0"}})
	var conns []*rawClient
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	// One at a time: the server accepts them in this order, so the first `admitted`
	// take the slots and every later one is refused.
	for i := 0; i < openFiles; i++ {
		c, err := dialRaw(n.Endpoints["tcp"])
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	// Read every connection at once: an admitted one sends nothing and times out.
	var wg sync.WaitGroup
	refusedAt := make([]bool, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			h, payload, err := c.readFrame()
			if err == nil && h.Name == wire.NameSessionClosing {
				if sc, _ := wire.DecodeSessionClosing(payload); sc.Reason == wire.CloseServerDrain {
					refusedAt[i] = true
				}
			}
		}()
	}
	wg.Wait()
	refused, misplaced := 0, 0
	for i, r := range refusedAt {
		if r {
			refused++
		}
		if r != (i >= admitted) {
			misplaced++
		}
	}
	resp, err := http.Get("http://" + n.Admin + "/healthz")
	if err != nil {
		t.Fatalf("admin endpoint at the connection limit: %v", err)
	}
	resp.Body.Close()
	metrics, err := n.Metrics()
	if err != nil {
		t.Fatalf("/metrics at the connection limit: %v", err)
	}
	counted := proc.Sum(metrics, "meshnode_stream_connections_refused_total")
	figure(t, "open-files limit %d: %d connections attempted, %d refused with session-closing ServerDrain (%v counted); /healthz and /metrics answered",
		openFiles, len(conns), refused, counted)
	if want := openFiles - admitted; refused != want || counted != float64(want) {
		t.Errorf("%d refusals seen by clients and %v counted; want %d (%d connections, limit %d)", refused, counted, want, openFiles, admitted)
	}
	if misplaced != 0 {
		t.Errorf("%d connections refused or admitted out of their order (the first %d are admitted)", misplaced, admitted)
	}
	// The first connection is one of the admitted: it still works.
	c := conns[0]
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(c.request("echo", []byte(`"alive"`), nil)); err != nil {
		t.Fatal(err)
	}
	if h, payload, err := c.readFrame(); err != nil || h.Kind != wire.KindResponse || string(payload) != `"alive"` {
		t.Fatalf("admitted connection: %v %q %v", h.Kind, payload, err)
	}
}

// A peer node that stops reading (SIGSTOP): the relay windows of the sessions that
// talk to it and the node's window toward it fill, those sessions stop pulling, the
// others keep their latency, and when the peer comes back everything sent arrives,
// nothing lost.
func TestAbuse_StalledPeerStallsOnlyTheSessionsThatRelayToIt(t *testing.T) {
	sc := suiteScale()
	a := proc.Start(t, proc.Config{ID: "a", Timing: "lan"})
	b := proc.Start(t, proc.Config{ID: "b", Timing: "lan", Join: []string{a.Mesh}})
	c := proc.Start(t, proc.Config{ID: "c", Timing: "lan", Join: []string{a.Mesh}})
	proc.Eventually(t, "three members", func() bool { return a.Alive() == 3 && b.Alive() == 3 && c.Alive() == 3 })

	good := dial(t, a.Endpoints["tcp"])
	bindRoomOn(t, good, "good", "c")
	base := wellBehaved(t, good, "room.echo", sc.baseline, roomEchoed)

	// Three talkers: together they relay more than the window toward b holds.
	const talkers = 3
	var sent, said atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopAt := make(chan struct{})
	var cs []*connector.Connector
	for i := range talkers {
		tc := dial(t, a.Endpoints["tcp"])
		bindRoomOn(t, tc, fmt.Sprintf("talk%d", i), "b")
		tc.Handle("room.said", func(connector.Message) { said.Add(1) })
		cs = append(cs, tc)
	}
	b.Signal(syscall.SIGSTOP)
	for _, tc := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := map[string]string{"v": strings.Repeat("z", 200)}
			for {
				select {
				case <-stopAt:
					return
				default:
				}
				if err := tc.Send(ctx, "room.say", payload); err != nil {
					return
				}
				sent.Add(1)
			}
		}()
	}
	// Held at the relay gate, or (a relay that raced past the gate waits for room in
	// its turn) at the backlog bound behind it: either way their readers pull nothing.
	proc.Eventually(t, "the talkers' sessions held", func() bool {
		m, err := a.Metrics()
		return err == nil && proc.Sum(m, "meshnode_stream_ingress_paused_sessions", "reason=relay")+
			proc.Sum(m, "meshnode_stream_ingress_paused_sessions", "reason=backlog") == talkers &&
			proc.Sum(m, "meshnode_mesh_peer_window_full_peers") == 1
	})
	full := a.Metric("meshnode_mesh_peer_window_full_peers")
	unacked := a.Metric("meshnode_mesh_peer_window_unacked")
	// One second: well under the lan timing's failure detection (the stopped node
	// must come back as itself, not be declared dead).
	under := wellBehaved(t, good, "room.echo", time.Second, roomEchoed)
	close(stopAt)
	b.Signal(syscall.SIGCONT)
	wg.Wait()
	proc.Eventually(t, "every room.say pushed back", func() bool { return said.Load() == sent.Load() })
	checkLatency(t, base, under)
	figure(t, "b stopped: %d talkers held (window toward b: %v records unacknowledged, %v full peers); after SIGCONT all %d room.say pushed back",
		talkers, unacked, full, said.Load())
	if full != 1 {
		t.Errorf("window toward the stopped peer not full: %v full peers, %v unacknowledged", full, unacked)
	}
	noFalseSuspicions(t, a, c) // b was stopped: suspicions of it are true ones
}

// noFalseSuspicions checks that none of nodes, alive all along, had to refute a
// suspicion of itself: the membership timing raised no false suspicion under the load.
func noFalseSuspicions(t *testing.T, nodes ...*proc.Node) {
	t.Helper()
	const name = "meshnode_mesh_suspicions_refuted_total"
	for _, n := range nodes {
		text, err := n.Metrics()
		if err != nil || !strings.Contains(text, name) {
			t.Errorf("node %s: %s not exported (%v)", n.Config.ID, name, err)
			continue
		}
		if v := proc.Sum(text, name); v != 0 {
			t.Errorf("node %s refuted %v suspicions of itself: false suspicions under load", n.Config.ID, v)
		}
		figure(t, "node %s: %v suspicions raised, %v refuted", n.Config.ID, proc.Sum(text, "meshnode_mesh_suspicions_total"), proc.Sum(text, name))
	}
}

func mustFrame(h wire.Header, payload []byte) []byte {
	b, err := wire.AppendFrame(nil, &h, payload)
	if err != nil {
		panic(err)
	}
	return b
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func asRemote(err error, re **connector.RemoteError) bool {
	return err != nil && errors.As(err, re)
}
