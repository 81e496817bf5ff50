package bench

import (
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/test/proc"
)

// BenchmarkIdleSessions opens idle STREAM sessions on a meshnode process and reports
// what each costs the server: RSS, heap in use and goroutines per session. The count is
// MESHNODE_IDLE_SESSIONS (default 10,000; "max": as many as the open-files limit
// allows, about 9,900 with the client in this process). Clients connect from several
// 127.0.0.x addresses so that source ports do not run out. b.N is not used: the
// figures are per session, measured once.
func BenchmarkIdleSessions(b *testing.B) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	n := 10000
	switch v := os.Getenv("MESHNODE_IDLE_SESSIONS"); v {
	case "":
	case "max":
		n = int(lim.Max) - 300 // the client's sockets live in this process too
	default:
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("MESHNODE_IDLE_SESSIONS=%q", v)
		}
	}
	if int(lim.Max)-300 < n {
		n = int(lim.Max) - 300
	}
	srv := proc.Start(b, proc.Config{ID: "idle", Streams: []string{"tcp://127.0.0.1:0"}, OpenFiles: int(lim.Max),
		Args: []string{"--max-connections", "-1", "--admin", "127.0.0.1:0"}})
	addr := srv.Endpoints["tcp"]
	settle := func() (rss, heap, goroutines float64) {
		time.Sleep(500 * time.Millisecond) // let the runtime return what the burst took
		g := srv.Metric("go_goroutines")
		if g < 1 {
			b.Fatalf("go_goroutines of the server: %v", g)
		}
		return float64(srv.RSS(b)), float64(srv.HeapInUse(b)), g
	}
	rss0, heap0, g0 := settle()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range n {
		d := net.Dialer{Timeout: benchWait, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%50))}}
		c, err := d.Dial("tcp", addr[len("tcp://"):])
		if err != nil {
			b.Fatalf("session %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	testkit.Eventually(b, time.Minute, "every session open on the server", func() bool {
		return srv.Metric("zlink_stream_connections_active", "transport=tcp") >= float64(n)
	})
	rss1, heap1, g1 := settle()
	per := float64(n)
	b.ReportMetric((rss1-rss0)/per/1024, "KiB-rss/session")
	b.ReportMetric((heap1-heap0)/per/1024, "KiB-heap/session")
	b.ReportMetric((g1-g0)/per, "goroutines/session")
	b.ReportMetric(per, "sessions")
}
