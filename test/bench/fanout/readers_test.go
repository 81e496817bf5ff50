package fanout

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/wire"
)

// runReaders is the subscribers' process: it opens the connections the environment
// names, subscribes each to the topic, says "ready", then reads what arrives and
// answers the benchmark's commands on stdin (phase NAME, expect N, stats NAME, quit).
func runReaders() int {
	spec := strings.Split(os.Getenv(readerEnv), ";")
	if len(spec) != 3 {
		fmt.Fprintln(os.Stderr, "readers: bad spec", spec)
		return 2
	}
	endpoints := strings.Split(spec[0], ",")
	n, _ := strconv.Atoi(spec[1])
	topicName := spec[2]
	rs := &readerSet{arrived: make(chan struct{}, 1)}
	none := ""
	rs.phase.Store(&none)
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := subscribe(strings.TrimPrefix(endpoints[i%len(endpoints)], "tcp://"), i, topicName)
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		fmt.Fprintln(os.Stderr, "readers:", err)
		return 1
	default:
	}
	for _, c := range conns {
		go rs.read(c)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "phase":
			rs.phase.Store(&arg)
		case "expect":
			k, _ := strconv.ParseInt(arg, 10, 64)
			last, ok := rs.await(k, time.Minute)
			if !ok {
				fmt.Printf("timeout after %d of %d\n", rs.count.Load(), k)
				continue
			}
			fmt.Printf("ok %d\n", last)
		case "stats":
			s := rs.collect(arg)
			slices.Sort(s)
			if len(s) == 0 {
				fmt.Println("0 0")
				continue
			}
			fmt.Printf("%d %d\n", s[len(s)/2], s[len(s)*99/100])
		case "quit":
			for _, c := range conns {
				_ = c.Close()
			}
			return 0
		}
	}
	return 0
}

// subscribe opens connection i (from one of fifty loopback addresses, so that source
// ports do not run out) and subscribes it to topicName.
func subscribe(addr string, i int, topicName string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%50))}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	req := testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 1, Name: "subscribe"},
		[]byte(`{"topic":"`+topicName+`"}`))
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	f, err := testkit.ReadFrameFrom(c)
	if err != nil || f.Header.Kind != wire.KindResponse {
		return nil, fmt.Errorf("subscribe %d: %v %v", i, f.Header.Kind, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, nil
}

// readerSet is what the connections received.
type readerSet struct {
	count    atomic.Int64 // deliveries since the last expect
	last     atomic.Int64 // unix nanos of the latest delivery
	expected atomic.Int64
	arrived  chan struct{}
	phase    atomic.Pointer[string]

	mu      sync.Mutex
	readers []*reader
}

// reader is one connection's deliveries, kept apart so that reading takes no lock.
type reader struct {
	mu      sync.Mutex
	samples map[string][]int64
}

// read reads frames as cheaply as it can: the prefix, then the header skipped, then the
// payload's first 8 bytes (the publish time), the rest discarded.
func (rs *readerSet) read(c net.Conn) {
	rd := &reader{samples: map[string][]int64{}}
	rs.mu.Lock()
	rs.readers = append(rs.readers, rd)
	rs.mu.Unlock()
	br := bufio.NewReaderSize(c, 4096)
	var pre [wire.PrefixSize]byte
	for {
		if _, err := io.ReadFull(br, pre[:]); err != nil {
			return
		}
		hl, pl := wire.ParsePrefix(pre[:])
		if _, err := br.Discard(hl); err != nil {
			return
		}
		if pl < 8 {
			if _, err := br.Discard(pl); err != nil {
				return
			}
			continue
		}
		ts, err := br.Peek(8)
		if err != nil {
			return
		}
		now := time.Now().UnixNano()
		lat := now - int64(binary.BigEndian.Uint64(ts))
		if _, err := br.Discard(pl); err != nil {
			return
		}
		phase := *rs.phase.Load()
		rd.mu.Lock()
		rd.samples[phase] = append(rd.samples[phase], lat)
		rd.mu.Unlock()
		for {
			old := rs.last.Load()
			if now <= old || rs.last.CompareAndSwap(old, now) {
				break
			}
		}
		if rs.count.Add(1) >= rs.expected.Load() {
			select {
			case rs.arrived <- struct{}{}:
			default:
			}
		}
	}
}

// collect returns every reader's samples of phase.
func (rs *readerSet) collect(phase string) []int64 {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []int64
	for _, rd := range rs.readers {
		rd.mu.Lock()
		out = append(out, rd.samples[phase]...)
		rd.mu.Unlock()
	}
	return out
}

// await waits until k deliveries arrived since the last await and returns the time of
// the latest.
func (rs *readerSet) await(k int64, timeout time.Duration) (int64, bool) {
	rs.expected.Store(k)
	deadline := time.After(timeout)
	for rs.count.Load() < k {
		select {
		case <-rs.arrived:
		case <-deadline:
			return 0, false
		}
	}
	rs.count.Add(-k)
	return rs.last.Load(), true
}
