// Package fanout benchmarks fan-out to many STREAM clients spread over three nodes: a
// topic's publisher to its subscribers, and a session worker's replicated state to
// its presentations, each against the same payload written to the same sockets from a
// plain loop.
package fanout

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
	"github.com/meshnode/meshnode/topic"
)

// TestMain runs the benchmark's subscribers when started as their process (they hold
// one socket each, as many as the server side holds in the benchmark's process, and
// one process may not hold both under the open-files limit).
func TestMain(m *testing.M) {
	if os.Getenv(readerEnv) != "" {
		os.Exit(runReaders())
	}
	os.Exit(m.Run())
}

// payloadSize is what each publish carries: the publish time (8 bytes) and padding.
const payloadSize = 64

// BenchmarkTopicFanOut publishes to a topic whose subscribers are spread evenly over
// three nodes, one message at a time (each reaches every subscriber before the next is
// published), in alternation with a baseline that writes the same frame to the same
// server-side sockets from a plain loop (no mesh, no hub). An operation is one message
// to every subscriber. It reports deliveries per second of each, their ratio
// (x-baseline-deliveries, goal >= 0.5), and the latency from publish to delivery over
// every delivery (p50, p99), of the topic and of the baseline.
func BenchmarkTopicFanOut(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) { fanOut(b, n) })
	}
}

func fanOut(b *testing.B, subscribers int) {
	var (
		mu    sync.Mutex
		peers = map[string][]*session.Peer{} // by node RID, in connect order
	)
	f := fleet.Start(b, 3, fleet.Options{NoTap: true, Config: func(cfg *meshnode.Config) {
		cfg.MaxConnections = subscribers // the default, the open-files limit less a reserve, is for one node per process
		cfg.Session = func(n *meshnode.Node) session.SessionType {
			rid := n.ID().RID
			return sampleapp.Mux(n.Binder(), n.Topics()).OnConnect(func(_ context.Context, p *session.Peer) {
				mu.Lock()
				peers[rid] = append(peers[rid], p)
				mu.Unlock()
			}).Type()
		}
	}})
	pubClient := f.Connect(b, 0)
	_ = pubClient
	var publisher *session.Peer
	testkit.Eventually(b, fleet.Wait, "the publisher's session", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if ps := peers[f.Node(0).ID().RID]; len(ps) == 1 {
			publisher = ps[0]
			return true
		}
		return false
	})
	var endpoints []string
	for i := 0; i < 3; i++ {
		endpoints = append(endpoints, f.Node(i).Endpoints()[0])
	}
	rd := startReaders(b, endpoints, subscribers, modeTopic, "fanout")
	defer rd.stop()
	var subs []*session.Peer
	mu.Lock()
	for i := 0; i < 3; i++ {
		ps := peers[f.Node(i).ID().RID]
		if i == 0 {
			ps = ps[1:] // the publisher's own session
		}
		subs = append(subs, ps...)
	}
	mu.Unlock()
	if len(subs) != subscribers {
		b.Fatalf("%d subscriber sessions on the server, want %d", len(subs), subscribers)
	}
	testkit.Eventually(b, fleet.Wait, "node 0 knows every subscriber", func() bool {
		return f.Node(0).Topics().Presence("fanout").Subscribers == subscribers
	})
	hub := f.Node(0).Topics()
	pad := make([]byte, payloadSize)
	payload := func() []byte {
		binary.BigEndian.PutUint64(pad, uint64(time.Now().UnixNano()))
		return pad
	}
	var topicTime, baseTime time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done++ {
		rd.phase("topic")
		start := time.Now()
		if _, err := hub.PublishMessage(context.Background(), publisher, "fanout",
			topic.Message{Name: "bench", Codec: wire.CodecRaw, Payload: payload()}); err != nil {
			b.Fatal(err)
		}
		topicTime += rd.await(subscribers).Sub(start)

		rd.phase("base")
		start = time.Now()
		md := wire.Metadata{{Key: topic.MetaTopic, Value: "fanout"}, {Key: topic.MetaSequence, Value: strconv.Itoa(done + 1)},
			{Key: topic.MetaPublisher, Value: "bench"}}
		frame, err := session.EncodeSend("bench", wire.CodecRaw, payload(), md)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range subs {
			if err := p.SendFrame(frame); err != nil {
				b.Fatal(err)
			}
		}
		baseTime += rd.await(subscribers).Sub(start)
	}
	b.StopTimer()
	deliveries := float64(subscribers) * float64(b.N)
	topicRate, baseRate := deliveries/topicTime.Seconds(), deliveries/baseTime.Seconds()
	b.ReportMetric(topicRate, "deliveries/s")
	b.ReportMetric(baseRate, "baseline-deliveries/s")
	// As the other alternated benchmarks report it: the time ratio (its inverse is the
	// throughput ratio benchreport judges).
	b.ReportMetric(topicTime.Seconds()/baseTime.Seconds(), "x-baseline-time")
	tp50, tp99 := rd.stats("topic")
	bp50, bp99 := rd.stats("base")
	b.ReportMetric(tp50.Seconds()*1000, "p50-ms")
	b.ReportMetric(tp99.Seconds()*1000, "p99-ms")
	b.ReportMetric(bp50.Seconds()*1000, "baseline-p50-ms")
	b.ReportMetric(bp99.Seconds()*1000, "baseline-p99-ms")
}

