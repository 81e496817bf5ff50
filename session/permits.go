package session

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Job-queue profiles (zlink-digest §9.2): permits per effective processor.
const (
	ProfileCompact    = 32
	ProfileLowLatency = 64
	ProfileBalanced   = 128
	ProfileThroughput = 256
)

// Pressure thresholds of digest §9.4, in percent of the limit.
const (
	pausePercent  = 80
	resumePercent = 60
)

// permitPool is the host-wide application job queue: a counting semaphore whose permit
// is taken before a packet is pulled from a connection and handed back immediately
// before the session callback's first instruction (digest §9.3). A buffered channel is
// the semaphore because blocked senders queue FIFO, which gives the "oldest waiter
// first" order the spec asks for without a hand-written wait queue.
type permitPool struct {
	sem    chan struct{}
	limit  int64
	pauseN int64
	resume int64

	queued  atomic.Int64 // permits transferred to a mailbox, callback not yet started
	peak    atomic.Int64
	waiters atomic.Int64
	waits   atomic.Int64
	waitNs  atomic.Int64

	mu          sync.Mutex // guards the pressure state machine only
	paused      bool
	pausedSince time.Time
	pausedTotal time.Duration
	toPaused    int64
	toRunning   int64
}

func newPermitPool(limit int) *permitPool {
	p := &permitPool{
		sem:    make(chan struct{}, limit),
		limit:  int64(limit),
		pauseN: (int64(limit)*pausePercent + 99) / 100,
		resume: int64(limit) * resumePercent / 100,
	}
	return p
}

// acquire takes one permit, waiting while none is free. It gives up when ctx is done or
// stop is closed, and then reports false.
func (p *permitPool) acquire(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case p.sem <- struct{}{}:
		p.afterAcquire()
		return true
	default:
	}
	p.waiters.Add(1)
	p.waits.Add(1)
	start := time.Now()
	defer func() {
		p.waiters.Add(-1)
		p.waitNs.Add(int64(time.Since(start)))
	}()
	select {
	case p.sem <- struct{}{}:
		p.afterAcquire()
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

func (p *permitPool) afterAcquire() {
	n := int64(len(p.sem))
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			break
		}
	}
	if n >= p.pauseN {
		p.setPaused(true)
	}
}

// release returns one permit.
func (p *permitPool) release() {
	<-p.sem
	if int64(len(p.sem)) <= p.resume {
		p.setPaused(false)
	}
}

func (p *permitPool) setPaused(paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == paused {
		return
	}
	// Re-check under the lock: a stale observation must not overwrite a newer state.
	n := int64(len(p.sem))
	if paused && n < p.pauseN || !paused && n > p.resume {
		return
	}
	p.paused = paused
	now := time.Now()
	if paused {
		p.toPaused++
		p.pausedSince = now
	} else {
		p.toRunning++
		p.pausedTotal += now.Sub(p.pausedSince)
	}
}

// permitStats is a consistent-enough snapshot for the observable instruments.
type permitStats struct {
	limit, inUse, queued, peak, waiters, waits int64
	waitSeconds                                float64
	paused                                     bool
	toPaused, toRunning                        int64
	pauseCurrent, pauseTotal                   time.Duration
}

func (p *permitPool) stats() permitStats {
	s := permitStats{
		limit:       p.limit,
		inUse:       int64(len(p.sem)),
		queued:      p.queued.Load(),
		peak:        p.peak.Load(),
		waiters:     p.waiters.Load(),
		waits:       p.waits.Load(),
		waitSeconds: time.Duration(p.waitNs.Load()).Seconds(),
	}
	p.mu.Lock()
	s.paused = p.paused
	s.toPaused, s.toRunning = p.toPaused, p.toRunning
	s.pauseTotal = p.pausedTotal
	if p.paused {
		s.pauseCurrent = time.Since(p.pausedSince)
		s.pauseTotal += s.pauseCurrent
	}
	p.mu.Unlock()
	return s
}
