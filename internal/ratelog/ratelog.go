package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is how often one cause is logged at most.
const DefaultInterval = time.Minute

// maxCauses bounds the memory of causes; past it the memory is simply reset.
const maxCauses = 1024

// Limiter logs each cause (a string key) at most once per Interval.
type Limiter struct {
	Interval time.Duration // 0: DefaultInterval

	now  func() time.Time // nil: time.Now (tests set a clock)
	mu   sync.Mutex
	seen map[string]*cause
}

type cause struct {
	last       time.Time
	suppressed int
}

// Allow reports whether key may be logged now, and how many times it was suppressed
// since it was last logged.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	interval := l.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	now := time.Now
	if l.now != nil {
		now = l.now
	}
	t := now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]*cause{}
	}
	c := l.seen[key]
	if c != nil && t.Sub(c.last) < interval {
		c.suppressed++
		return false, 0
	}
	if c == nil {
		if len(l.seen) >= maxCauses {
			l.seen = map[string]*cause{}
		}
		c = &cause{}
		l.seen[key] = c
	}
	suppressed = c.suppressed
	c.last, c.suppressed = t, 0
	return true, suppressed
}

// Log logs msg with args at level when key is allowed, adding suppressed_since_last
// when earlier occurrences were suppressed.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	l.LogFunc(log, level, key, msg, func() []any { return args })
}

// LogFunc is Log with args built only when key is allowed: for a cause that can
// repeat thousands of times a second, a suppressed occurrence then costs no more
// than the key.
func (l *Limiter) LogFunc(log *slog.Logger, level slog.Level, key, msg string, args func() []any) {
	ok, suppressed := l.Allow(key)
	if !ok {
		return
	}
	a := args()
	if suppressed > 0 {
		a = append(a, "suppressed_since_last", suppressed)
	}
	log.Log(context.Background(), level, msg, a...)
}
