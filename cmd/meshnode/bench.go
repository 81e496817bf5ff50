package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// meshnode bench: a load tool in the manner of nats bench and redis-benchmark. N
// STREAM sessions each send a request, wait for its reply and send the next (at most
// --rate requests a second in all, spread over the sessions), for --duration; with
// --bind each session first binds a room of its own and sends room.echo, which the
// room answers wherever it lives. It prints requests per second, the latency
// percentiles and the errors by code, and exits 1 if any request (or connect, or bind)
// failed.
//
// With --rate, a request's latency counts from when it was due, not from when it was
// sent: a reply that came late delays the requests after it, and their wait is part
// of what a client would have seen (no coordinated omission).

type benchConfig struct {
	stream   string
	sessions int
	duration time.Duration
	rate     float64
	bind     bool
	name     string
	payload  int
	timeout  time.Duration
}

// benchFailed is a run that ended with failures: its report is printed, the binary
// exits 1.
type benchFailed struct{ msg string }

func (e *benchFailed) Error() string { return e.msg }

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c benchConfig
	fs.StringVar(&c.stream, "stream", "tcp://127.0.0.1:7400", "STREAM endpoint of the node to load")
	fs.IntVar(&c.sessions, "sessions", 10, "sessions to open (1..100000)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to send requests")
	fs.Float64Var(&c.rate, "rate", 0, "requests a second, all sessions together (0: as fast as each session's replies come)")
	fs.BoolVar(&c.bind, "bind", false, "bind each session to a room of its own and send room.echo (relayed to the room, wherever it lives)")
	fs.StringVar(&c.name, "request", "", "the Request to send (default echo, or room.echo with --bind)")
	fs.IntVar(&c.payload, "payload", 16, "bytes of the request's JSON payload (about; 2..60000)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "a request without a reply within this fails (code timeout)")
	commandUsage(fs, "bench")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	case c.sessions < 1 || c.sessions > 100000:
		return fmt.Errorf("bench: flag --sessions: %d is not in 1..100000", c.sessions)
	case c.duration <= 0:
		return fmt.Errorf("bench: flag --duration: %s is not positive", c.duration)
	case c.rate < 0 || math.IsNaN(c.rate) || math.IsInf(c.rate, 0):
		return fmt.Errorf("bench: flag --rate: %v is not 0 or positive", c.rate)
	case c.payload < 2 || c.payload > 60000:
		return fmt.Errorf("bench: flag --payload: %d is not in 2..60000", c.payload)
	case c.timeout <= 0:
		return fmt.Errorf("bench: flag --timeout: %s is not positive", c.timeout)
	}
	if c.name == "" {
		c.name = "echo"
		if c.bind {
			c.name = "room.echo"
		}
	}
	if _, err := connector.New(c.stream, connector.Options{}); err != nil {
		return fmt.Errorf("bench: flag --stream: %w", err)
	}
	return bench(ctx, c, stdout)
}

// benchSession is one session of a run.
type benchSession struct {
	c    *connector.Connector
	room string
}

func bench(ctx context.Context, c benchConfig, stdout io.Writer) error {
	var r benchResult
	r.errors = map[string]int64{}
	pace := "as fast as the replies come"
	if c.rate > 0 {
		pace = fmt.Sprintf("at %g requests/s", c.rate)
	}
	fmt.Fprintf(stdout, "meshnode bench: %d sessions to %s, %s for %s, %s\n", c.sessions, c.stream, c.name, c.duration, pace)

	sessions := openSessions(ctx, c, &r)
	defer func() {
		for _, s := range sessions {
			_ = s.c.Close()
		}
	}()
	if len(sessions) == 0 {
		r.print(stdout, 0)
		return &benchFailed{msg: fmt.Sprintf("bench: no session of %d could start on %s: %s", c.sessions, c.stream, r.firstErr)}
	}
	if len(sessions) < c.sessions {
		fmt.Fprintf(stdout, "only %d of %d sessions started: the run goes on with them\n", len(sessions), c.sessions)
	}

	payload := []byte(`"` + strings.Repeat("x", c.payload-2) + `"`)
	start := time.Now()
	end := start.Add(c.duration)
	var interval time.Duration // between two requests of one session
	if c.rate > 0 {
		interval = time.Duration(float64(len(sessions)) / c.rate * float64(time.Second))
	}
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Sessions start spread over one interval, so that a paced run is smooth.
			first := start.Add(interval * time.Duration(i) / time.Duration(len(sessions)))
			r.run(ctx, c, s, payload, first, interval, end)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() == nil {
		elapsed = min(elapsed, c.duration) // the last replies came after the end
	}
	r.print(stdout, elapsed)
	if n := r.failed(); n > 0 {
		return &benchFailed{msg: fmt.Sprintf("bench: %d requests (or sessions) failed", n)}
	}
	return nil
}

// openSessions connects the sessions (64 at a time) and, with --bind, binds each to a
// room of its own; the ones that fail are counted and left out.
func openSessions(ctx context.Context, c benchConfig, r *benchResult) []benchSession {
	run := make([]byte, 4)
	_, _ = rand.Read(run)
	prefix := "bench-" + hex.EncodeToString(run) + "-" // rooms of concurrent runs never meet
	out := make([]benchSession, c.sessions)
	ok := make([]bool, c.sessions)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range c.sessions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cn, err := connector.New(c.stream, connector.Options{Reconnect: connector.ReconnectPolicy{Disabled: true}, RequestTimeout: c.timeout})
			if err != nil {
				r.fail("connect", err)
				return
			}
			cctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			if err := cn.Connect(cctx); err != nil {
				_ = cn.Close()
				r.fail("connect", err)
				return
			}
			s := benchSession{c: cn}
			if c.bind {
				s.room = fmt.Sprintf("%s%d", prefix, i)
				if err := cn.Request(cctx, "bind", map[string]string{"actor": s.room}, nil); err != nil {
					_ = cn.Close()
					r.fail("bind", err)
					return
				}
			}
			out[i], ok[i] = s, true
		}()
	}
	wg.Wait()
	var live []benchSession
	for i, s := range out {
		if ok[i] {
			live = append(live, s)
		}
	}
	return live
}

