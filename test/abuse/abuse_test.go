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

// Latency bounds: a well-behaved client's p99 under attack stays within latencyFactor
// times its p99 alone, measured in the same run, plus a slack for the scheduler of a
// shared 2-core machine that also runs the hostile clients and several meshnode
// processes: 20 ms in the full form, 150 ms in the short form (its windows are seconds
// long, so a few scheduler hiccups move its p99: with a peer SIGSTOPped and 100,000
// relays queued under -race, single requests stalled 54-74 ms on this machine, and
// 91-112 ms on a busier day, with the code of before and after the speed work alike,
// failing 1 run in 5 at 80 ms; a one-second window of 50 to 90 requests makes that one
// stall its p99). A session that the stalled peer really held would wait seconds.
const latencyFactor = 5

func latencySlack() time.Duration {
	if suiteScale().full {
		return 20 * time.Millisecond
	}
	return 150 * time.Millisecond
}

func checkLatency(t *testing.T, base, under latencies) {
	t.Helper()
	bound := latencyFactor*base.p(0.99) + latencySlack()
	figure(t, "well-behaved alone: %s", base)
	figure(t, "well-behaved under attack: %s (bound p99 <= %v)", under, bound)
	if under.p(0.99) > bound {
		t.Errorf("well-behaved p99 %v under attack, bound %v (%d x alone + %v)", under.p(0.99), bound, latencyFactor, latencySlack())
	}
	if under.lost != 0 || base.lost != 0 {
		t.Errorf("well-behaved client lost %d replies", base.lost+under.lost)
	}
}

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
	mem := watchMemory(n)
	under := wellBehaved(t, good, "echo", sc.attack, echoed)
	permits := n.Metric("zlink_host_application_job_queue_jobs", `state=in_use`)
	h.end()
	rss, heap := mem.end()
	checkLatency(t, base, under)
	figure(t, "%d hostile connections wrote %d requests and never read; permits in use at the end %v; peak RSS %d MiB, heap %d MiB",
		sc.hostile, frames.Load(), permits, rss/mib, heap/mib)
	if rss > 400*mib {
		t.Errorf("peak RSS %d MiB, bound 400 MiB", rss/mib)
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
	memA, memB := watchMemory(a), watchMemory(b)
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
		if m.rss > 300*mib || m.heap > 200*mib {
			t.Errorf("node %s: peak RSS %d MiB, heap %d MiB; bounds 300 and 200 MiB", m.node, m.rss/mib, m.heap/mib)
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
	before := n.RSS()
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
	rss, heap := n.RSS(), n.HeapInUse()
	figure(t, "%d rooms bound and unbound in %v (%d activations at the end of the churn); all collected %v later; RSS %d -> %d MiB, heap in use %d MiB",
		sc.churn, churnTime.Round(time.Millisecond), peak, collected.Round(time.Millisecond), before/mib, rss/mib, heap/mib)
	if rss > before+200*mib {
		t.Errorf("RSS grew from %d to %d MiB", before/mib, rss/mib)
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
	if last > 20*time.Second {
		t.Errorf("the last request waited %v after the kill", last)
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
	heapBefore, rssBefore := n.HeapInUse(), n.RSS()

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
	heapAnn, rssAnn := n.HeapInUse(), n.RSS()
	perConnHeap := (heapAnn - heapBefore) / int64(sc.announced)
	figure(t, "%d connections announcing 65,000-byte frames: heap +%d KiB each, RSS +%d KiB each",
		sc.announced, perConnHeap>>10, (rssAnn-rssBefore)/int64(sc.announced)>>10)
	if perConnHeap > 24<<10 {
		t.Errorf("heap %d KiB per connection that announced a 65,000-byte frame and sent 100 bytes", perConnHeap>>10)
	}

	// Tricklers: one byte every interval, on tcp and ws.
	interval := 200 * time.Millisecond
	if sc.full {
		interval = 3 * time.Second
	}
	frame := mustFrame(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 1, Name: "echo"}, []byte(`"trickle"`))
	var closed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	trickle := func(w func([]byte) error, done func()) {
		defer wg.Done()
		defer done()
		for i := 0; ; i++ {
			if err := w(frame[i%len(frame) : i%len(frame)+1]); err != nil {
				closed.Add(1)
				return
			}
			time.Sleep(interval)
			if time.Since(start) > frameTimeout+20*time.Second {
				return
			}
		}
	}
	for range sc.trickle {
		c, err := net.Dial("tcp", strings.TrimPrefix(n.Endpoints["tcp"], "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go trickle(func(b []byte) error {
			if _, err := c.Write(b); err != nil {
				return err
			}
			// A closed connection shows on the read side first.
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			var one [1]byte
			if _, err := c.Read(one[:]); err != nil && !isTimeout(err) {
				return err
			}
			return nil
		}, func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ws, _, err := websocket.Dial(ctx, n.Endpoints["ws"], nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		wsClosed := make(chan struct{})
		go func() { // reads until the server closes
			defer close(wsClosed)
			for {
				if _, _, err := ws.Read(context.Background()); err != nil {
					return
				}
			}
		}()
		wg.Add(1)
		go trickle(func(b []byte) error {
			select {
			case <-wsClosed:
				return net.ErrClosed
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return ws.Write(ctx, websocket.MessageBinary, b)
		}, func() { _ = ws.CloseNow(); <-wsClosed })
	}
	rssTrickle := n.RSS()
	wg.Wait()
	took := time.Since(start)
	figure(t, "%d tcp + %d ws connections trickling 1 byte every %v: all closed %v after they started (frame timeout %v); RSS +%d KiB each while open",
		sc.trickle, sc.trickle, interval, took.Round(time.Millisecond), frameTimeout, (rssTrickle-rssAnn)/int64(2*sc.trickle)>>10)
	if got := closed.Load(); got != int64(2*sc.trickle) {
		t.Errorf("%d of %d trickling connections closed by the server", got, 2*sc.trickle)
	}
	if v := n.Metric("meshnode_stream_frame_timeouts_total"); v < float64(2*sc.trickle) {
		t.Errorf("frame timeouts counted %v, want %d", v, 2*sc.trickle)
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
// connections already open keep working.
func TestAbuse_ConnectionLimitRefusesCleanlyAndAdminStaysUp(t *testing.T) {
	const openFiles = 600 // default limit then: 600 less a reserve of 256 = 344
	n := proc.Start(t, proc.Config{ID: "fd", OpenFiles: openFiles, Streams: []string{"tcp://127.0.0.1:0"}})
	addr := strings.TrimPrefix(n.Endpoints["tcp"], "tcp://")
	var conns []*rawClient
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	refused := 0
	for i := 0; i < openFiles; i++ {
		c, err := dialRaw(n.Endpoints["tcp"])
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	// Read every connection at once: an admitted one sends nothing and times out.
	var wg sync.WaitGroup
	var refusedN atomic.Int64
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			h, payload, err := c.readFrame()
			if err == nil && h.Name == wire.NameSessionClosing {
				if sc, _ := wire.DecodeSessionClosing(payload); sc.Reason == wire.CloseServerDrain {
					refusedN.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	refused = int(refusedN.Load())
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
	if refused == 0 || float64(refused) != counted {
		t.Errorf("%d refusals seen by clients, %v counted", refused, counted)
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
	_ = addr
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
