package fanout

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
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
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/wire"
)

// Reader modes (the third field of the readers' spec).
const (
	// modeTopic: each connection subscribes to the topic the spec names; a delivery's
	// payload starts with its publish time (8 bytes, big-endian unix nanos).
	modeTopic = "topic"
	// modeState: each connection attaches to the session the spec names, then, on the
	// command subscribe, subscribes to its ticker's state; a delivery's payload is the
	// JSON value {"t":unix nanos,...} (a state update or the baseline's plain Send).
	modeState = "state"
)

// runReaders is the subscribers' process: it opens the connections the environment
// names (endpoints;count;mode;topic or session), subscribes each (modeTopic) or
// attaches each (modeState), says "ready", then reads what arrives and answers the
// benchmark's commands on stdin (subscribe, phase NAME, expect N, stats NAME, quit).
func runReaders() int {
	spec := strings.Split(os.Getenv(readerEnv), ";")
	if len(spec) != 4 || (spec[2] != modeTopic && spec[2] != modeState) {
		fmt.Fprintln(os.Stderr, "readers: bad spec", spec)
		return 2
	}
	endpoints := strings.Split(spec[0], ",")
	n, _ := strconv.Atoi(spec[1])
	mode, arg := spec[2], spec[3]
	rs := &readerSet{arrived: make(chan struct{}, 1), stamp: topicStamp}
	if mode == modeState {
		rs.stamp = stateStamp
	}
	none := ""
	rs.phase.Store(&none)
	conns := make([]net.Conn, n)
	// each runs fn for every connection, 64 at a time, and reports the first error.
	each := func(fn func(i int) error) error {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		sem := make(chan struct{}, 64)
		for i := 0; i < n; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := fn(i); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	}
	quit := func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}
	err := each(func(i int) error {
		addr := strings.TrimPrefix(endpoints[i%len(endpoints)], "tcp://")
		var err error
		if mode == modeTopic {
			conns[i], err = subscribe(addr, i, arg)
		} else {
			conns[i], err = attach(addr, i, arg)
		}
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "readers:", err)
		quit()
		return 1
	}
	startReading := func() {
		for _, c := range conns {
			go rs.read(c)
		}
	}
	if mode == modeTopic {
		startReading()
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "subscribe": // modeState: every connection subscribes to the ticker's state
			if err := each(func(i int) error { return subscribeState(conns[i], i) }); err != nil {
				fmt.Printf("error %v\n", err)
				continue
			}
			startReading()
			fmt.Println("subscribed")
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
			quit()
			return 0
		}
	}
	quit()
	return 0
}

// dial opens connection i from one of fifty loopback addresses, so that source ports
// do not run out.
func dial(addr string, i int) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%50))}}
	return d.Dial("tcp", addr)
}

// request writes a Request and reads frames until its answer (pushes before it are
// skipped); an Error answer is an error.
func request(c net.Conn, seq uint64, name string, md wire.Metadata, payload []byte) (testkit.Frame, error) {
	req := testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: seq, Name: name, Metadata: md}, payload)
	if _, err := c.Write(req); err != nil {
		return testkit.Frame{}, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	for {
		f, err := testkit.ReadFrameFrom(c)
		if err != nil {
			return f, err
		}
		if f.Header.RequestSeq != seq || (f.Header.Kind != wire.KindResponse && f.Header.Kind != wire.KindError) {
			continue
		}
		if f.Header.Kind == wire.KindError {
			return f, fmt.Errorf("%s: %s", name, f.Payload)
		}
		return f, nil
	}
}

// attach opens connection i and attaches it to session (a $svc.call of the session
// management's attach, as a presentation's host makes it).
func attach(addr string, i int, session string) (net.Conn, error) {
	c, err := dial(addr, i)
	if err != nil {
		return nil, err
	}
	args, _ := json.Marshal(services.AttachArgs{Session: session})
	md := wire.Metadata{{Key: services.MetaService, Value: services.SessionManagementToken.ID()},
		{Key: services.MetaMember, Value: "attach"}, {Key: services.MetaRequest, Value: "1"}}
	if _, err := request(c, 1, services.NameCall, md, args); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("attach %d: %w", i, err)
	}
	return c, nil
}

// subscribeState subscribes connection i, attached, to its session's ticker state.
func subscribeState(c net.Conn, i int) error {
	md := wire.Metadata{{Key: services.MetaService, Value: TickerToken.ID()}, {Key: services.MetaMember, Value: "value"},
		{Key: services.MetaScope, Value: services.ScopeSession}}
	if _, err := request(c, 2, services.NameSubscribe, md, nil); err != nil {
		return fmt.Errorf("subscribe %d: %w", i, err)
	}
	return nil
}

// subscribe opens connection i and subscribes it to topicName.
func subscribe(addr string, i int, topicName string) (net.Conn, error) {
	c, err := dial(addr, i)
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
	// stamp finds the send time in a delivery's payload (its first bytes, at most
	// stampBytes of them); false: the frame is not a delivery.
	stamp func(head []byte) (int64, bool)

	mu      sync.Mutex
	readers []*reader
}

// reader is one connection's deliveries, kept apart so that reading takes no lock.
type reader struct {
	mu      sync.Mutex
	samples map[string][]int64
}

// stampBytes is how much of a payload stamp looks at.
const stampBytes = 32

// topicStamp: the publish time, the payload's first 8 bytes.
func topicStamp(head []byte) (int64, bool) {
	if len(head) < 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(head)), true
}

// stateStamp: the send time, the JSON value's "t" (the first member): {"t":N,...}.
// The attachment notices and anything else are not deliveries.
func stateStamp(head []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(head, []byte(`{"t":`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return v, err == nil
}

// read reads frames as cheaply as it can: the prefix, then the header skipped, then the
// payload's first bytes (the send time, found by stamp), the rest discarded.
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
		head, err := br.Peek(min(pl, stampBytes))
		if err != nil {
			return
		}
		sent, ok := rs.stamp(head)
		if _, err := br.Discard(pl); err != nil {
			return
		}
		if !ok {
			continue
		}
		now := time.Now().UnixNano()
		lat := now - sent
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
