package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimiter_OncePerIntervalWithSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := &Limiter{Interval: 50 * time.Millisecond}
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
	deadline := time.Now().Add(5 * time.Second)
	refused := 0 // the polling below is suppressed too
	for {
		if ok, suppressed := l.Allow("a"); ok {
			if suppressed != 4+refused {
				t.Fatalf("suppressed = %d, want %d", suppressed, 4+refused)
			}
			return
		}
		refused++
		if time.Now().After(deadline) {
			t.Fatal("cause a never allowed again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