// readers drives the subscribers' process.
type readers struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	tb  testing.TB
}

const readerEnv = "MESHNODE_FANOUT_READERS"

// startReaders starts the subscribers' process: n connections spread over endpoints,
// each subscribed to the topic arg (modeTopic) or attached to the session arg
// (modeState, subscribed by subscribe).
func startReaders(tb testing.TB, endpoints []string, n int, mode, arg string) *readers {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), readerEnv+"="+strings.Join(endpoints, ",")+";"+strconv.Itoa(n)+";"+mode+";"+arg)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	r := &readers{cmd: cmd, in: in, out: bufio.NewScanner(outPipe), tb: tb}
	if line := r.line(); line != "ready" {
		r.stop()
		tb.Fatalf("the subscribers' process: %q", line)
	}
	return r
}

func (r *readers) line() string {
	if !r.out.Scan() {
		return "exited: " + fmt.Sprint(r.out.Err())
	}
	return r.out.Text()
}

func (r *readers) send(cmd string) {
	if _, err := io.WriteString(r.in, cmd+"\n"); err != nil {
		r.tb.Fatalf("to the subscribers' process: %v", err)
	}
}

// subscribe makes every connection subscribe (modeState) and returns once each is.
func (r *readers) subscribe() {
	r.send("subscribe")
	if line := r.line(); line != "subscribed" {
		r.tb.Fatalf("the subscribers' process: %q", line)
	}
}

// phase makes the deliveries from now on count for phase.
func (r *readers) phase(name string) { r.send("phase " + name) }

// await waits until n more deliveries arrived and returns when the last one did.
func (r *readers) await(n int) time.Time {
	r.send("expect " + strconv.Itoa(n))
	line := r.line()
	ns, ok := strings.CutPrefix(line, "ok ")
	if !ok {
		r.tb.Fatalf("the subscribers' process: %q", line)
	}
	v, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		r.tb.Fatal(err)
	}
	return time.Unix(0, v)
}

// stats returns the median and 99th percentile of phase's publish-to-delivery
// latencies.
func (r *readers) stats(phase string) (p50, p99 time.Duration) {
	r.send("stats " + phase)
	var a, c int64
	if _, err := fmt.Sscanf(r.line(), "%d %d", &a, &c); err != nil {
		r.tb.Fatal(err)
	}
	return time.Duration(a), time.Duration(c)
}

func (r *readers) stop() {
	_, _ = io.WriteString(r.in, "quit\n")
	_ = r.in.Close()
	_ = r.cmd.Wait()
}