// run sends one session's requests until end: one at a time, each when it is due
// (every interval from first; as soon as the last reply came when interval is 0).
func (r *benchResult) run(ctx context.Context, c benchConfig, s benchSession, payload []byte, first time.Time, interval time.Duration, end time.Time) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	due := first
	for {
		if interval > 0 {
			if d := time.Until(due); d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
			}
		} else {
			due = time.Now()
		}
		if !due.Before(end) || ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		_, err := s.c.RequestRaw(rctx, c.name, wire.CodecJSON, payload)
		cancel()
		if ctx.Err() != nil {
			return // interrupted: this request is neither counted nor failed
		}
		if err != nil {
			var ce *connector.CloseError
			if !errors.As(err, &ce) && errors.Is(err, connector.ErrDisconnected) {
				// The connection dropped before the request went out: why it dropped
				// (the node's session-closing, say) is the connector's last drop.
				if d := s.c.LastDrop(); d != nil {
					err = d
				}
			}
			r.fail("request", err)
			if errors.Is(err, connector.ErrDisconnected) {
				return // the session is gone: no point in sending more
			}
		} else {
			r.latency.observe(time.Since(due))
		}
		due = due.Add(interval)
	}
}

// benchResult gathers a run's figures from every session.
type benchResult struct {
	latency  latencies
	mu       sync.Mutex
	errors   map[string]int64 // by phase and code
	firstErr string
}

// fail counts a failure under its phase and code.
func (r *benchResult) fail(phase string, err error) {
	code := failureCode(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors[phase+" "+code]++
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

func (r *benchResult) failed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, v := range r.errors {
		n += v
	}
	return n
}

// failureCode is the code a failure is counted under: the Error reply's code, timeout,
// the close reason of a session the node closed, or the kind of a connect failure.
func failureCode(err error) string {
	var re *connector.RemoteError
	var ce *connector.CloseError
	var op *net.OpError
	switch {
	case errors.As(err, &re):
		return re.Code
	case errors.Is(err, connector.ErrRequestTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, connector.ErrConnectTimeout):
		return "timeout"
	case errors.As(err, &ce):
		s := "closed: " + ce.Reason.String()
		if ce.Diagnostic != "" {
			s += " (" + ce.Diagnostic + ")"
		}
		return s
	case errors.As(err, &op):
		return op.Op + ": " + op.Err.Error() // dial: connect: connection refused
	case errors.Is(err, connector.ErrDisconnected):
		return "disconnected"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:] // the cause: "connection refused", ...
	}
	return msg
}

// print writes the report: requests and their rate, latency percentiles, errors by code.
func (r *benchResult) print(w io.Writer, elapsed time.Duration) {
	n := r.latency.count()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(n) / elapsed.Seconds()
	}
	fmt.Fprintf(tw, "requests\t%d ok in %s: %.0f/s\n", n, elapsed.Round(time.Millisecond), rate)
	if n > 0 {
		fmt.Fprintf(tw, "latency\tp50 %s, p90 %s, p99 %s, max %s\n", ms(r.latency.quantile(0.5)), ms(r.latency.quantile(0.9)),
			ms(r.latency.quantile(0.99)), ms(r.latency.max()))
	}
	r.mu.Lock()
	codes := make([]string, 0, len(r.errors))
	for k := range r.errors {
		codes = append(codes, k)
	}
	slices.Sort(codes)
	if len(codes) == 0 {
		fmt.Fprintln(tw, "errors\tnone")
	}
	for i, k := range codes {
		label := ""
		if i == 0 {
			label = "errors"
		}
		fmt.Fprintf(tw, "%s\t%d %s\n", label, r.errors[k], k)
	}
	r.mu.Unlock()
	_ = tw.Flush()
}

// ms writes a duration in milliseconds with three significant digits.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.3f ms", v)
}

// latencies is a histogram of durations shared by every session (atomic counts): 1 %
// wide buckets from 1 µs, so a percentile is within 1 % of the true one; below 1 µs
// one bucket, past about 10 minutes the last.
type latencies struct {
	buckets [latencyBuckets]atomic.Int64
	maxNS   atomic.Int64
}

const (
	latencyBase    = 1.01
	latencyBuckets = 2400 // 1.01^2400 µs is about 10 minutes
)

var logLatencyBase = math.Log(latencyBase)

func (l *latencies) observe(d time.Duration) {
	i := 0
	if us := float64(d) / float64(time.Microsecond); us > 1 {
		i = min(int(math.Log(us)/logLatencyBase)+1, latencyBuckets-1)
	}
	l.buckets[i].Add(1)
	for {
		m := l.maxNS.Load()
		if int64(d) <= m || l.maxNS.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

func (l *latencies) count() int64 {
	var n int64
	for i := range l.buckets {
		n += l.buckets[i].Load()
	}
	return n
}

func (l *latencies) max() time.Duration { return time.Duration(l.maxNS.Load()) }

// quantile is the upper bound of the bucket that holds the q quantile, at most max.
func (l *latencies) quantile(q float64) time.Duration {
	n := l.count()
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i := range l.buckets {
		if seen += l.buckets[i].Load(); seen >= rank {
			upper := time.Duration(math.Pow(latencyBase, float64(i)) * float64(time.Microsecond))
			return min(upper, l.max())
		}
	}
	return l.max()
}
