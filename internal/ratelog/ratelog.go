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
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]*cause{}
	}
	c := l.seen[key]
	if c != nil && now.Sub(c.last) < interval {
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
	c.last, c.suppressed = now, 0
	return true, suppressed
}

// Log logs msg with args at level when key is allowed, adding suppressed_since_last
// when earlier occurrences were suppressed.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	ok, suppressed := l.Allow(key)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	log.Log(context.Background(), level, msg, args...)
}
