package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time for a Limiter's now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestLimiter_OncePerIntervalWithSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	clk := newClock()
	l := &Limiter{Interval: time.Second, now: clk.Now}
	for range 5 {
		l.Log(log, slog.LevelWarn, "a", "cause a")
	}
	l.Log(log, slog.LevelWarn, "b", "cause b")
	if n := strings.Count(buf.String(), "cause a"); n != 1 {
		t.Fatalf("cause a logged %d times in one interval, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "cause b") {
		t.Fatalf("another cause was suppressed:\n%s", buf.String())
	}
	clk.Advance(time.Second - time.Nanosecond)
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("cause a allowed before its interval ended")
	}
	clk.Advance(time.Nanosecond)
	if ok, suppressed := l.Allow("a"); !ok || suppressed != 5 {
		t.Fatalf("at the interval's end: ok=%v suppressed=%d, want true 5 (4 logs and 1 Allow)", ok, suppressed)
	}
}

// The second interval logs the cause again, with how many were suppressed in the
// first; the third, after nothing was suppressed, logs it without the count.
func TestLimiter_SecondIntervalLogsAgainWithSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))
	clk := newClock()
	l := &Limiter{now: clk.Now} // DefaultInterval
	for range 7 {
		l.Log(log, slog.LevelWarn, "k", "cause", "n", 1)
		clk.Advance(DefaultInterval / 10)
	}
	clk.Advance(DefaultInterval) // well into the second interval
	l.Log(log, slog.LevelWarn, "k", "cause", "n", 2)
	l.Log(log, slog.LevelWarn, "k", "cause", "n", 3) // suppressed in the second
	clk.Advance(DefaultInterval)
	l.Log(log, slog.LevelWarn, "k", "cause", "n", 4)
	want := "level=WARN msg=cause n=1\n" +
		"level=WARN msg=cause n=2 suppressed_since_last=6\n" +
		"level=WARN msg=cause n=4 suppressed_since_last=1\n"
	if buf.String() != want {
		t.Fatalf("logged:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	clk.Advance(DefaultInterval)
	l.Log(log, slog.LevelWarn, "k", "cause", "n", 5)
	if want := "level=WARN msg=cause n=5\n"; buf.String() != want {
		t.Fatalf("after an interval with nothing suppressed, logged %q, want %q", buf.String(), want)
	}
}

// LogFunc builds its args only for the occurrences it logs.
func TestLimiter_LogFuncBuildsArgsOnlyWhenLogging(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	clk := newClock()
	l := &Limiter{Interval: time.Second, now: clk.Now}
	built := 0
	args := func() []any { built++; return []any{"x", built} }
	for range 3 {
		l.LogFunc(log, slog.LevelWarn, "k", "cause", args)
	}
	clk.Advance(time.Second)
	l.LogFunc(log, slog.LevelWarn, "k", "cause", args)
	if built != 2 {
		t.Fatalf("args built %d times, want 2 (once per line logged)", built)
	}
	if n := strings.Count(buf.String(), "msg=cause"); n != 2 {
		t.Fatalf("logged %d lines, want 2:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "x=2 suppressed_since_last=2") {
		t.Fatalf("second line lacks its args and the suppressed count:\n%s", buf.String())
	}
}

// noTime leaves the time out of a text log line, so that a test compares whole lines.
func noTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
