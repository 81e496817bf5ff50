package abuse

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/proc"
)

// scale is how hard the suite pushes: the short form runs in `make test`, the full form
// (`make abuse`, MESHNODE_ABUSE=full) reproduces the figures.
type scale struct {
	full      bool
	baseline  time.Duration // well-behaved client alone
	attack    time.Duration // well-behaved client under attack
	hostile   int           // hostile connections
	churn     int           // distinct rooms bound and unbound
	trickle   int           // trickling connections per transport
	announced int           // connections that announce a large frame
	// churnRSS and churnHeap bound the RSS the churn adds and the heap in use once
	// every room is collected: RSS +16-26 MiB and heap 8-15 MiB after 2,000 rooms,
	// +118 MiB and 60 MiB after 100,000.
	churnRSS, churnHeap int64
}

func suiteScale() scale {
	if os.Getenv("MESHNODE_ABUSE") == "full" {
		return scale{full: true, baseline: 5 * time.Second, attack: 40 * time.Second, hostile: 50,
			churn: 100_000, trickle: 1000, announced: 1000, churnRSS: 300 * mib, churnHeap: 150 * mib}
	}
	return scale{baseline: time.Second, attack: 3 * time.Second, hostile: 16,
		churn: 2000, trickle: 150, announced: 300, churnRSS: 64 * mib, churnHeap: 40 * mib}
}

// figure logs one measured figure of the suite; `make abuse` prints them.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s: %s", t.Name(), fmt.Sprintf(format, args...))
}

const mib = 1 << 20

func dial(t *testing.T, endpoint string) *connector.Connector { return proc.Connect(t, endpoint) }

// latencies is what a well-behaved client measured.
type latencies struct {
	samples []time.Duration
	lost    int // requests without their own reply (error, wrong payload)
}

func (l latencies) p(q float64) time.Duration {
	if len(l.samples) == 0 {
		return 0
	}
	s := slices.Clone(l.samples)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (l latencies) String() string {
	return fmt.Sprintf("%d requests, p50 %v, p99 %v, p99.9 %v, max %v, lost %d", len(l.samples), l.p(0.5), l.p(0.99), l.p(0.999), l.p(1), l.lost)
}

// wellBehaved sends Request name with a unique payload, one at a time, for d, and
// checks every reply is its own (extract returns the echoed payload).
func wellBehaved(t *testing.T, c *connector.Connector, name string, d time.Duration, extract func(json.RawMessage) string) latencies {
	t.Helper()
	var l latencies
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		want := fmt.Sprintf("good-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		var out json.RawMessage
		err := c.Request(ctx, name, map[string]string{"v": want}, &out)
		cancel()
		if err != nil {
			t.Errorf("%s %d: %v", name, i, err)
			l.lost++
			continue
		}
		l.samples = append(l.samples, time.Since(start))
		if got := extract(out); got != want {
			t.Errorf("%s %d: reply %s is not the request's own", name, i, out)
			l.lost++
		}
	}
	return l
}

// echoed reads {"v":...} from an echo reply.
func echoed(b json.RawMessage) string {
	var v struct{ V string }
	_ = json.Unmarshal(b, &v)
	return v.V
}

// roomEchoed reads {"payload":{"v":...}} from a room.echo reply.
func roomEchoed(b json.RawMessage) string {
	var v struct{ Payload struct{ V string } }
	_ = json.Unmarshal(b, &v)
	return v.Payload.V
}

// rawClient speaks the wire over a socket, for hostile behaviour the connector does not
// have (pipelining without reading, trickling, announcing).
type rawClient struct {
	net.Conn
	br  *bufio.Reader
	seq uint64
}

func dialRaw(endpoint string) (*rawClient, error) {
	addr := strings.TrimPrefix(endpoint, "tcp://")
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawClient{Conn: nc, br: bufio.NewReaderSize(nc, 4096)}, nil
}

// writeAll writes a whole frame, however long the server takes to read it (a frame
// written in part and abandoned would corrupt the stream); it gives up when stop is
// closed or the connection fails. Each timeout in between is the server not pulling.
func (r *rawClient) writeAll(frame []byte, stop <-chan struct{}) error {
	for len(frame) > 0 {
		select {
		case <-stop:
			return net.ErrClosed
		default:
		}
		_ = r.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := r.Write(frame)
		frame = frame[n:]
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return err
		}
	}
	return nil
}

func (r *rawClient) request(name string, payload []byte, md wire.Metadata) []byte {
	r.seq++
	h := wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: r.seq, Name: name, Metadata: md}
	b, _ := wire.AppendFrame(nil, &h, payload)
	return b
}

// readFrame reads one frame.
func (r *rawClient) readFrame() (wire.Header, []byte, error) {
	var pre [wire.PrefixSize]byte
	if _, err := io.ReadFull(r.br, pre[:]); err != nil {
		return wire.Header{}, nil, err
	}
	hl, pl := wire.ParsePrefix(pre[:])
	body := make([]byte, hl+pl)
	if _, err := io.ReadFull(r.br, body); err != nil {
		return wire.Header{}, nil, err
	}
	h, err := wire.DecodeHeader(body[:hl])
	return h, body[hl:], err
}

// hostiles runs n copies of fn until stop is closed; each reconnects when its
// connection ends. wait() waits for all of them.
type hostiles struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func startHostiles(n int, fn func(stop <-chan struct{})) *hostiles {
	h := &hostiles{stop: make(chan struct{})}
	for range n {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for {
				select {
				case <-h.stop:
					return
				default:
				}
				fn(h.stop)
			}
		}()
	}
	return h
}

func (h *hostiles) end() {
	close(h.stop)
	h.wg.Wait()
}

// memPeak records the process's peak RSS and Go heap in use until end; a figure it
// cannot read fails the test.
type memPeak struct {
	mu        sync.Mutex
	rss, heap int64
	done      chan struct{}
	stop      chan struct{}
}

func watchMemory(t *testing.T, n *proc.Node) *memPeak {
	m := &memPeak{done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			rss, heap := n.RSS(t), n.HeapInUse(t)
			m.mu.Lock()
			m.rss, m.heap = max(m.rss, rss), max(m.heap, heap)
			m.mu.Unlock()
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

func (m *memPeak) end() (rss, heap int64) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rss, m.heap
}

// bindRoomOn binds c to a room that placement puts on node rid and returns its id.
func bindRoomOn(t *testing.T, c *connector.Connector, prefix, rid string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), proc.Wait)
	defer cancel()
	for k := 0; k < 500; k++ {
		room := fmt.Sprintf("%s-%d", prefix, k)
		var bound struct{ Node string }
		if err := c.Request(ctx, "bind", map[string]string{"actor": room}, &bound); err != nil {
			t.Fatalf("bind %s: %v", room, err)
		}
		if bound.Node == rid {
			return room
		}
		if err := c.Request(ctx, "unbind", map[string]string{"actor": room}, nil); err != nil {
			t.Fatalf("unbind %s: %v", room, err)
		}
	}
	t.Fatalf("no room placed on %s", rid)
	return ""
}
